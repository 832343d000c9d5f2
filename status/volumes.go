package status

import (
	"context"
	"errors"

	v1 "k8s.io/api/core/v1"
)

// VolumesInUseFuncs feed the VolumesInUse setter, typically the volume
// manager's ReconcilerSynced and VolumesInUse. Both must be cheap and safe
// for concurrent use; the slice InUse returns is not modified.
type VolumesInUseFuncs struct {
	// Synced reports whether the volume manager has read the volumes on
	// disk; until then status.volumesInUse is left as it is.
	Synced func() bool
	// InUse returns the unique names of the mounted volumes the node
	// reports (attachable volumes only, as the kubelet).
	InUse func() []v1.UniqueVolumeName
}

// volumesInUse returns a Setter for status.volumesInUse, as the kubelet's:
// once f.Synced is true, the list is f.InUse's (empty for the volume kinds
// that need no attaching), which the attach/detach controller reads before
// detaching a volume from the node.
func volumesInUse(f VolumesInUseFuncs) (Setter, error) {
	if f.Synced == nil || f.InUse == nil {
		return nil, errors.New("volumes in use: Synced and InUse are required")
	}
	return func(_ context.Context, node *v1.Node) error {
		if f.Synced() {
			node.Status.VolumesInUse = f.InUse()
		}
		return nil
	}, nil
}
