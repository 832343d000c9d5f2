package status

import (
	"context"
	"path/filepath"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"

	"github.com/nodekit/nodekit/machine"
)

// drainEvents returns the events recorded so far.
func drainEvents(rec *record.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// testMachine is a host with 4 cores, 8 GiB, one 2Mi huge page size with
// 100 pages and 100 GB of disk.
func testMachine() *machine.Info {
	return &machine.Info{
		NumCores:                 4,
		MemoryCapacity:           8 << 30,
		HugePages:                []machine.HugePages{{PageSize: 2 << 20, NumPages: 100}},
		EphemeralStorageCapacity: 100e9,
		MachineID:                "machine-1",
		SystemUUID:               "uuid-1",
		BootID:                   "boot-1",
		KernelVersion:            "6.1.0",
		OSImage:                  "Debian GNU/Linux 12 (bookworm)",
	}
}

func machineFunc(m *machine.Info) machine.Func {
	return func() (*machine.Info, error) { return m, nil }
}

func mustSet(t *testing.T, s Setter, node *v1.Node) {
	t.Helper()
	if err := s(context.Background(), node); err != nil {
		t.Fatalf("setter: %v", err)
	}
}

func q(s string) resource.Quantity { return resource.MustParse(s) }

func newNode(name string) *v1.Node {
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)}}
}

// fixtureRoots points machine.Read at the machine package's fixture host
// name ("full" or "minimal") with a fresh root directory.
func fixtureRoots(t *testing.T, name string) machine.Roots {
	t.Helper()
	base := filepath.Join("..", "machine", "testdata", name)
	return machine.Roots{HostRoot: base, ProcRoot: filepath.Join(base, "proc"), SysRoot: filepath.Join(base, "sys"), RootDir: t.TempDir()}
}
