package bench

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// sandboxRequestLine matches the line containerd's CRI plugin logs when a
// RunPodSandbox request arrives, in 1.6's form (RunPodSandbox for
// &PodSandboxMetadata{Name:…,Uid:…,…}) and 2.x's (RunPodSandbox for
// name:"…" uid:"…" …), with logrus's time="…" before it.
var sandboxRequestLine = regexp.MustCompile(`^time="([^"]+)".*msg="RunPodSandbox for .*?[Uu]id:\\?"?([0-9a-fA-F-]{36})`)

// SandboxRequests reads containerd's log at path and returns, for every
// pod whose sandbox was asked for, when its first RunPodSandbox request
// arrived (containerd's clock, which is this machine's). The sandbox's
// CreatedAt, which CRITimes starts from, comes later: containerd creates
// the pod's network namespace and runs the CNI plugins before it creates
// the pause container, and under a burst that is a large part of the
// runtime's time.
func SandboxRequests(path string) (map[types.UID]time.Time, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("sandbox requests: %w", err)
	}
	defer f.Close()
	first := map[types.UID]time.Time{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		m := sandboxRequestLine.FindSubmatch(sc.Bytes())
		if m == nil {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, string(m[1]))
		if err != nil {
			continue
		}
		uid := types.UID(m[2])
		if prev, ok := first[uid]; !ok || at.Before(prev) {
			first[uid] = at
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("sandbox requests: read %s: %w", path, err)
	}
	return first, nil
}
