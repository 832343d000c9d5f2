// Command customsource is a nodekit agent with a pod source of its own: the
// pods it runs come from the API server, the manifest directory and URL as
// usual, and also from code — here a node-exporter pod on every node, whose
// image tag is read from a file an operator may change at any time. A
// custom source is one value in the pod sources group
// (podsource.AsSource); its pods are static pods, so the agent runs them
// without an API server and shows them to the cluster as mirror pods.
//
//	go run ./examples/customsource --kubeconfig=/etc/kubernetes/kubelet.conf ...
//	echo v1.9.1 > /etc/nodekit/exporter-version     # the pod is replaced
//
// Without --kubeconfig it runs standalone, like examples/standalone (which
// also shows how to start the fake runtime in-process).
package main

import (
	"context"
	"os"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/nodekit/nodekit/agent"
	"github.com/nodekit/nodekit/podsource"
	"github.com/nodekit/nodekit/podsource/manifest"
)

// versionFile holds the exporter's image tag; defaultVersion applies while
// it does not exist.
const (
	versionFile    = "/etc/nodekit/exporter-version"
	defaultVersion = "v1.9.0"
)

// exporterSource runs one node-exporter pod, built in code.
type exporterSource struct {
	nodeName string
	// check is how often versionFile is read.
	check time.Duration
}

// Name is the pod's kubernetes.io/config.source; it must be unique among
// the agent's sources ("api", "file" and "http" are taken).
func (exporterSource) Name() string { return "exporter" }

// Run sends the source's complete set of pods whenever it changes, and
// once at start: the agent removes nothing it does not know until every
// source sent its first set.
func (s exporterSource) Run(ctx context.Context, out chan<- []*v1.Pod) error {
	logger := klog.FromContext(ctx)
	t := time.NewTicker(s.check)
	defer t.Stop()
	last, sent := "", false
	for {
		version := readVersion()
		var pods []*v1.Pod
		send := false
		if version != last {
			pod, err := s.pod(version)
			switch {
			case err == nil:
				pods, send = []*v1.Pod{pod}, true
			case !sent:
				// Nothing to run yet, but the agent learns the source
				// reported: it waits for every source before it removes
				// pods it does not know.
				logger.Error(err, "No exporter pod", "version", version)
				pods, send = []*v1.Pod{}, true
			default:
				// A bad version is the operator's to fix; the pod last
				// sent keeps running meanwhile.
				logger.Error(err, "Not changing the exporter pod", "version", version)
			}
		}
		if send {
			select {
			case out <- pods:
				sent = true
				if len(pods) > 0 {
					last = version
				}
			case <-ctx.Done():
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// pod builds the exporter pod of version and completes it as the manifest
// sources do: the API server's defaults, then the kubelet's static pod
// fields (name <name>-<node>, UID and config hash from its content, node
// name), then validation.
func (s exporterSource) pod(version string) (*v1.Pod, error) {
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "node-exporter", Namespace: "kube-system", Labels: map[string]string{"app": "node-exporter"}},
		Spec: v1.PodSpec{
			HostNetwork: true,
			HostPID:     true,
			Containers: []v1.Container{{
				Name:  "exporter",
				Image: "quay.io/prometheus/node-exporter:" + version,
				Args:  []string{"--path.rootfs=/host"},
				Ports: []v1.ContainerPort{{Name: "metrics", ContainerPort: 9100}},
				VolumeMounts: []v1.VolumeMount{{
					Name: "root", MountPath: "/host", ReadOnly: true,
					MountPropagation: ptr(v1.MountPropagationHostToContainer),
				}},
			}},
			Volumes: []v1.Volume{{Name: "root", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: "/"}}}},
		},
	}
	podsource.SetDefaults(pod)
	if err := manifest.SetStaticDefaults(pod, s.nodeName, s.Name(), "builtin"); err != nil {
		return nil, err
	}
	return pod, manifest.Validate(pod)
}

func readVersion() string {
	data, err := os.ReadFile(versionFile)
	if v := strings.TrimSpace(string(data)); err == nil && v != "" {
		return v
	}
	return defaultVersion
}

func ptr[T any](v T) *T { return &v }

func main() {
	os.Exit(agent.Run(os.Args[1:],
		// The source's constructor takes what it needs from the agent's
		// graph; AsSource puts what it returns into the sources group.
		podsource.AsSource(func(cfg *agent.Config) podsource.Source {
			return exporterSource{nodeName: cfg.NodeName, check: 10 * time.Second}
		}),
	))
}
