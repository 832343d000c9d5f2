package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestCopyExecutable checks that an agent's copy of the binary has the
// same bytes, is executable, and replaces what was at its path.
func TestCopyExecutable(t *testing.T) {
	dir := t.TempDir()
	from := filepath.Join(dir, "nodeagent")
	content := bytes.Repeat([]byte("\x7fELF agent"), 10000)
	if err := os.WriteFile(from, content, 0o755); err != nil {
		t.Fatal(err)
	}
	to := filepath.Join(dir, "bin", "nb-containerd", "nodeagent")
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, []byte("an older, longer binary than the one copied over it, and more"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := copyExecutable(from, to); err != nil {
		t.Fatalf("copyExecutable: %v", err)
	}
	got, err := os.ReadFile(to)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, content) {
		t.Errorf("copy holds %d bytes, want the %d of the original", len(got), len(content))
	}
	fi, err := os.Stat(to)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm()&0o100 == 0 {
		t.Errorf("copy's mode is %v, want executable", fi.Mode())
	}
}

// TestCopyExecutableMakesDirectory checks that the copy's directory is
// made when missing and that a missing original is an error.
func TestCopyExecutableMakesDirectory(t *testing.T) {
	dir := t.TempDir()
	from := filepath.Join(dir, "nodeagent")
	if err := os.WriteFile(from, []byte("agent"), 0o755); err != nil {
		t.Fatal(err)
	}
	to := filepath.Join(dir, "a", "b", "nodeagent")
	if err := copyExecutable(from, to); err != nil {
		t.Fatalf("copyExecutable: %v", err)
	}
	if _, err := os.Stat(to); err != nil {
		t.Errorf("no copy: %v", err)
	}
	if err := copyExecutable(filepath.Join(dir, "missing"), filepath.Join(dir, "c", "nodeagent")); err == nil {
		t.Error("copyExecutable of a missing file: no error")
	}
}
