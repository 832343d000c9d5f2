package imagepull

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/lru"
	sigsjson "sigs.k8s.io/json"

	"github.com/nodekit/nodekit/internal/atomicfile"
)

// The records' API group and the versions read; written records are
// v1beta1, as the kubelet v1.35+ writes them (v1alpha1 ones, written by
// v1.33 and v1.34, are rewritten as v1beta1 when the store opens).
const (
	groupV1alpha1 = "kubelet.config.k8s.io/v1alpha1"
	groupV1beta1  = "kubelet.config.k8s.io/v1beta1"
	kindIntent    = "ImagePullIntent"
	kindRecord    = "ImagePulledRecord"
)

// File names in the record directories: "sha256-" and the hex SHA-256 of
// the image (intents) or the image ref (pulled records). A kubelet writes
// the name plus ".tmp" first, then renames it over the name; nodekit's
// temporary files (atomicfile's) do not start with "sha256-". Neither is
// read as a record.
const (
	filePrefix = "sha256-"
	tmpSuffix  = ".tmp"
)

// store reads and writes the kubelet's image pull records under its root
// directory, image_manager/pulling (an ImagePullIntent per image being
// pulled) and image_manager/pulled (an ImagePulledRecord per image ref),
// through an in-memory LRU cache of each. Its methods are not safe for
// concurrent use: the Manager serializes them.
type store struct {
	pullingDir, pulledDir string

	intents *lruSet                                   // image → present
	pulled  *lruMap[*kubeletconfig.ImagePulledRecord] // image ref → record
}

// lruSet and lruMap are an LRU cache that knows whether it holds every
// record on disk (authoritative: a miss means absent, no file is read).
// It is authoritative once a full listing without errors fitted in it,
// and stops being so when it evicts a record for room.
type lruMap[V any] struct {
	cache         *lru.Cache
	size          int
	authoritative bool
	deleting      bool // an explicit removal, not an eviction for room
}

type lruSet = lruMap[struct{}]

func newLRU[V any](size int) *lruMap[V] {
	m := &lruMap[V]{size: size}
	m.cache = lru.NewWithEvictionFunc(size, func(lru.Key, any) {
		if !m.deleting {
			m.authoritative = false
		}
	})
	return m
}

func (m *lruMap[V]) get(key string) (V, bool) {
	v, ok := m.cache.Get(key)
	if !ok {
		var zero V
		return zero, false
	}
	return v.(V), true
}

func (m *lruMap[V]) set(key string, v V) { m.cache.Add(key, v) }

func (m *lruMap[V]) remove(key string) {
	m.deleting = true
	m.cache.Remove(key)
	m.deleting = false
}

// fill replaces the cache's content with a full listing (keys and values
// in the same order) and makes it authoritative when the listing had no
// errors and fitted.
func (m *lruMap[V]) fill(keys []string, values []V, complete bool) {
	m.deleting = true
	m.cache.Clear()
	m.deleting = false
	for i := range keys[:min(len(keys), m.size)] {
		m.set(keys[i], values[i])
	}
	m.authoritative = complete && len(keys) < m.size
}

// openStore makes the record directories (0700) under rootDir, rewrites
// v1alpha1 records as v1beta1 and fills the caches; it returns the images
// of the intents on disk. A record that cannot be read or decoded is
// logged with its file name and left alone: it is no proof of anything
// (see the Manager).
func openStore(logger logr.Logger, rootDir string, intentsSize, pulledSize int) (*store, []string, error) {
	s := &store{
		pullingDir: filepath.Join(rootDir, "image_manager", "pulling"),
		pulledDir:  filepath.Join(rootDir, "image_manager", "pulled"),
		intents:    newLRU[struct{}](intentsSize),
		pulled:     newLRU[*kubeletconfig.ImagePulledRecord](pulledSize),
	}
	for _, dir := range []string{s.pullingDir, s.pulledDir} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, nil, fmt.Errorf("image pull records: %w", err)
		}
	}
	intents, err := s.listIntents(logger)
	if err != nil {
		logger.Error(err, "Cannot read every image pull intent; the ones that cannot be read prove nothing")
	}
	if _, err := s.listPulled(logger); err != nil {
		logger.Error(err, "Cannot read every image pulled record; the ones that cannot be read prove nothing")
	}
	return s, intents, nil
}

