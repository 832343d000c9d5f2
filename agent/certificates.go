package agent

import (
	"context"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"
	"k8s.io/klog/v2"

	"github.com/nodekit/nodekit/certificate"
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

// startClientRotation runs the client certificate's rotation while the
// agent runs, when rotateCertificates is set (Core only: a standalone node
// has no client certificate).
func startClientRotation(lc fx.Lifecycle, cfg *Config, logger logr.Logger, reg prometheus.Registerer) error {
	if !cfg.Kubelet.RotateCertificates {
		return nil
	}
	o := cfg.RotationOptions()
	o.Registerer = reg
	m, err := certificate.NewClientRotation(klog.NewContext(context.Background(), logger.WithName("certificate")), o)
	if err != nil {
		return err
	}
	lc.Append(fx.StartStopHook(m.Start, m.Stop))
	return nil
}
