package url

import (
	"testing"
	"time"
)

func TestDefaultClientTimesOutAfterTenSeconds(t *testing.T) {
	src, err := New(Options{URL: "http://h/p", NodeName: "node-a"})
	if err != nil {
		t.Fatal(err)
	}
	if src.client.Timeout != 10*time.Second || src.period != 20*time.Second {
		t.Errorf("timeout %v, period %v", src.client.Timeout, src.period)
	}
}