// decode reads a record of kind into out (a *kubeletconfig.ImagePullIntent
// or *kubeletconfig.ImagePulledRecord), strictly, as the kubelet's
// decoder: unknown or duplicate fields are errors. old reports a v1alpha1
// record.
func decode(data []byte, kind string, out any) (old bool, err error) {
	var meta struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := json.Unmarshal(data, &meta); err != nil {
		return false, err
	}
	if meta.Kind != kind || (meta.APIVersion != groupV1beta1 && meta.APIVersion != groupV1alpha1) {
		return false, fmt.Errorf("got kind %q of %q, want %s of %s or %s", meta.Kind, meta.APIVersion, kind, groupV1beta1, groupV1alpha1)
	}
	strict, err := sigsjson.UnmarshalStrict(data, out)
	if err != nil {
		return false, err
	}
	if len(strict) > 0 {
		return false, errors.Join(strict...)
	}
	return meta.APIVersion == groupV1alpha1, nil
}

// encode writes v as the kubelet's serializer does: JSON, kind and
// apiVersion first, a newline at the end.
func encode(v any) ([]byte, error) {
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// fileName is a record's file name for an image or an image ref.
func fileName(key string) string {
	return fmt.Sprintf("%s%x", filePrefix, sha256.Sum256([]byte(key)))
}

// writeFile writes content to dir/name, 0600, through atomicfile (synced,
// then renamed over it), making dir (0700) first if it was removed.
func writeFile(dir, name string, content []byte) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(dir, name), content)
}

