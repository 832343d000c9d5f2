package fakecri

import (
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Behavior annotations. A pod's annotations reach its sandbox config, so a
// pod spec scripts its containers with BehaviorAnnotation (every container)
// or BehaviorAnnotationPrefix followed by a container name (that container,
// taking precedence). BehaviorAnnotation on a container config (for CRI
// clients other than the kubelet) takes precedence over both.
const (
	BehaviorAnnotation       = "fakecri.nodekit.io/behavior"
	BehaviorAnnotationPrefix = "fakecri.nodekit.io/behavior-"
)

// Defaults of the resource usage a running container reports in its stats.
const (
	DefaultContainerCPU    = 1       // millicores
	DefaultContainerMemory = 4 << 20 // bytes of working set
)

// Behavior is what a fake container does once started. The zero value runs
// until stopped and exits promptly on SIGTERM.
type Behavior struct {
	// Exits makes the container exit by itself with ExitCode, ExitAfter
	// after it started; otherwise it runs until stopped.
	Exits     bool
	ExitCode  int32
	ExitAfter time.Duration
	// OOMKilled reports the container's own exit as reason OOMKilled.
	OOMKilled bool
	// FailStart makes StartContainer fail, leaving the container exited with
	// code 128 and reason StartError, as a runtime does for a missing
	// executable.
	FailStart bool
	// IgnoreSIGTERM makes StopContainer wait its whole timeout and then
	// kill the container (exit code 137). Otherwise the container exits
	// with code 143 TermDelay after SIGTERM, or is killed when the timeout
	// is shorter.
	IgnoreSIGTERM bool
	TermDelay     time.Duration
	// Logs are lines the container writes to its log when it starts.
	Logs []string
	// CPU (millicores) and Memory (bytes) are the usage the container's
	// stats report while it runs (defaults DefaultContainerCPU and
	// DefaultContainerMemory).
	CPU    int64
	Memory int64
}

// ParseBehavior parses a behavior script: clauses separated by ";", each one
// of
//
//	run                   run until stopped (the default)
//	exit <code> [after <duration>]
//	oom [after <duration>]    exit 137 with reason OOMKilled
//	crash-on-start        StartContainer fails (exit 128, StartError)
//	ignore-sigterm        stop waits its whole timeout, then kills (137)
//	sigterm-delay <duration>  exit (143) this long after SIGTERM
//	log <text>            write a line to the container log at start
//	cpu <quantity>        CPU usage in stats, e.g. 250m
//	memory <quantity>     memory working set in stats, e.g. 64Mi
//
// Durations are Go durations ("1m30s"). Example:
// "exit 1 after 10s; log starting; memory 64Mi".
func ParseBehavior(script string) (Behavior, error) {
	var b Behavior
	for _, clause := range strings.Split(script, ";") {
		fields := strings.Fields(clause)
		if len(fields) == 0 {
			continue
		}
		if err := b.apply(fields, strings.TrimSpace(clause)); err != nil {
			return Behavior{}, fmt.Errorf("behavior %q: %w", script, err)
		}
	}
	return b, nil
}

func (b *Behavior) apply(fields []string, clause string) error {
	verb, args := fields[0], fields[1:]
	switch verb {
	case "run":
		if len(args) != 0 {
			return fmt.Errorf("%q: run takes no arguments", clause)
		}
		b.Exits, b.ExitCode, b.ExitAfter, b.OOMKilled = false, 0, 0, false
	case "exit", "oom":
		code := int32(137)
		if verb == "exit" {
			if len(args) == 0 {
				return fmt.Errorf("%q: want exit <code> [after <duration>]", clause)
			}
			n, err := strconv.ParseInt(args[0], 10, 32)
			if err != nil || n < 0 || n > 255 {
				return fmt.Errorf("%q: exit code %q is not in 0..255", clause, args[0])
			}
			code, args = int32(n), args[1:]
		}
		var after time.Duration
		switch {
		case len(args) == 0:
		case len(args) == 2 && args[0] == "after":
			d, err := parseDuration(args[1])
			if err != nil {
				return fmt.Errorf("%q: %w", clause, err)
			}
			after = d
		default:
			return fmt.Errorf("%q: want %s [after <duration>]", clause, verb)
		}
		b.Exits, b.ExitCode, b.ExitAfter, b.OOMKilled = true, code, after, verb == "oom"
	case "crash-on-start", "ignore-sigterm":
		if len(args) != 0 {
			return fmt.Errorf("%q: %s takes no arguments", clause, verb)
		}
		if verb == "crash-on-start" {
			b.FailStart = true
		} else {
			b.IgnoreSIGTERM = true
		}
	case "sigterm-delay":
		if len(args) != 1 {
			return fmt.Errorf("%q: want sigterm-delay <duration>", clause)
		}
		d, err := parseDuration(args[0])
		if err != nil {
			return fmt.Errorf("%q: %w", clause, err)
		}
		b.TermDelay = d
	case "log":
		b.Logs = append(b.Logs, strings.TrimSpace(strings.TrimPrefix(clause, "log")))
	case "cpu", "memory":
		if len(args) != 1 {
			return fmt.Errorf("%q: want %s <quantity>", clause, verb)
		}
		q, err := resource.ParseQuantity(args[0])
		if err != nil || q.Sign() < 0 {
			return fmt.Errorf("%q: %q is not a non-negative quantity", clause, args[0])
		}
		if verb == "cpu" {
			b.CPU = q.MilliValue()
		} else {
			b.Memory = q.Value()
		}
	default:
		return fmt.Errorf("unknown clause %q", clause)
	}
	return nil
}

func parseDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%q is not a non-negative duration", s)
	}
	return d, nil
}

