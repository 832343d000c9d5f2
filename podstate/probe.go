package podstate

// ProbeResult is a probe's latest verdict on one container instance, as the
// kubelet's prober results.
type ProbeResult int

// Probe verdicts. ProbeUnknown means not probed yet, or no such probe.
const (
	ProbeUnknown ProbeResult = iota
	ProbeSuccess
	ProbeFailure
)

// String returns the verdict as the kubelet's prober metrics label it:
// "unknown", "successful" or "failed".
func (r ProbeResult) String() string {
	switch r {
	case ProbeSuccess:
		return "successful"
	case ProbeFailure:
		return "failed"
	default:
		return "unknown"
	}
}
