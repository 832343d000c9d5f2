package volume

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/klog/v2"
)

// Limits of a projected file's path, the kubelet's.
const (
	maxFileNameLength = 255
	maxPathLength     = 4096
)

// Names the atomic writer reserves in its target directory.
const (
	dataDirName    = "..data"
	newDataDirName = "..data_tmp"
)

// FileProjection is the content, mode and owner of one projected file.
type FileProjection struct {
	Data []byte
	// Mode is the file's permission bits (e.g. 0644).
	Mode int32
	// FsUser, when set, owns the file (and its top-level link).
	FsUser *int64
}

// AtomicWriter projects a set of files into a directory so that readers
// see either the old or the new set, never a mix, with the kubelet's
// layout, which tools and applications rely on:
//
//	<target>/..2024_01_31_15_04_05.123456789/  the files (a timestamped directory)
//	<target>/..data -> ..2024_01_31_15_04_05.123456789
//	<target>/<first path element> -> ..data/<first path element>
//
// An update writes a new timestamped directory, points a new ..data_tmp
// link at it and renames that over ..data (rename is atomic), then adds the
// visible links new paths need, removes those of paths gone and deletes the
// old timestamped directory. Consumers can watch ..data with inotify.
//
// Paths starting with ".." are reserved. An AtomicWriter holds no state;
// writes to one directory must not overlap (the Manager serializes them).
type AtomicWriter struct {
	targetDir string
	// logContext names the volume in log lines.
	logContext string
}

// NewAtomicWriter returns a writer for targetDir, which must exist.
// logContext names the volume in log lines (e.g. "pod ns/name volume v").
func NewAtomicWriter(targetDir, logContext string) (*AtomicWriter, error) {
	if _, err := os.Stat(targetDir); err != nil {
		return nil, err
	}
	return &AtomicWriter{targetDir: targetDir, logContext: logContext}, nil
}

// Write projects payload (paths relative to the target directory) into
// the target directory. When anything changed it writes a new timestamped
// directory and calls setPerms (when not nil) with its name before
// publishing it; when nothing changed it only makes sure the visible links
// exist. It returns the first error and leaves the previous content
// visible on failure.
func (w *AtomicWriter) Write(ctx context.Context, payload map[string]FileProjection, setPerms func(tsDirName string) error) error {
	logger := klog.FromContext(ctx)
	clean, err := validatePayload(payload)
	if err != nil {
		return err
	}

	dataDirPath := filepath.Join(w.targetDir, dataDirName)
	oldTsDir, err := os.Readlink(dataDirPath)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%s: read the data directory link: %w", w.logContext, err)
		}
		oldTsDir = ""
	}
	oldTsPath := filepath.Join(w.targetDir, oldTsDir)

	var toRemove map[string]bool
	write := true
	if oldTsDir != "" {
		if toRemove, err = w.pathsToRemove(clean, oldTsPath); err != nil {
			return fmt.Errorf("%s: find files to remove: %w", w.logContext, err)
		}
		changed, err := payloadChanged(clean, oldTsPath)
		if err != nil {
			return fmt.Errorf("%s: compare with the current files: %w", w.logContext, err)
		}
		if !changed && len(toRemove) == 0 {
			logger.V(4).Info("Volume content unchanged", "volume", w.logContext)
			// The links may still be missing (a crash after the rename).
			write = false
			oldTsDir = ""
		}
	}

	if write {
		tsDir, err := w.newTimestampDir()
		if err != nil {
			return fmt.Errorf("%s: create a data directory: %w", w.logContext, err)
		}
		tsDirName := filepath.Base(tsDir)
		if err := writePayloadToDir(clean, tsDir); err != nil {
			_ = os.RemoveAll(tsDir)
			return fmt.Errorf("%s: write files: %w", w.logContext, err)
		}
		if setPerms != nil {
			if err := setPerms(tsDirName); err != nil {
				_ = os.RemoveAll(tsDir)
				return fmt.Errorf("%s: set ownership: %w", w.logContext, err)
			}
		}
		newDataDirPath := filepath.Join(w.targetDir, newDataDirName)
		// A leftover of an interrupted write would make Symlink fail.
		_ = os.Remove(newDataDirPath)
		if err := os.Symlink(tsDirName, newDataDirPath); err != nil {
			_ = os.RemoveAll(tsDir)
			return fmt.Errorf("%s: link the new data directory: %w", w.logContext, err)
		}
		if err := os.Rename(newDataDirPath, dataDirPath); err != nil {
			_ = os.Remove(newDataDirPath)
			_ = os.RemoveAll(tsDir)
			return fmt.Errorf("%s: publish the new data directory: %w", w.logContext, err)
		}
		logger.V(4).Info("Wrote volume content", "volume", w.logContext, "dir", tsDirName)
	}

	if err := w.createUserVisibleFiles(clean); err != nil {
		return fmt.Errorf("%s: create visible links: %w", w.logContext, err)
	}
	if err := w.removeUserVisiblePaths(toRemove); err != nil {
		return fmt.Errorf("%s: remove old visible links: %w", w.logContext, err)
	}
	if oldTsDir != "" {
		if err := os.RemoveAll(oldTsPath); err != nil {
			return fmt.Errorf("%s: remove the old data directory: %w", w.logContext, err)
		}
	}
	return nil
}

