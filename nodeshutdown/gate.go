package nodeshutdown

import (
	"sync"

	v1 "k8s.io/api/core/v1"
)

// Gate holds whether the node shuts down, as the Manager last set it
// (Options.Gate): what admission and the node's Ready condition read,
// without depending on the Manager. The zero value is ready to use (not
// shutting down). Its methods never block and are safe for concurrent use.
type Gate struct {
	mu           sync.Mutex
	shuttingDown bool
}

// NewGate returns a Gate of a node that is not shutting down.
func NewGate() *Gate { return &Gate{} }

// set records whether the node shuts down.
func (g *Gate) set(shuttingDown bool) {
	g.mu.Lock()
	g.shuttingDown = shuttingDown
	g.mu.Unlock()
}

// ShutdownStatus returns ErrShuttingDown while the node shuts down (from
// the signal until a cancellation), nil otherwise. It gates the node's
// Ready condition.
func (g *Gate) ShutdownStatus() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.shuttingDown {
		return ErrShuttingDown
	}
	return nil
}

// Admit rejects every pod while the node shuts down, with the kubelet's
// reason and message.
func (g *Gate) Admit(*v1.Pod) (ok bool, reason, message string) {
	if g.ShutdownStatus() != nil {
		return false, ReasonNotAdmitted, MessageNotAdmitted
	}
	return true, "", ""
}
