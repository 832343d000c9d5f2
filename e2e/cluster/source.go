package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
)

// Source locates the nodekit checkout the harness builds from.
type Source struct {
	// Root is the repository root (the github.com/nodekit/nodekit module).
	Root string
	// E2E is the e2e module's directory, Root/e2e.
	E2E string
	// Tools is the module that pins the control plane, Root/e2e/tools.
	Tools string
}

// LocateSource finds the checkout: $NODEKIT_SOURCE if set, else the directory
// this package was compiled from, else the nearest parent of the working
// directory holding e2e/tools/go.mod.
func LocateSource() (Source, error) {
	var candidates []string
	if dir := os.Getenv("NODEKIT_SOURCE"); dir != "" {
		candidates = append(candidates, dir)
	}
	if _, file, _, ok := runtime.Caller(0); ok {
		candidates = append(candidates, filepath.Join(filepath.Dir(file), "..", ".."))
	}
	if wd, err := os.Getwd(); err == nil {
		for dir := wd; ; dir = filepath.Dir(dir) {
			candidates = append(candidates, dir)
			if filepath.Dir(dir) == dir {
				break
			}
		}
	}
	for _, dir := range candidates {
		abs, err := filepath.Abs(dir)
		if err != nil {
			continue
		}
		if _, err := os.Stat(filepath.Join(abs, "e2e", "tools", "go.mod")); err == nil {
			return Source{Root: abs, E2E: filepath.Join(abs, "e2e"), Tools: filepath.Join(abs, "e2e", "tools")}, nil
		}
	}
	return Source{}, fmt.Errorf("locate the nodekit checkout: no e2e/tools/go.mod in %v; set NODEKIT_SOURCE to the repository root", candidates)
}

// DefaultCacheDir is where built binaries are kept between runs:
// $NODEKIT_CACHE, or $HOME/.cache/nodekit.
func DefaultCacheDir() (string, error) {
	if dir := os.Getenv("NODEKIT_CACHE"); dir != "" {
		return filepath.Abs(dir)
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("cache directory: set NODEKIT_CACHE or HOME: %w", err)
	}
	return filepath.Join(home, ".cache", "nodekit"), nil
}
