package server

import (
	"reflect"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"
)

func TestConfigOptions(t *testing.T) {
	// An empty configuration is the kubelet's defaults.
	o := ConfigOptions(&kubeletconfig.KubeletConfiguration{})
	if o.Authentication.Anonymous || o.Authentication.DisableWebhook || o.DisableDebuggingHandlers || o.DisableSystemLogHandler || o.DisableProfilingHandler || o.EnableSystemLogQuery {
		t.Errorf("defaults: %+v", o)
	}
	kc := &kubeletconfig.KubeletConfiguration{
		Address: "127.0.0.1", Port: 11250, ReadOnlyPort: 10255,
		TLSCertFile: "c", TLSPrivateKeyFile: "k", ServerTLSBootstrap: true,
		TLSMinVersion: "VersionTLS13", TLSCipherSuites: []string{"TLS_AES_128_GCM_SHA256"},
		Authentication: kubeletconfig.KubeletAuthentication{
			X509:      kubeletconfig.KubeletX509Authentication{ClientCAFile: "ca"},
			Webhook:   kubeletconfig.KubeletWebhookAuthentication{Enabled: ptr.To(false), CacheTTL: metav1.Duration{Duration: time.Minute}},
			Anonymous: kubeletconfig.KubeletAnonymousAuthentication{Enabled: ptr.To(true)},
		},
		Authorization: kubeletconfig.KubeletAuthorization{
			Mode: kubeletconfig.KubeletAuthorizationModeAlwaysAllow,
			Webhook: kubeletconfig.KubeletWebhookAuthorization{
				CacheAuthorizedTTL: metav1.Duration{Duration: time.Hour}, CacheUnauthorizedTTL: metav1.Duration{Duration: time.Second},
			},
		},
		EnableDebuggingHandlers: ptr.To(false), EnableSystemLogHandler: ptr.To(false),
		EnableSystemLogQuery: ptr.To(true), EnableProfilingHandler: ptr.To(false),
		RuntimeRequestTimeout: metav1.Duration{Duration: 30 * time.Second},
	}
	want := Options{
		Address: "127.0.0.1", Port: 11250, ReadOnlyPort: 10255,
		TLS:                      TLSOptions{CertFile: "c", KeyFile: "k", Bootstrap: true, MinVersion: "VersionTLS13", CipherSuites: []string{"TLS_AES_128_GCM_SHA256"}},
		Authentication:           AuthnOptions{Anonymous: true, ClientCAFile: "ca", DisableWebhook: true, CacheTTL: time.Minute},
		Authorization:            AuthzOptions{Mode: AuthorizationModeAlwaysAllow, AuthorizedTTL: time.Hour, UnauthorizedTTL: time.Second},
		DisableDebuggingHandlers: true, DisableSystemLogHandler: true, EnableSystemLogQuery: true, DisableProfilingHandler: true,
		RuntimeRequestTimeout: 30 * time.Second,
	}
	if got := ConfigOptions(kc); !reflect.DeepEqual(got, want) {
		t.Errorf("ConfigOptions\n got %+v\nwant %+v", got, want)
	}
}
