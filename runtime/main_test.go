package runtime_test

import (
	"flag"
	"os"
	"testing"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
)

// TestMain silences klog's global logger while fuzzing, before any test
// starts a goroutine: klog.SetLogger must not run while another goroutine
// logs (a CRI client of an earlier test reconnecting logs through
// klog.Background), so FuzzCRIReplies cannot set it itself. A plain test
// run keeps the logger, so a failing test still shows what was logged.
func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("test.fuzz"); f != nil && f.Value.String() != "" {
		klog.SetLogger(logr.Discard())
	}
	os.Exit(m.Run())
}
