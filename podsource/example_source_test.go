package podsource_test

import (
	"context"
	"fmt"

	"go.uber.org/fx"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodekit/nodekit/podsource"
	"github.com/nodekit/nodekit/podsource/manifest"
)

// exporterSource is an embedder's pod source: it runs one pod of its own
// on the node, built in code rather than read from a manifest.
type exporterSource struct{ nodeName string }

func (exporterSource) Name() string { return "exporter" }

func (s exporterSource) Run(ctx context.Context, out chan<- []*v1.Pod) error {
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "node-exporter", Namespace: "monitoring"},
		Spec: v1.PodSpec{
			HostNetwork: true,
			Containers: []v1.Container{{
				Name: "exporter", Image: "quay.io/prometheus/node-exporter:v1.9.0",
				Ports: []v1.ContainerPort{{ContainerPort: 9100}},
			}},
		},
	}
	// The API server's defaults, then what the kubelet sets on static pods
	// (name, UID, config hash, node name), as the file source does.
	podsource.SetDefaults(pod)
	if err := manifest.SetStaticDefaults(pod, s.nodeName, s.Name(), "builtin"); err != nil {
		return err
	}
	if err := manifest.Validate(pod); err != nil {
		return err
	}
	select {
	case out <- []*v1.Pod{pod}:
	case <-ctx.Done():
		return nil
	}
	<-ctx.Done()
	return nil
}

// A custom pod source is one more value in the "pod_sources" group, added
// with AsSource: the Config merges it with the others, and its pods are
// static pods (the agent creates mirror pods for them).
func ExampleSource() {
	var cfg *podsource.Config
	app := fx.New(fx.NopLogger,
		podsource.AsSource(func() podsource.Source { return exporterSource{nodeName: "node-a"} }),
		podsource.Module,
		fx.Populate(&cfg),
	)
	ctx := context.Background()
	if err := app.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = app.Stop(ctx) }()

	u := <-cfg.Updates()
	p := u.Pods[0]
	fmt.Println(u.Op, u.Source, p.Namespace+"/"+p.Name, "static:", podsource.IsStaticPod(p))
	fmt.Println(p.Spec.RestartPolicy, p.Spec.Containers[0].ImagePullPolicy, p.Spec.Containers[0].Ports[0].HostPort)
	// Output:
	// ADD exporter monitoring/node-exporter-node-a static: true
	// Always IfNotPresent 9100
}
