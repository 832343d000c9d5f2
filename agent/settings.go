package agent

import (
	"reflect"
	"slices"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"

	"github.com/go-logr/logr"

	"github.com/nodekit/nodekit/features"
	"github.com/nodekit/nodekit/pods"
)

// implementedSettings are the kubelet settings nodekit acts on: the
// KubeletConfiguration fields by their path in the file
// ("authentication.x509.clientCAFile"; a map or a list is one setting) and
// the settings the kubelet takes only on its command line by flag
// ("--root-dir"). Any other setting given a value other than its default is
// accepted, so an operator's file and unit file keep working, and logged at
// startup as accepted but not implemented (klog's own flags, such as --v,
// are always implemented).
//
// A non-empty value marks a setting nodekit implements only in part and
// says which part; it is logged with that note whenever it is set.
//
// Add a setting here in the change that implements it; the tests check
// that every entry names a real field or flag.
var implementedSettings = map[string]string{
	// The command line.
	"--config":               "",
	"--bootstrap-kubeconfig": "",
	"rotateCertificates":     "",
	"--kubeconfig":           "",
	"--hostname-override":    "",
	"--node-ip":              "",
	"--node-labels":          "",
	"--root-dir":             "",

	// Node registration, status and Lease.
	"registerNode":                  "",
	"registerWithTaints":            "",
	"providerID":                    "",
	"--cloud-provider":              "",
	"nodeStatusUpdateFrequency":     "",
	"nodeStatusReportFrequency":     "",
	"nodeLeaseDurationSeconds":      "",
	"nodeStatusMaxImages":           "",
	"maxPods":                       "",
	"podsPerCore":                   "",
	"kubeReserved":                  "",
	"systemReserved":                "",
	"localStorageCapacityIsolation": "",

	// Node-pressure eviction (eviction/) and the volume usage it reads.
	"evictionHard":                     "",
	"evictionSoft":                     "",
	"evictionSoftGracePeriod":          "",
	"evictionMinimumReclaim":           "",
	"evictionMaxPodGracePeriod":        "",
	"evictionPressureTransitionPeriod": "",
	"mergeDefaultEvictionSettings":     "",
	"kernelMemcgNotification":          "",
	"volumeStatsAggPeriod":             "",

	// The node API (server/).
	"--cert-dir":                                 "",
	"enableServer":                               "",
	"address":                                    "",
	"port":                                       "",
	"readOnlyPort":                               "",
	"tlsCertFile":                                "",
	"tlsPrivateKeyFile":                          "",
	"tlsMinVersion":                              "",
	"tlsCipherSuites":                            "",
	"serverTLSBootstrap":                         "",
	"authentication.anonymous.enabled":           "",
	"authentication.x509.clientCAFile":           "",
	"authentication.webhook.enabled":             "",
	"authentication.webhook.cacheTTL":            "",
	"authorization.mode":                         "",
	"authorization.webhook.cacheAuthorizedTTL":   "",
	"authorization.webhook.cacheUnauthorizedTTL": "",
	"enableDebuggingHandlers":                    "",
	"enableSystemLogHandler":                     "",
	"enableProfilingHandler":                     "",
	"enableSystemLogQuery":                       "/logs/ serves files; the journal query mode is not implemented",

	// The apiserver clients and events.
	"contentType":    "",
	"kubeAPIQPS":     "",
	"kubeAPIBurst":   "",
	"eventRecordQPS": "",
	"eventBurst":     "",

	// healthz and metrics.
	"healthzBindAddress": "",
	"healthzPort":        "",

	// The container runtime, images and pods.
	"containerRuntimeEndpoint":               "",
	"imageServiceEndpoint":                   "",
	"runtimeRequestTimeout":                  "",
	"serializeImagePulls":                    "",
	"imagePullCredentialsVerificationPolicy": "",
	"preloadedImagesVerificationAllowlist":   "",
	"maxParallelImagePulls":                  "",
	"registryPullQPS":                        "",
	"registryBurst":                          "",
	"syncFrequency":                          "",
	"podLogsDir":                             "",
	"clusterDNS":                             "",
	"clusterDomain":                          "",
	"resolvConf":                             "",

	// The cap of a crashing container's restart back-off (runtime/:
	// PodManagerOptions.MaxContainerBackOff).
	"crashLoopBackOff.maxContainerRestartPeriod": "",

	// Container and image garbage collection, container log rotation
	// (runtime/: ImageGC, LogRotator, the container GC policy).
	"imageGCHighThresholdPercent":             "",
	"imageGCLowThresholdPercent":              "",
	"imageMinimumGCAge":                       "",
	"imageMaximumGCAge":                       "",
	"containerLogMaxSize":                     "",
	"containerLogMaxFiles":                    "",
	"containerLogMaxWorkers":                  "",
	"containerLogMonitorInterval":             "",
	"--minimum-container-ttl-duration":        "",
	"--maximum-dead-containers-per-container": "",
	"--maximum-dead-containers":               "",
	"--pod-infra-container-image":             "",
	"seccompDefault":                          "",

	// Swap (agent/swap.go, runtime/swap.go): the start-time check and
	// the containers' swap limits.
	"failSwapOn":              "",
	"memorySwap.swapBehavior": "",

	// Pod admission (pods/podspec.go): the Sysctls admit handler.
	"allowedUnsafeSysctls": "",

	// The volume manager (volume/): configMap and secret contents always
	// follow watches.
	"configMapAndSecretChangeDetectionStrategy": "Watch only: Get, Cache and None behave as Watch",

	// Static pods (agent/staticpods.go): the manifest directory and URL
	// sources and their mirror pods.
	"staticPodPath":      "",
	"staticPodURL":       "",
	"staticPodURLHeader": "",
	"fileCheckFrequency": "",
	"httpCheckFrequency": "",

	// Graceful node shutdown (nodeshutdown/, agent/nodeshutdown.go): the
	// signal is systemd-logind's where it runs, and SIGPWR with
	// --node-shutdown-signal.
	"shutdownGracePeriod":              "",
	"shutdownGracePeriodCriticalPods":  "",
	"shutdownGracePeriodByPodPriority": "",

	// The CPU, memory and topology managers (resources/,
	// agent/resources.go).
	"memoryManagerPolicy":          "",
	"reservedMemory":               "",
	"cpuManagerPolicy":             "",
	"cpuManagerPolicyOptions":      "",
	"cpuManagerReconcilePeriod":    "",
	"reservedSystemCPUs":           "",
	"topologyManagerPolicy":        "",
	"topologyManagerScope":         "",
	"topologyManagerPolicyOptions": "",

	// User namespaces (userns/, agent/userns.go).
	"userNamespaces": "",

	// Feature gates (features/): validated as the kubelet's; a gate
	// features.Implemented does not list, set to a value other than its
	// default, is reported as its own setting, featureGates.<Gate>.
	"featureGates": "",

	// Cgroups.
	"cgroupDriver":      "",
	"cgroupRoot":        "",
	"cgroupsPerQOS":     "",
	"cpuCFSQuota":       "",
	"cpuCFSQuotaPeriod": "",
	"podPidsLimit":      "",
}