// behaviorFor returns the behavior of a container created with cfg in a
// sandbox created with sandboxCfg: from the annotations (see
// BehaviorAnnotation), else interpreted from its command (see
// commandBehavior), else run until stopped.
func behaviorFor(cfg *runtimeapi.ContainerConfig, sandboxCfg *runtimeapi.PodSandboxConfig) (Behavior, error) {
	name := cfg.GetMetadata().GetName()
	for _, script := range []string{
		cfg.GetAnnotations()[BehaviorAnnotation],
		sandboxCfg.GetAnnotations()[BehaviorAnnotationPrefix+name],
		sandboxCfg.GetAnnotations()[BehaviorAnnotation],
	} {
		if strings.TrimSpace(script) != "" {
			return ParseBehavior(script)
		}
	}
	if b, ok := commandBehavior(append(append([]string(nil), cfg.GetCommand()...), cfg.GetArgs()...)); ok {
		return b, nil
	}
	return Behavior{}, nil
}

// commandBehavior interprets the few commands that test pods commonly run,
// so that they behave on the fake as on a real runtime: true, false, exit N,
// sleep N (seconds, or with an s/m/h/d suffix; "infinity" runs forever),
// echo (a log line), and "sh -c" scripts made of those joined by ";", "&&"
// or newlines. ok is false for anything else, which then runs until
// stopped.
func commandBehavior(argv []string) (Behavior, bool) {
	if len(argv) == 0 {
		return Behavior{}, false
	}
	switch path.Base(argv[0]) {
	case "sh", "bash", "ash", "dash":
		if len(argv) == 3 && argv[1] == "-c" {
			return scriptBehavior(argv[2])
		}
		return Behavior{}, false
	}
	return scriptBehavior(strings.Join(argv, " "))
}

func scriptBehavior(script string) (Behavior, bool) {
	var (
		b       Behavior
		status  int32
		elapsed time.Duration
	)
	for _, stmt := range strings.FieldsFunc(script, func(r rune) bool { return r == ';' || r == '\n' }) {
		chainFailed := false
		for _, cmd := range strings.Split(stmt, "&&") {
			fields := strings.Fields(cmd)
			if len(fields) == 0 {
				if strings.TrimSpace(stmt) == "" {
					continue
				}
				return Behavior{}, false
			}
			if chainFailed {
				continue
			}
			switch path.Base(fields[0]) {
			case "true", ":":
				status = 0
			case "false":
				status = 1
			case "echo":
				b.Logs = append(b.Logs, unquote(strings.Join(fields[1:], " ")))
				status = 0
			case "sleep":
				if len(fields) != 2 {
					return Behavior{}, false
				}
				if fields[1] == "infinity" || fields[1] == "inf" {
					return Behavior{Logs: b.Logs}, true
				}
				d, ok := sleepDuration(fields[1])
				if !ok {
					return Behavior{}, false
				}
				elapsed += d
				status = 0
			case "exit":
				code := status
				if len(fields) > 2 {
					return Behavior{}, false
				}
				if len(fields) == 2 {
					n, err := strconv.ParseInt(fields[1], 10, 32)
					if err != nil {
						return Behavior{}, false
					}
					code = int32(n & 0xff)
				}
				b.Exits, b.ExitCode, b.ExitAfter = true, code, elapsed
				return b, true
			default:
				return Behavior{}, false
			}
			chainFailed = status != 0
		}
	}
	b.Exits, b.ExitCode, b.ExitAfter = true, status, elapsed
	return b, true
}

// sleepDuration parses a busybox sleep argument: seconds (possibly
// fractional) with an optional s, m, h or d suffix.
func sleepDuration(arg string) (time.Duration, bool) {
	unit := time.Second
	switch {
	case strings.HasSuffix(arg, "s"):
		arg = strings.TrimSuffix(arg, "s")
	case strings.HasSuffix(arg, "m"):
		arg, unit = strings.TrimSuffix(arg, "m"), time.Minute
	case strings.HasSuffix(arg, "h"):
		arg, unit = strings.TrimSuffix(arg, "h"), time.Hour
	case strings.HasSuffix(arg, "d"):
		arg, unit = strings.TrimSuffix(arg, "d"), 24*time.Hour
	}
	f, err := strconv.ParseFloat(arg, 64)
	if err != nil || f < 0 || f > 1e9 {
		return 0, false
	}
	return time.Duration(f * float64(unit)), true
}

// unquote strips one level of matching single or double quotes.
func unquote(s string) string {
	if len(s) >= 2 && (s[0] == '"' || s[0] == '\'') && s[len(s)-1] == s[0] {
		return s[1 : len(s)-1]
	}
	return s
}
