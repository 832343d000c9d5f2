package server

import (
	kubeletconfig "k8s.io/kubelet/config/v1beta1"
)

// ConfigOptions returns the Options fields a KubeletConfiguration sets:
// address, ports, TLS, authentication, authorization, the debugging
// handler switches and the runtime request timeout. Unset (nil or zero)
// fields take the kubelet's defaults. The caller adds what a configuration
// does not carry: NodeName, NodeAddresses, TLS.CertDirectory (the
// --cert-dir flag), Client, Pods, PodStatus, Runtime, the stats funcs, the
// gatherers, Configz and the Registerer.
func ConfigOptions(kc *kubeletconfig.KubeletConfiguration) Options {
	o := Options{
		Address:      kc.Address,
		Port:         kc.Port,
		ReadOnlyPort: kc.ReadOnlyPort,
		TLS: TLSOptions{
			CertFile:     kc.TLSCertFile,
			KeyFile:      kc.TLSPrivateKeyFile,
			Bootstrap:    kc.ServerTLSBootstrap,
			MinVersion:   kc.TLSMinVersion,
			CipherSuites: kc.TLSCipherSuites,
		},
		Authentication: AuthnOptions{
			Anonymous:      isTrue(kc.Authentication.Anonymous.Enabled, false),
			ClientCAFile:   kc.Authentication.X509.ClientCAFile,
			DisableWebhook: !isTrue(kc.Authentication.Webhook.Enabled, true),
			CacheTTL:       kc.Authentication.Webhook.CacheTTL.Duration,
		},
		Authorization: AuthzOptions{
			Mode:            string(kc.Authorization.Mode),
			AuthorizedTTL:   kc.Authorization.Webhook.CacheAuthorizedTTL.Duration,
			UnauthorizedTTL: kc.Authorization.Webhook.CacheUnauthorizedTTL.Duration,
		},
		DisableDebuggingHandlers: !isTrue(kc.EnableDebuggingHandlers, true),
		DisableSystemLogHandler:  !isTrue(kc.EnableSystemLogHandler, true),
		EnableSystemLogQuery:     isTrue(kc.EnableSystemLogQuery, false),
		DisableProfilingHandler:  !isTrue(kc.EnableProfilingHandler, true),
		RuntimeRequestTimeout:    kc.RuntimeRequestTimeout.Duration,
	}
	return o
}

func isTrue(b *bool, def bool) bool {
	if b == nil {
		return def
	}
	return *b
}