// unimplementedSetting is a setting given a value other than its default
// that nodekit does not implement, or implements only in part (partly says
// which part).
type unimplementedSetting struct {
	// name is the field's path, or the command-line-only flag ("--x").
	name string
	// flag is the command-line flag that set the field, if one did.
	flag   string
	partly string
}

// unimplemented lists, sorted by name, the settings of kc and of the given
// command-line flags that implementedSettings does not list as fully
// implemented. A field counts when its value differs from the default the
// kubelet would give it on the same path (a configuration file or flags
// only); fromFile says which. given are the flags on the command line,
// fieldFlags maps a flag to the field it sets, klogFlags are klog's. gates
// are kc's feature gates: each one they set that nodekit does not act on
// (features.Gates.Unimplemented) is a setting "featureGates.<Gate>".
func unimplemented(kc *kubeletconfig.KubeletConfiguration, gates *features.Gates, fromFile bool, given []string, fieldFlags map[string]string, klogFlags map[string]bool) []unimplementedSetting {
	base := kubeletconfig.KubeletConfiguration{FeatureGates: kc.FeatureGates}
	SetDefaults(&base)
	if fromFile {
		ApplyConfigFileDefaults(&base)
	}
	base.FeatureGates = nil

	flagOf := map[string]string{}
	var out []unimplementedSetting
	for _, name := range given {
		if path, ok := fieldFlags[name]; ok {
			flagOf[path] = "--" + name
			continue
		}
		if klogFlags[name] {
			continue
		}
		if note, ok := implementedSettings["--"+name]; !ok || note != "" {
			out = append(out, unimplementedSetting{name: "--" + name, partly: note})
		}
	}
	for _, gate := range gates.Unimplemented() {
		u := unimplementedSetting{name: "featureGates." + gate, flag: flagOf["featureGates"]}
		if slices.Contains(pods.CRIFeatures(), gate) {
			u.partly = "the node's declared feature follows the gate; the behaviour does not"
		}
		out = append(out, u)
	}
	for _, path := range changedSettings(kc, &base) {
		if note, ok := implementedSettings[path]; !ok || note != "" {
			out = append(out, unimplementedSetting{name: path, flag: flagOf[path], partly: note})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// logUnimplemented logs one line for each setting.
func logUnimplemented(logger logr.Logger, settings []unimplementedSetting) {
	for _, s := range settings {
		kv := []any{"setting", s.name}
		if s.flag != "" {
			kv = append(kv, "flag", s.flag)
		}
		if s.partly != "" {
			logger.Info("Kubelet setting accepted but only partly implemented by nodekit", append(kv, "implemented", s.partly)...)
			continue
		}
		logger.Info("Kubelet setting accepted but not implemented by nodekit; it has no effect", kv...)
	}
}

// changedSettings returns, sorted, the paths of the KubeletConfiguration
// settings in which kc differs from base (see settingPaths).
func changedSettings(kc, base *kubeletconfig.KubeletConfiguration) []string {
	var out []string
	walkSettings(reflect.ValueOf(kc).Elem(), reflect.ValueOf(base).Elem(), "", func(path string, a, b reflect.Value) {
		if !equality.Semantic.DeepEqual(a.Interface(), b.Interface()) {
			out = append(out, path)
		}
	})
	sort.Strings(out)
	return out
}

// settingPaths returns every setting's path in a KubeletConfiguration.
func settingPaths() []string {
	var kc kubeletconfig.KubeletConfiguration
	v := reflect.ValueOf(&kc).Elem()
	var out []string
	walkSettings(v, v, "", func(path string, _, _ reflect.Value) { out = append(out, path) })
	return out
}

// walkSettings calls leaf for each setting of the structs a and b (of one
// type) with its path: the JSON names from the top joined with dots.
// Structs of the kubelet's configuration and of its logging options are
// walked into; any other value (a duration, a quantity, a map, a list, a
// pointer) is one setting. The type metadata (apiVersion, kind) is none.
func walkSettings(a, b reflect.Value, prefix string, leaf func(path string, a, b reflect.Value)) {
	t := a.Type()
	for i := 0; i < t.NumField(); i++ {
		sf := t.Field(i)
		if !sf.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(sf.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		inline := sf.Anonymous || strings.Contains(opts, "inline")
		if inline && sf.Type.PkgPath() == "k8s.io/apimachinery/pkg/apis/meta/v1" {
			continue // TypeMeta
		}
		path := prefix
		if !inline {
			if path != "" {
				path += "."
			}
			path += name
		}
		fa, fb := a.Field(i), b.Field(i)
		if walkInto(sf.Type) {
			walkSettings(fa, fb, path, leaf)
			continue
		}
		leaf(path, fa, fb)
	}
}

// walkInto says which struct types hold settings rather than being one.
func walkInto(t reflect.Type) bool {
	if t.Kind() != reflect.Struct {
		return false
	}
	switch t.PkgPath() {
	case "k8s.io/kubelet/config/v1beta1":
		return true
	case "k8s.io/component-base/logs/api/v1":
		return t.Name() != "TimeOrMetaDuration"
	}
	return false
}
