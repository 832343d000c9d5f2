package agent

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// TestClientsDialOnceForConcurrentFirstRequests: requests of the three
// clients made at once on a transport with no connection yet (an agent's
// start) share one connection; without the gate the transport dialed one
// for each and kept one. After CloseConnections they share one again.
func TestClientsDialOnceForConcurrentFirstRequests(t *testing.T) {
	// However slow the first answer under load, no request gives up
	// waiting for it here.
	setConnGateMaxWait(t, time.Hour)
	srv := newConnServer(t)
	c := clientsOn(t, srv)
	burst := func() {
		t.Helper()
		var wg sync.WaitGroup
		errs := make(chan error, 12)
		for range 4 {
			for _, list := range lists(c) {
				wg.Go(func() { errs <- list(context.Background()) })
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	burst()
	if conns, _ := srv.counts(); conns != 1 {
		t.Errorf("12 requests at once on a new transport opened %d connections, want 1", conns)
	}
	c.CloseConnections()
	burst()
	if conns, _ := srv.counts(); conns != 2 {
		t.Errorf("after CloseConnections 12 requests at once opened %d connections in all, want 2 (one more)", conns)
	}
}

// TestConnGateWaiterKeepsItsDeadline: a request waiting for the one that
// makes the connection returns when its own context is done, not when
// the first request does.
func TestConnGateWaiterKeepsItsDeadline(t *testing.T) {
	setConnGateMaxWait(t, time.Hour)
	client, url, first := slowFirstRequest(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/fast", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.Do(req); !errors.Is(err, context.Canceled) {
		t.Errorf("a waiting request with its context canceled: %v, want context.Canceled", err)
	}
	stillUnanswered(t, first)
}

// TestConnGateWaitIsBounded: a request does not wait on the answer to the
// request that made the connection for more than connGateMaxWait (a Lease
// renewal behind a slow list): it is answered while the first one is not.
func TestConnGateWaitIsBounded(t *testing.T) {
	setConnGateMaxWait(t, 10*time.Millisecond)
	client, url, first := slowFirstRequest(t)
	resp, err := client.Get(url + "/fast")
	if err != nil {
		t.Fatalf("a request behind an unanswered first one: %v", err)
	}
	resp.Body.Close()
	stillUnanswered(t, first)
}

// slowFirstRequest sends a first request through a new gate to a server
// that answers it only when the test ends, and returns once it holds the
// gate: the gate's client, the server's URL, and where the first
// request's result arrives.
func slowFirstRequest(t *testing.T) (*http.Client, string, <-chan error) {
	t.Helper()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			<-release
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	g := &connGate{}
	tr := &http.Transport{DialContext: g.dial((&net.Dialer{}).DialContext)}
	t.Cleanup(tr.CloseIdleConnections)
	g.rt = tr
	client := &http.Client{Transport: g}
	first := make(chan error, 1)
	go func() {
		resp, err := client.Get(srv.URL + "/slow")
		if err == nil {
			resp.Body.Close()
		}
		first <- err
	}()
	waitHeld(t, g)
	return client, srv.URL, first
}

// stillUnanswered fails the test if the first request has returned.
func stillUnanswered(t *testing.T, first <-chan error) {
	t.Helper()
	select {
	case err := <-first:
		t.Fatalf("the first request returned (%v) before its response", err)
	default:
	}
}

// waitHeld waits until the first request through g dialed and holds the
// gate.
func waitHeld(t *testing.T, g *connGate) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		g.mu.Lock()
		held := g.dialing != nil && g.conns == 1
		g.mu.Unlock()
		if held {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the first request did not dial")
		}
		time.Sleep(time.Millisecond)
	}
}

// setConnGateMaxWait sets connGateMaxWait to d for the test (no test of
// this package runs in parallel).
func setConnGateMaxWait(t *testing.T, d time.Duration) {
	prev := connGateMaxWait
	connGateMaxWait = d
	t.Cleanup(func() { connGateMaxWait = prev })
}
