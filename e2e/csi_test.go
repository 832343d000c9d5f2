package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/nodekit/nodekit/e2e/csidriver"
)

// e2eCSIDriver is the name of the e2e module's CSI driver.
const e2eCSIDriver = "csi.e2e.nodekit.io"

// e2eCSITopologyKey is the driver's topology segment's key.
const e2eCSITopologyKey = "topology.csi.e2e.nodekit.io/node"

// startCSIDriver starts the e2e CSI driver for node n, registering through
// the agent's plugins_registry, with data under the node's directory. The
// driver is stopped (sockets removed) when the test ends.
func startCSIDriver(t *testing.T, n *testNode, maxVolumes int64) *csidriver.Driver {
	t.Helper()
	return startNamedCSIDriver(t, n.agent.Dir, n.name, e2eCSIDriver, maxVolumes)
}

// startNamedCSIDriver starts an e2e CSI driver called name for node
// nodeName whose agent (or kubelet) has its directory in dir: it registers
// through dir/root/plugins_registry, serves dir/csi[-<first label of
// name>].sock and keeps its data under dir/csi-data. The driver is stopped
// (sockets removed) when the test ends.
func startNamedCSIDriver(t *testing.T, dir, nodeName, name string, maxVolumes int64) *csidriver.Driver {
	t.Helper()
	endpoint := "csi.sock"
	if name != e2eCSIDriver {
		label, _, _ := strings.Cut(name, ".")
		endpoint = "csi-" + label + ".sock"
	}
	registry := filepath.Join(dir, "root", "plugins_registry")
	d := csidriver.New(csidriver.Options{
		Name:              name,
		NodeID:            nodeName + "-csi",
		TopologyKey:       e2eCSITopologyKey,
		MaxVolumesPerNode: maxVolumes,
		DataRoot:          filepath.Join(dir, "csi-data"),
		Endpoint:          filepath.Join(dir, endpoint),
		RegistrationDir:   registry,
	})
	// The agent makes the registration directory on start.
	waitForCondition(t, "the agent's plugins_registry", 30*time.Second, func() (bool, error) {
		fi, err := os.Stat(registry)
		if err != nil {
			return false, nil
		}
		if fi.Mode().Perm() != 0o750 {
			return false, fmt.Errorf("plugins_registry has mode %v, want 0750 as the kubelet's", fi.Mode().Perm())
		}
		return true, nil
	})
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	return d
}

// waitRegistration waits for the agent's registration status to reach d
// and requires it to be a success.
func waitRegistration(t *testing.T, d *csidriver.Driver) {
	t.Helper()
	select {
	case s := <-d.Statuses():
		if !s.PluginRegistered {
			t.Fatalf("the agent refused the CSI driver: %s", s.Error)
		}
	case <-time.After(time.Minute):
		t.Fatal("the agent did not answer the CSI driver's registration within a minute")
	}
}

// waitForCondition polls cond every 200 ms until it holds, fails or
// timeout passes.
func waitForCondition(t *testing.T, what string, timeout time.Duration, cond func() (bool, error)) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		return cond()
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// csiNodeDriver returns the node's CSINode and its entry for the driver
// called name, if any.
func csiNodeDriver(ctx context.Context, node, name string) (*storagev1.CSINode, *storagev1.CSINodeDriver, error) {
	cn, err := env.cp.Client().StorageV1().CSINodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return nil, nil, err
	}
	i := slices.IndexFunc(cn.Spec.Drivers, func(d storagev1.CSINodeDriver) bool { return d.Name == name })
	if i < 0 {
		return cn, nil, nil
	}
	return cn, &cn.Spec.Drivers[i], nil
}

// nodeCSIIDs returns the Node's csi.volume.kubernetes.io/nodeid map.
func nodeCSIIDs(n *v1.Node) (map[string]string, error) {
	m := map[string]string{}
	if s, ok := n.Annotations["csi.volume.kubernetes.io/nodeid"]; ok {
		if err := json.Unmarshal([]byte(s), &m); err != nil {
			return nil, fmt.Errorf("node annotation csi.volume.kubernetes.io/nodeid %q: %w", s, err)
		}
	}
	return m, nil
}

// TestCSIDriverRegistration registers the e2e CSI driver with a node agent
// through its plugins_registry, as node-driver-registrar does, and checks
// what the kubelet publishes: the CSINode (created at start, owned by the
// Node) with the driver's node ID, topology keys and volume limit, the
// node ID annotation and the topology label; the driver's sockets removed
// de-register it; a driver already there when the agent starts registers
// again.
func TestCSIDriverRegistration(t *testing.T) {
	requireCluster(t)
	t.Parallel()
	ctx := t.Context()
	const name = "csi-reg"
	n := newNode(t, name, nodeOptions{})
	node := waitForNode(t, name, "Ready", readyTimeout, isReady)

	// The kubelet makes the node's CSINode at start, driver or not.
	waitForCondition(t, "the node's CSINode", time.Minute, func() (bool, error) {
		cn, _, err := csiNodeDriver(ctx, name, e2eCSIDriver)
		if apierrors.IsNotFound(err) {
			return false, nil
		} else if err != nil {
			return false, err
		}
		if len(cn.OwnerReferences) != 1 || cn.OwnerReferences[0].Kind != "Node" || cn.OwnerReferences[0].UID != node.UID {
			return false, fmt.Errorf("CSINode owners %+v, want the Node %s", cn.OwnerReferences, node.UID)
		}
		if cn.Annotations[v1.MigratedPluginsAnnotationKey] == "" {
			return false, fmt.Errorf("CSINode has no %s annotation", v1.MigratedPluginsAnnotationKey)
		}
		return true, nil
	})

	d := startCSIDriver(t, n, 5)
	waitRegistration(t, d)
	checkRegistered := func() {
		t.Helper()
		waitForCondition(t, "the driver in the CSINode", time.Minute, func() (bool, error) {
			_, drv, err := csiNodeDriver(ctx, name, e2eCSIDriver)
			if err != nil || drv == nil {
				return false, err
			}
			if drv.NodeID != name+"-csi" || !slices.Equal(drv.TopologyKeys, []string{e2eCSITopologyKey}) ||
				drv.Allocatable == nil || drv.Allocatable.Count == nil || *drv.Allocatable.Count != 5 {
				return false, fmt.Errorf("CSINode driver %+v, want node ID %s-csi, topology key %s, allocatable 5", drv, name, e2eCSITopologyKey)
			}
			return true, nil
		})
		waitForNode(t, name, "the driver's node ID annotation and topology label", time.Minute, func(n *v1.Node) bool {
			ids, err := nodeCSIIDs(n)
			return err == nil && ids[e2eCSIDriver] == name+"-csi" && n.Labels[e2eCSITopologyKey] == name+"-csi"
		})
	}
	checkRegistered()

	// The driver goes: its registration socket with it.
	d.Stop()
	waitForCondition(t, "the driver gone from the CSINode", time.Minute, func() (bool, error) {
		_, drv, err := csiNodeDriver(ctx, name, e2eCSIDriver)
		return err == nil && drv == nil, err
	})
	waitForNode(t, name, "no node ID annotation", time.Minute, func(n *v1.Node) bool {
		_, ok := n.Annotations["csi.volume.kubernetes.io/nodeid"]
		return !ok
	})

	// Back again, then the agent restarts with the driver running: the
	// socket found at start registers it again.
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	waitRegistration(t, d)
	checkRegistered()
	if err := n.agent.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := n.agent.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitRegistration(t, d)
	checkRegistered()
}
