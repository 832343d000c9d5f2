package volume

import (
	"context"
	"fmt"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/klog/v2"
)

// defaultTokenExpirationSeconds is the API's default expirationSeconds of
// a serviceAccountToken projection.
const defaultTokenExpirationSeconds int64 = 3600

// projectedPlugin projects configMaps, secrets, the downward API and
// service-account tokens into one volume, on a tmpfs as the kubelet's.
// clusterTrustBundle and podCertificate sources are not supported: a pod
// using one fails to mount with an error saying so.
type projectedPlugin struct{ atomicVolume }

func (*projectedPlugin) Name() string { return PluginProjected }

func (*projectedPlugin) CanSupport(vol *v1.Volume) bool { return vol.Projected != nil }

func (p *projectedPlugin) SetUp(ctx context.Context, vc *VolumeContext) (Mounted, error) {
	payload, err := projectedPayload(ctx, vc)
	if err != nil {
		klog.FromContext(ctx).Error(err, "Error preparing data for projected volume", "volume", vc.Name, "pod", klog.KObj(vc.Pod))
		return Mounted{}, err
	}
	return p.setUp(ctx, vc, payload)
}

func (p *projectedPlugin) TearDown(ctx context.Context, vc *VolumeContext) error {
	return p.tearDown(ctx, vc)
}

// projectedPayload collects the files of every source, later sources
// overriding earlier ones on the same path, and every source's error, as
// the kubelet's projected plugin.
func projectedPayload(ctx context.Context, vc *VolumeContext) (map[string]FileProjection, error) {
	src := vc.Volume.Projected
	defaultMode := fileMode(src.DefaultMode)
	pod := vc.Pod
	var errs []error
	payload := map[string]FileProjection{}
	merge := func(m map[string]FileProjection) {
		for k, v := range m {
			payload[k] = v
		}
	}
	for _, s := range src.Sources {
		switch {
		case s.Secret != nil:
			secret, err := getSecretOrEmpty(ctx, vc, s.Secret.Name, s.Secret.Optional)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			m, err := secretPayload(s.Secret.Items, secret, defaultMode, isTrue(s.Secret.Optional))
			if err != nil {
				errs = append(errs, err)
				continue
			}
			merge(m)
		case s.ConfigMap != nil:
			cm, err := getConfigMapOrEmpty(ctx, vc, s.ConfigMap.Name, s.ConfigMap.Optional)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			m, err := configMapPayload(s.ConfigMap.Items, cm, defaultMode, isTrue(s.ConfigMap.Optional))
			if err != nil {
				errs = append(errs, err)
				continue
			}
			merge(m)
		case s.DownwardAPI != nil:
			m, err := downwardAPIPayload(s.DownwardAPI.Items, pod, vc.Host.NodeAllocatable(), defaultMode)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			merge(m)
		case s.ServiceAccountToken != nil:
			tp := s.ServiceAccountToken
			// With an owner or group set, ownership gives the access
			// and the file is private to it.
			mode := defaultMode
			if vc.FSUser != nil || vc.FSGroup != nil {
				mode = 0o600
			}
			var audiences []string
			if tp.Audience != "" {
				audiences = []string{tp.Audience}
			}
			exp := tp.ExpirationSeconds
			if exp == nil {
				d := defaultTokenExpirationSeconds
				exp = &d
			}
			sa := pod.Spec.ServiceAccountName
			if sa == "" {
				sa = "default"
			}
			tr, err := vc.Host.ServiceAccountToken(ctx, pod.Namespace, sa, &authenticationv1.TokenRequest{
				Spec: authenticationv1.TokenRequestSpec{
					Audiences:         audiences,
					ExpirationSeconds: exp,
					BoundObjectRef: &authenticationv1.BoundObjectReference{
						APIVersion: "v1",
						Kind:       "Pod",
						Name:       pod.Name,
						UID:        pod.UID,
					},
				},
			})
			if err != nil {
				errs = append(errs, err)
				continue
			}
			payload[tp.Path] = FileProjection{Data: []byte(tr.Status.Token), Mode: mode, FsUser: vc.FSUser}
		case s.ClusterTrustBundle != nil:
			errs = append(errs, fmt.Errorf("clusterTrustBundle projection of volume %q is not supported by this node agent", vc.Name))
		case s.PodCertificate != nil:
			errs = append(errs, fmt.Errorf("podCertificate projection of volume %q is not supported by this node agent", vc.Name))
		}
	}
	return payload, utilerrors.NewAggregate(errs)
}
