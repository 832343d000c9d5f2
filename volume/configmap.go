package volume

import (
	"context"
	"errors"
	"fmt"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
)

// configMapPlugin projects a configMap's keys as files. Like the kubelet's
// it writes to the node's disk (not a tmpfs).
type configMapPlugin struct{ atomicVolume }

func (*configMapPlugin) Name() string { return PluginConfigMap }

func (*configMapPlugin) CanSupport(vol *v1.Volume) bool { return vol.ConfigMap != nil }

func (p *configMapPlugin) SetUp(ctx context.Context, vc *VolumeContext) (Mounted, error) {
	src := vc.Volume.ConfigMap
	cm, err := getConfigMapOrEmpty(ctx, vc, src.Name, src.Optional)
	if err != nil {
		return Mounted{}, err
	}
	klog.FromContext(ctx).V(3).Info("Received configMap", "configMap", klog.KRef(vc.Pod.Namespace, src.Name),
		"pieces", len(cm.Data)+len(cm.BinaryData))
	payload, err := configMapPayload(src.Items, cm, fileMode(src.DefaultMode), isTrue(src.Optional))
	if err != nil {
		return Mounted{}, err
	}
	return p.setUp(ctx, vc, payload)
}

func (p *configMapPlugin) TearDown(ctx context.Context, vc *VolumeContext) error {
	return p.tearDown(ctx, vc)
}

// getConfigMapOrEmpty returns the configMap, or an empty one when it does
// not exist and optional is true.
func getConfigMapOrEmpty(ctx context.Context, vc *VolumeContext, name string, optional *bool) (*v1.ConfigMap, error) {
	cm, err := vc.Host.ConfigMap(ctx, vc.Pod.Namespace, name)
	if err != nil {
		if !apierrors.IsNotFound(err) || !isTrue(optional) {
			return nil, err
		}
		cm = &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: vc.Pod.Namespace, Name: name}}
	}
	return cm, nil
}

// configMapPayload maps a configMap's keys to files: every key of data and
// binaryData when items is empty, otherwise the items (a missing key is an
// error unless optional). The kubelet's alpha per-item user fields are not
// implemented, as with the kubelet's default feature gates.
func configMapPayload(items []v1.KeyToPath, cm *v1.ConfigMap, defaultMode int32, optional bool) (map[string]FileProjection, error) {
	payload := make(map[string]FileProjection, len(cm.Data)+len(cm.BinaryData))
	if len(items) == 0 {
		for k, d := range cm.Data {
			payload[k] = FileProjection{Data: []byte(d), Mode: defaultMode}
		}
		for k, d := range cm.BinaryData {
			payload[k] = FileProjection{Data: d, Mode: defaultMode}
		}
		return payload, nil
	}
	for _, it := range items {
		var data []byte
		if s, ok := cm.Data[it.Key]; ok {
			data = []byte(s)
		} else if b, ok := cm.BinaryData[it.Key]; ok {
			data = b
		} else {
			if optional {
				continue
			}
			return nil, fmt.Errorf("configmap references non-existent config key: %s", it.Key)
		}
		payload[it.Path] = FileProjection{Data: data, Mode: itemMode(it.Mode, defaultMode)}
	}
	return payload, nil
}

// secretPlugin projects a secret's keys as files, on a tmpfs as the
// kubelet's (secrets never touch the node's disk).
type secretPlugin struct{ atomicVolume }

func (*secretPlugin) Name() string { return PluginSecret }

func (*secretPlugin) CanSupport(vol *v1.Volume) bool { return vol.Secret != nil }

func (p *secretPlugin) SetUp(ctx context.Context, vc *VolumeContext) (Mounted, error) {
	src := vc.Volume.Secret
	s, err := getSecretOrEmpty(ctx, vc, src.SecretName, src.Optional)
	if err != nil {
		return Mounted{}, err
	}
	klog.FromContext(ctx).V(3).Info("Received secret", "secret", klog.KRef(vc.Pod.Namespace, src.SecretName), "pieces", len(s.Data))
	payload, err := secretPayload(src.Items, s, fileMode(src.DefaultMode), isTrue(src.Optional))
	if err != nil {
		return Mounted{}, err
	}
	return p.setUp(ctx, vc, payload)
}

func (p *secretPlugin) TearDown(ctx context.Context, vc *VolumeContext) error {
	return p.tearDown(ctx, vc)
}

// getSecretOrEmpty returns the secret, or an empty one when it does not
// exist and optional is true.
func getSecretOrEmpty(ctx context.Context, vc *VolumeContext, name string, optional *bool) (*v1.Secret, error) {
	s, err := vc.Host.Secret(ctx, vc.Pod.Namespace, name)
	if err != nil {
		if !apierrors.IsNotFound(err) || !isTrue(optional) {
			return nil, err
		}
		s = &v1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: vc.Pod.Namespace, Name: name}}
	}
	return s, nil
}

// secretPayload maps a secret's keys to files as configMapPayload does.
func secretPayload(items []v1.KeyToPath, s *v1.Secret, defaultMode int32, optional bool) (map[string]FileProjection, error) {
	payload := make(map[string]FileProjection, len(s.Data))
	if len(items) == 0 {
		for k, d := range s.Data {
			payload[k] = FileProjection{Data: d, Mode: defaultMode}
		}
		return payload, nil
	}
	for _, it := range items {
		d, ok := s.Data[it.Key]
		if !ok {
			if optional {
				continue
			}
			return nil, errors.New("references non-existent secret key: " + it.Key)
		}
		payload[it.Path] = FileProjection{Data: d, Mode: itemMode(it.Mode, defaultMode)}
	}
	return payload, nil
}

func itemMode(m *int32, defaultMode int32) int32 {
	if m != nil {
		return *m
	}
	return defaultMode
}

func isTrue(b *bool) bool { return b != nil && *b }
