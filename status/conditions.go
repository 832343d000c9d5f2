package status

import (
	"context"
	"errors"
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// RuntimeHealthFunc reports the container runtime's health: runtimeErr is
// non-nil when the runtime is not ready (its RuntimeReady condition is false,
// or it cannot be reached), networkErr when its NetworkReady condition is
// false. The error texts become the Ready condition's message. It is called
// once per status cycle and must honour ctx.
type RuntimeHealthFunc func(ctx context.Context) (runtimeErr, networkErr error)

// HealthCheck is one more thing the node must be healthy in to be Ready, as
// the kubelet's PLEG check. Healthy returns false and an error saying what is
// wrong when it is not; the error is the Ready message as it is (the PLEG's
// reads "PLEG is not healthy: pleg was last seen active 3m1s ago; threshold
// is 3m0s", as the kubelet's), or "<Name> is not healthy" without one.
// Healthy must be cheap and must not call out of the process.
type HealthCheck struct {
	Name    string
	Healthy func() (bool, error)
}

// readyOptions configures readyCondition.
type readyOptions struct {
	// RuntimeHealth is required.
	RuntimeHealth RuntimeHealthFunc
	// HealthChecks are checked in order after the runtime, e.g. PLEG.
	HealthChecks []HealthCheck
	// SoftRequirements, when set and returning an error, appends
	// ". WARNING: <error>" to the Ready message without making the node
	// NotReady (the kubelet's container-manager soft requirements).
	SoftRequirements func() error
	// NoLocalStorageCapacityIsolation drops ephemeral-storage from the
	// capacities the node needs to be Ready (kubelet
	// localStorageCapacityIsolation=false).
	NoLocalStorageCapacityIsolation bool
	// Clock stamps the condition; default clock.RealClock{}.
	Clock clock.PassiveClock
	// Recorder, when set, receives NodeReady / NodeNotReady on flips.
	Recorder record.EventRecorder
}

// Reasons and messages of the Ready condition, as the kubelet sets them.
const (
	reasonKubeletReady    = "KubeletReady"
	reasonKubeletNotReady = "KubeletNotReady"
	messageKubeletReady   = "kubelet is posting ready status"
)

// readyCondition returns a Setter for the Ready condition: True with reason
// KubeletReady when the runtime, its network and every health check are
// healthy and the node has cpu, memory, pods (and ephemeral-storage) capacity;
// otherwise False with reason KubeletNotReady and all the errors in the
// message. The heartbeat time moves on every call, the transition time and
// an event only when the status flips. It must run after the setters that
// fill in capacity (OrderReady).
func readyCondition(opts readyOptions) (Setter, error) {
	if opts.RuntimeHealth == nil {
		return nil, errors.New("ready condition: RuntimeHealth is required")
	}
	for i, hc := range opts.HealthChecks {
		if hc.Name == "" || hc.Healthy == nil {
			return nil, fmt.Errorf("ready condition: health check %d (%q) needs a Name and a Healthy func", i, hc.Name)
		}
	}
	clk := opts.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	required := []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory, v1.ResourcePods}
	if !opts.NoLocalStorageCapacityIsolation {
		required = append(required, v1.ResourceEphemeralStorage)
	}
	return func(ctx context.Context, node *v1.Node) error {
		now := metav1.NewTime(clk.Now())
		runtimeErr, networkErr := opts.RuntimeHealth(ctx)
		errs := []error{runtimeErr}
		for _, hc := range opts.HealthChecks {
			if ok, err := hc.Healthy(); !ok {
				if err == nil {
					err = fmt.Errorf("%s is not healthy", hc.Name)
				}
				errs = append(errs, err)
			}
		}
		errs = append(errs, networkErr)
		var missing []string
		for _, r := range required {
			if _, ok := node.Status.Capacity[r]; !ok {
				missing = append(missing, string(r))
			}
		}
		if len(missing) > 0 {
			errs = append(errs, fmt.Errorf("missing node capacity for resources: %s", strings.Join(missing, ", ")))
		}
		cond := v1.NodeCondition{
			Type:              v1.NodeReady,
			Status:            v1.ConditionTrue,
			Reason:            reasonKubeletReady,
			Message:           messageKubeletReady,
			LastHeartbeatTime: now,
		}
		if agg := utilerrors.NewAggregate(errs); agg != nil {
			cond.Status = v1.ConditionFalse
			cond.Reason = reasonKubeletNotReady
			cond.Message = agg.Error()
		}
		if opts.SoftRequirements != nil {
			if err := opts.SoftRequirements(); err != nil {
				cond.Message = fmt.Sprintf("%s. WARNING: %s", cond.Message, err)
			}
		}

		flipped := false
		if old := findCondition(node, v1.NodeReady); old != nil {
			if old.Status == cond.Status {
				cond.LastTransitionTime = old.LastTransitionTime
			} else {
				cond.LastTransitionTime = now
				flipped = true
			}
			*old = cond
		} else {
			cond.LastTransitionTime = now
			node.Status.Conditions = append(node.Status.Conditions, cond)
		}
		if flipped {
			if cond.Status == v1.ConditionTrue {
				recordStatusEvent(ctx, opts.Recorder, node, v1.EventTypeNormal, eventNodeReady)
			} else {
				recordStatusEvent(ctx, opts.Recorder, node, v1.EventTypeNormal, eventNodeNotReady)
				if !IsDryRun(ctx) {
					klog.FromContext(ctx).Info("Node became not ready", "node", klog.KObj(node), "condition", cond)
				}
			}
		}
		return nil
	}, nil
}