func removeFile(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// recordCounts are the numbers of record files on disk.
type recordCounts struct{ intents, pulled int }

// count counts the record files (named sha256-*, not *.tmp).
func (s *store) count() (recordCounts, error) {
	var n recordCounts
	for _, d := range []struct {
		dir string
		n   *int
	}{{s.pullingDir, &n.intents}, {s.pulledDir, &n.pulled}} {
		entries, err := os.ReadDir(d.dir)
		if err != nil {
			return n, err
		}
		for _, e := range entries {
			if isRecordFile(e) {
				*d.n++
			}
		}
	}
	return n, nil
}

// isRecordFile reports whether a directory entry is a record file.
func isRecordFile(e fs.DirEntry) bool {
	name := e.Name()
	return !e.IsDir() && strings.HasPrefix(name, filePrefix) && !strings.HasSuffix(name, tmpSuffix)
}

// eachFile calls f with the path and content of each record file of dir
// (named sha256-*, not *.tmp, not a directory); errors reading a file or
// from f are joined and the walk goes on.
func eachFile(dir string, f func(path string, data []byte) error) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if !isRecordFile(e) {
			continue
		}
		path := filepath.Join(dir, e.Name())
		data, err := os.ReadFile(path)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := f(path, data); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// listIntents reads every intent (rewriting v1alpha1 ones) and refills
// the intents cache; the error names the files that could not be read.
func (s *store) listIntents(logger logr.Logger) ([]string, error) {
	var images []string
	err := eachFile(s.pullingDir, func(path string, data []byte) error {
		var intent kubeletconfig.ImagePullIntent
		old, err := decode(data, kindIntent, &intent)
		if err != nil {
			return fmt.Errorf("image pull intent %s: %w", path, err)
		}
		if old {
			if err := s.writeIntentFile(intent.Image); err != nil {
				logger.Error(err, "Cannot rewrite a v1alpha1 image pull intent as v1beta1", "file", path)
			}
		}
		images = append(images, intent.Image)
		return nil
	})
	s.intents.fill(images, make([]struct{}, len(images)), err == nil)
	return images, err
}

// listPulled reads every pulled record (rewriting v1alpha1 ones) and
// refills the pulled records cache; the error names the files that could
// not be read.
func (s *store) listPulled(logger logr.Logger) ([]*kubeletconfig.ImagePulledRecord, error) {
	var records []*kubeletconfig.ImagePulledRecord
	var refs []string
	err := eachFile(s.pulledDir, func(path string, data []byte) error {
		r := &kubeletconfig.ImagePulledRecord{}
		old, err := decode(data, kindRecord, r)
		if err != nil {
			return fmt.Errorf("image pulled record %s: %w", path, err)
		}
		if old {
			if err := s.writePulledFile(r); err != nil {
				logger.Error(err, "Cannot rewrite a v1alpha1 image pulled record as v1beta1", "file", path)
			}
		}
		records = append(records, r)
		refs = append(refs, r.ImageRef)
		return nil
	})
	s.pulled.fill(refs, records, err == nil)
	return records, err
}

// intentExists reports whether an intent for image is on disk.
func (s *store) intentExists(image string) (bool, error) {
	if _, ok := s.intents.get(image); ok {
		return true, nil
	}
	if s.intents.authoritative {
		return false, nil
	}
	var intent kubeletconfig.ImagePullIntent
	if found, err := readRecord(s.pullingDir, image, kindIntent, &intent); !found || err != nil {
		return false, err
	}
	if intent.Image != image {
		return false, nil
	}
	s.intents.set(image, struct{}{})
	return true, nil
}

// readRecord decodes the record of kind for key in dir into out; found
// is false when there is no such file, true with an error naming the file
// when it cannot be read or decoded.
func readRecord(dir, key, kind string, out any) (found bool, err error) {
	path := filepath.Join(dir, fileName(key))
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err == nil {
		_, err = decode(data, kind, out)
	}
	if err != nil {
		return true, fmt.Errorf("%s %s: %w", kind, path, err)
	}
	return true, nil
}

func (s *store) writeIntentFile(image string) error {
	data, err := encode(&kubeletconfig.ImagePullIntent{
		TypeMeta: typeMeta(kindIntent),
		Image:    image,
	})
	if err != nil {
		return err
	}
	return writeFile(s.pullingDir, fileName(image), data)
}

// writeIntent records that image is being pulled.
func (s *store) writeIntent(image string) error {
	if err := s.writeIntentFile(image); err != nil {
		return fmt.Errorf("write image pull intent for %q: %w", image, err)
	}
	s.intents.set(image, struct{}{})
	return nil
}

// deleteIntent removes image's intent.
func (s *store) deleteIntent(image string) error {
	if err := removeFile(filepath.Join(s.pullingDir, fileName(image))); err != nil {
		return fmt.Errorf("remove image pull intent for %q: %w", image, err)
	}
	s.intents.remove(image)
	return nil
}

// getPulled returns the pulled record of imageRef. exists is true with an
// error when a file is there but cannot be decoded (its name is in the
// error).
func (s *store) getPulled(imageRef string) (r *kubeletconfig.ImagePulledRecord, exists bool, err error) {
	if r, ok := s.pulled.get(imageRef); ok {
		return r, true, nil
	}
	if s.pulled.authoritative {
		return nil, false, nil
	}
	r = &kubeletconfig.ImagePulledRecord{}
	if found, err := readRecord(s.pulledDir, imageRef, kindRecord, r); !found || err != nil {
		return nil, found, err
	}
	if r.ImageRef != imageRef {
		return nil, false, nil
	}
	s.pulled.set(imageRef, r)
	return r, true, nil
}

func (s *store) writePulledFile(r *kubeletconfig.ImagePulledRecord) error {
	r.TypeMeta = typeMeta(kindRecord)
	data, err := encode(r)
	if err != nil {
		return err
	}
	return writeFile(s.pulledDir, fileName(r.ImageRef), data)
}

// writePulled writes r; the store keeps r, which must not change after.
func (s *store) writePulled(r *kubeletconfig.ImagePulledRecord) error {
	if err := s.writePulledFile(r); err != nil {
		return fmt.Errorf("write image pulled record for %s: %w", r.ImageRef, err)
	}
	s.pulled.set(r.ImageRef, r)
	return nil
}

// deletePulled removes imageRef's pulled record.
func (s *store) deletePulled(imageRef string) error {
	if err := removeFile(filepath.Join(s.pulledDir, fileName(imageRef))); err != nil {
		return fmt.Errorf("remove image pulled record for %s: %w", imageRef, err)
	}
	s.pulled.remove(imageRef)
	return nil
}

func typeMeta(kind string) metav1.TypeMeta {
	return metav1.TypeMeta{Kind: kind, APIVersion: groupV1beta1}
}
