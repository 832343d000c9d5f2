package agent

import (
	"errors"
	goflag "flag"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"
)

// FuzzDecodeKubeletConfiguration feeds arbitrary files to the
// KubeletConfiguration decoder: it must never panic, and whatever it
// accepts must survive defaulting, validation and every translation into
// module options without a panic (an error is fine).
//
//	go test -run='^$' -fuzz=FuzzDecodeKubeletConfiguration -fuzztime=1m ./agent/
func FuzzDecodeKubeletConfiguration(f *testing.F) {
	for _, seed := range []string{
		"apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n",
		"apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nnodeStatusUpdateFrequency: 0s\nnodeLeaseDurationSeconds: -1\nmaxPods: -5\n",
		`{"apiVersion":"kubelet.config.k8s.io/v1beta1","kind":"KubeletConfiguration","evictionHard":{"memory.available":"101%","nodefs.available":"-1Ki"},"kubeReserved":{"cpu":"x"},"systemReserved":{"memory":"1Ei"},"cgroupDriver":"systemd","cgroupRoot":"/a/../b","podPidsLimit":-1,"staticPodURL":"http://[::1"}`,
		"apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nunknownField: 1\nport: 99999\nhealthzPort: -1\nimageGCHighThresholdPercent: 200\nimageGCLowThresholdPercent: 300\n",
		"apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nnodeStatusReportFrequency: 1ns\nnodeStatusUpdateFrequency: 2h\nsyncFrequency: 1ns\nfileCheckFrequency: -1s\nrotateCertificates: true\nshutdownGracePeriod: 1m\nshutdownGracePeriodCriticalPods: 2m\n",
		"apiVersion: v1\nkind: Pod\n",
		"kind: KubeletConfiguration\n",
		"{",
		"\x00\xff",
	} {
		f.Add([]byte(seed))
	}
	logger := klog.NewKlogr().V(100)
	f.Fuzz(func(t *testing.T, data []byte) {
		kc, err := DecodeKubeletConfiguration(logger, data, "fuzz.yaml")
		if err != nil {
			return
		}
		if kc == nil {
			t.Fatal("no configuration and no error")
		}
		cfg := &Config{Kubelet: *kc, HostnameOverride: "fuzz-node"}
		SetDefaults(&cfg.Kubelet)
		ApplyConfigFileDefaults(&cfg.Kubelet)
		exercise(t, cfg)
	})
}

// FuzzParseFlags feeds arbitrary command lines (arguments separated by
// NUL) to the flag parser: it must never panic, must return a *UsageError,
// a pflag.ErrHelp or an invalid value error for what it cannot parse, and
// whatever it accepts must survive every translation into module options.
// Command lines with --config (a file to read) or klog's flags (which set
// the process's logging and log files) are skipped.
//
//	go test -run='^$' -fuzz=FuzzParseFlags -fuzztime=1m ./agent/
func FuzzParseFlags(f *testing.F) {
	for _, seed := range []string{
		"",
		"--hostname-override=n\x00--node-ip=10.0.0.1,fd00::1",
		"--max-pods=-1\x00--node-status-update-frequency=0s",
		"--node-ip=1.2.3.4,5.6.7.8\x00--hostname-override=UPPER_case",
		"--eviction-hard=memory.available<101%,nodefs.available<-1Ki\x00--kube-reserved=cpu=x",
		"--register-with-taints=a=b:NoFlood\x00--node-labels=kubernetes.io/hostname=x,=y",
		"--cgroup-driver=systemd\x00--cgroup-root=/a/../b\x00--cgroups-per-qos=false\x00--enforce-node-allocatable=pods,system-reserved",
		"--v=10\x00--vmodule=*=5\x00--logging-format=json",
		"--help",
		"-h",
		"positional",
		"--no-such-flag",
		"--sync-frequency=1ns\x00--healthz-port=-1\x00--port=70000",
	} {
		f.Add(seed)
	}
	logger := klog.NewKlogr().V(100)
	klogNames := map[string]bool{}
	fs := goflag.NewFlagSet("klog", goflag.ContinueOnError)
	klog.InitFlags(fs)
	fs.VisitAll(func(f *goflag.Flag) { klogNames[strings.ReplaceAll(f.Name, "_", "-")] = true })
	f.Fuzz(func(t *testing.T, line string) {
		args := strings.Split(line, "\x00")
		if line == "" {
			args = nil
		}
		for _, a := range args {
			if touchesProcess(a, klogNames) {
				return
			}
		}
		cfg, err := ParseFlags(logger, args)
		if err != nil {
			var usage *UsageError
			var invalid *pflag.InvalidValueError
			if !errors.Is(err, pflag.ErrHelp) && !errors.As(err, &usage) && !errors.As(err, &invalid) && !strings.Contains(err.Error(), "failed to validate kubelet configuration") && !strings.Contains(err.Error(), "--node-ip") {
				t.Fatalf("ParseFlags(%q) = %T %v, want a usage, help, invalid value or configuration error", args, err, err)
			}
			return
		}
		exercise(t, cfg)
	})
}

// exercise runs every translation of a configuration that the agent makes
// at start, so that a configuration the decoder accepts cannot panic later.
func exercise(t *testing.T, cfg *Config) {
	t.Helper()
	if err := cfg.Complete(); err != nil {
		return
	}
	cfg.LeaseOptions(nil)
	cfg.StatusOptions(nil)
	_, _ = cfg.SetterOptions(nil)
	cfg.APIServerSourceOptions(nil)
	cfg.RuntimeOptions()
	cfg.CgroupsPerQOS()
	cfg.StatsOptions()
}

// touchesProcess reports whether arg is a flag whose parsing reaches
// beyond the configuration: --config reads a file, and klog's flags set
// the process's logging (verbosity, log files).
func touchesProcess(arg string, klogNames map[string]bool) bool {
	name, ok := strings.CutPrefix(arg, "--")
	if !ok {
		short, ok := strings.CutPrefix(arg, "-")
		// A shorthand group: any of klog's one-letter flags in it.
		return ok && strings.ContainsFunc(short, func(r rune) bool { return klogNames[string(r)] })
	}
	name, _, _ = strings.Cut(name, "=")
	name = strings.ReplaceAll(name, "_", "-")
	return name == "config" || klogNames[name]
}