// validatePayload checks every path and returns the payload with cleaned
// paths.
func validatePayload(payload map[string]FileProjection) (map[string]FileProjection, error) {
	clean := make(map[string]FileProjection, len(payload))
	for p, content := range payload {
		if err := validatePath(p); err != nil {
			return nil, err
		}
		clean[filepath.Clean(p)] = content
	}
	return clean, nil
}

// validatePath rejects what a projected path may not be: empty, absolute,
// longer than 4096 characters, with a ".." element or an element longer
// than 255 characters, or starting with "..". The messages are the
// kubelet's.
func validatePath(p string) error {
	if p == "" {
		return fmt.Errorf("invalid path: must not be empty: %q", p)
	}
	if path.IsAbs(p) {
		return fmt.Errorf("invalid path: must be relative path: %s", p)
	}
	if len(p) > maxPathLength {
		return fmt.Errorf("invalid path: must be less than or equal to %d characters", maxPathLength)
	}
	items := strings.Split(p, string(os.PathSeparator))
	for _, item := range items {
		if item == ".." {
			return fmt.Errorf("invalid path: must not contain '..': %s", p)
		}
		if len(item) > maxFileNameLength {
			return fmt.Errorf("invalid path: filenames must be less than or equal to %d characters", maxFileNameLength)
		}
	}
	if strings.HasPrefix(items[0], "..") && len(items[0]) > 2 {
		return fmt.Errorf("invalid path: must not start with '..': %s", p)
	}
	return nil
}

// payloadChanged reports whether any file of payload is missing from
// tsDir or has other content.
func payloadChanged(payload map[string]FileProjection, tsDir string) (bool, error) {
	for p, fp := range payload {
		full := filepath.Join(tsDir, p)
		if _, err := os.Lstat(full); errors.Is(err, fs.ErrNotExist) {
			return true, nil
		}
		onDisk, err := os.ReadFile(full)
		if err != nil {
			return false, err
		}
		if !bytes.Equal(onDisk, fp.Data) {
			return true, nil
		}
	}
	return false, nil
}

// pathsToRemove returns the paths under oldTsDir that are neither in
// payload nor a parent directory of a payload path.
func (w *AtomicWriter) pathsToRemove(payload map[string]FileProjection, oldTsDir string) (map[string]bool, error) {
	current := map[string]bool{}
	err := filepath.Walk(oldTsDir, func(p string, _ os.FileInfo, err error) error {
		rel := strings.TrimPrefix(strings.TrimPrefix(p, oldTsDir), string(os.PathSeparator))
		if rel != "" {
			current[rel] = true
		}
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	for p := range payload {
		for sub := p; sub != "" && sub != "."; sub = filepath.Dir(sub) {
			delete(current, sub)
		}
	}
	return current, nil
}

// newTimestampDir creates the next timestamped directory, mode 0755
// whatever the umask so group and others can traverse it.
func (w *AtomicWriter) newTimestampDir() (string, error) {
	dir, err := os.MkdirTemp(w.targetDir, time.Now().UTC().Format("..2006_01_02_15_04_05."))
	if err != nil {
		return "", err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return "", err
	}
	return dir, nil
}

// writePayloadToDir writes every file of payload under dir with its mode
// (whatever the umask) and owner.
func writePayloadToDir(payload map[string]FileProjection, dir string) error {
	for p, fp := range payload {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), os.ModePerm); err != nil {
			return err
		}
		mode := os.FileMode(fp.Mode) & os.ModePerm
		if err := os.WriteFile(full, fp.Data, mode); err != nil {
			return err
		}
		// WriteFile's mode is masked by the umask.
		if err := os.Chmod(full, mode); err != nil {
			return err
		}
		if fp.FsUser != nil {
			if err := os.Lchown(full, int(*fp.FsUser), -1); err != nil {
				return err
			}
		}
	}
	return nil
}

// createUserVisibleFiles links the first element of every payload path
// into ..data, where the link does not exist yet.
func (w *AtomicWriter) createUserVisibleFiles(payload map[string]FileProjection) error {
	for p, fp := range payload {
		first, _, _ := strings.Cut(p, string(os.PathSeparator))
		visible := filepath.Join(w.targetDir, first)
		if _, err := os.Readlink(visible); err == nil || !errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err := os.Symlink(filepath.Join(dataDirName, first), visible); err != nil {
			return err
		}
		if fp.FsUser != nil {
			if err := os.Lchown(visible, int(*fp.FsUser), -1); err != nil {
				return err
			}
		}
	}
	return nil
}

// removeUserVisiblePaths removes the top-level links of paths gone.
func (w *AtomicWriter) removeUserVisiblePaths(paths map[string]bool) error {
	var last error
	for p := range paths {
		if strings.Contains(p, string(os.PathSeparator)) {
			continue
		}
		if err := os.Remove(filepath.Join(w.targetDir, p)); err != nil {
			last = err
		}
	}
	return last
}