// findCondition returns a pointer into node's conditions, or nil. It does
// not modify node.
func findCondition(node *v1.Node, t v1.NodeConditionType) *v1.NodeCondition {
	for i := range node.Status.Conditions {
		if node.Status.Conditions[i].Type == t {
			return &node.Status.Conditions[i]
		}
	}
	return nil
}

// pressureOptions configures a pressure condition setter.
type pressureOptions struct {
	// Pressure reports whether the node is under this pressure now, typically
	// the eviction manager's IsUnder*Pressure. Nil means never.
	Pressure func() bool
	// Clock stamps the condition; default clock.RealClock{}.
	Clock clock.PassiveClock
	// Recorder, when set, receives an event each time the status flips.
	Recorder record.EventRecorder
}

// pressureKind holds the kubelet's wording for one pressure condition.
type pressureKind struct {
	condition                 v1.NodeConditionType
	reasonTrue, reasonFalse   string
	messageTrue, messageFalse string
	eventTrue, eventFalse     string
}

var (
	memoryPressure = pressureKind{
		condition:  v1.NodeMemoryPressure,
		reasonTrue: "KubeletHasInsufficientMemory", messageTrue: "kubelet has insufficient memory available", eventTrue: eventNodeHasInsufficientMemory,
		reasonFalse: "KubeletHasSufficientMemory", messageFalse: "kubelet has sufficient memory available", eventFalse: eventNodeHasSufficientMemory,
	}
	diskPressure = pressureKind{
		condition:  v1.NodeDiskPressure,
		reasonTrue: "KubeletHasDiskPressure", messageTrue: "kubelet has disk pressure", eventTrue: eventNodeHasDiskPressure,
		reasonFalse: "KubeletHasNoDiskPressure", messageFalse: "kubelet has no disk pressure", eventFalse: eventNodeHasNoDiskPressure,
	}
	pidPressure = pressureKind{
		condition:  v1.NodePIDPressure,
		reasonTrue: "KubeletHasInsufficientPID", messageTrue: "kubelet has insufficient PID available", eventTrue: eventNodeHasInsufficientPID,
		reasonFalse: "KubeletHasSufficientPID", messageFalse: "kubelet has sufficient PID available", eventFalse: eventNodeHasSufficientPID,
	}
)

// memoryPressureCondition returns a Setter for the MemoryPressure condition
// (reasons KubeletHasInsufficientMemory / KubeletHasSufficientMemory).
func memoryPressureCondition(opts pressureOptions) Setter {
	return pressureCondition(memoryPressure, opts)
}

// diskPressureCondition returns a Setter for the DiskPressure condition
// (reasons KubeletHasDiskPressure / KubeletHasNoDiskPressure).
func diskPressureCondition(opts pressureOptions) Setter { return pressureCondition(diskPressure, opts) }

// pidPressureCondition returns a Setter for the PIDPressure condition
// (reasons KubeletHasInsufficientPID / KubeletHasSufficientPID).
func pidPressureCondition(opts pressureOptions) Setter { return pressureCondition(pidPressure, opts) }

// pressureCondition moves the heartbeat time on every call; status, reason,
// message, transition time and an event change only on a flip. A new
// condition starts Unknown, so its first evaluation is a flip, as in the
// kubelet.
func pressureCondition(k pressureKind, opts pressureOptions) Setter {
	clk := opts.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	return func(ctx context.Context, node *v1.Node) error {
		now := metav1.NewTime(clk.Now())
		cond := findCondition(node, k.condition)
		isNew := cond == nil
		if isNew {
			cond = &v1.NodeCondition{Type: k.condition, Status: v1.ConditionUnknown}
		}
		cond.LastHeartbeatTime = now
		want, reason, message, event := v1.ConditionFalse, k.reasonFalse, k.messageFalse, k.eventFalse
		if opts.Pressure != nil && opts.Pressure() {
			want, reason, message, event = v1.ConditionTrue, k.reasonTrue, k.messageTrue, k.eventTrue
		}
		if cond.Status != want {
			cond.Status, cond.Reason, cond.Message = want, reason, message
			cond.LastTransitionTime = now
			recordStatusEvent(ctx, opts.Recorder, node, v1.EventTypeNormal, event)
		}
		if isNew {
			node.Status.Conditions = append(node.Status.Conditions, *cond)
		}
		return nil
	}
}

// nodeSchedulable returns a Setter that changes nothing on the node and
// records NodeSchedulable / NodeNotSchedulable when spec.unschedulable differs
// from what it saw last (initially schedulable), as the kubelet does.
func nodeSchedulable(rec record.EventRecorder) Setter {
	last := false
	return func(ctx context.Context, node *v1.Node) error {
		if IsDryRun(ctx) || node.Spec.Unschedulable == last {
			return nil
		}
		last = node.Spec.Unschedulable
		reason := eventNodeSchedulable
		if last {
			reason = eventNodeNotSchedulable
		}
		recordStatusEvent(ctx, rec, node, v1.EventTypeNormal, reason)
		return nil
	}
}
