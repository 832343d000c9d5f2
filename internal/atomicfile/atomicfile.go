// Package atomicfile replaces a file's content so that a reader, or the
// agent after a crash, sees either the old content or the new one, never a
// part: the checkpoints and state files the kubelet keeps under its root
// directory are written this way.
package atomicfile

import (
	"os"
	"path/filepath"
)

// Write replaces path's content with data, mode 0600: data goes to a
// temporary file in path's directory (which must exist), is synced to disk,
// and the file is renamed over path. On error path is unchanged and the
// temporary file removed; the error names the file that failed.
func Write(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path))
	if err != nil {
		return err
	}
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
	}
	return err
}
