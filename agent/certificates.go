package agent

import (
	"context"
	"fmt"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/nodekit/nodekit/certificate"
	"github.com/nodekit/nodekit/internal/runner"
)

// RotationOptions returns the client certificate rotation's options
// (certificate.NewClientRotation), without its Registerer.
func (cfg *Config) RotationOptions() certificate.RotationOptions {
	return certificate.RotationOptions{
		KubeconfigPath:          cfg.KubeconfigPath,
		BootstrapKubeconfigPath: cfg.BootstrapKubeconfigPath,
		CertDir:                 cfg.CertDir,
		NodeName:                cfg.NodeName,
	}
}

// provideClients is Core's *Clients: NewClients, or with
// rotateCertificates the same clients on the rotating transport, as the
// kubelet's: client-go's certificate manager renews the client
// certificate while the agent runs, every client (pod source, status,
// Lease, events, volumes, CSI, …) presents its current certificate, and a
// renewal closes the connections so the next request uses the new one. A
// certificate that expires unrenewed while the API server answers stops
// the agent (exit code 1), for its supervisor to start it afresh.
func provideClients(lc fx.Lifecycle, sd fx.Shutdowner, cfg *Config, logger logr.Logger, reg prometheus.Registerer) (*Clients, error) {
	if !cfg.Kubelet.RotateCertificates {
		return NewClients(cfg)
	}
	if cfg.KubeconfigPath == "" {
		return nil, fmt.Errorf("no --kubeconfig given: node %q has no API server to talk to (agent.New runs it standalone)", cfg.NodeName)
	}
	o := cfg.RotationOptions()
	o.Registerer = reg
	logger = logger.WithName("certificate")
	m, err := certificate.NewClientRotation(klog.NewContext(context.Background(), logger), o)
	if err != nil {
		return nil, err
	}
	restCfg, err := clientcmd.BuildConfigFromFlags("", cfg.KubeconfigPath)
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig %q: %w", cfg.KubeconfigPath, err)
	}
	c, rotating, err := newClients(cfg, restCfg, m)
	if err != nil {
		return nil, err
	}
	logger.V(2).Info("Starting client certificate rotation")
	lc.Append(fx.StartStopHook(m.Start, m.Stop))
	runner.Hook(lc, sd, logger, "transport", rotating.Run)
	return c, nil
}
