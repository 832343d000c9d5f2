package fakecri

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"

	"github.com/distribution/reference"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// NewImage returns an image whose only tag (or digest, for a digest
// reference) is ref normalized the way containerd normalizes it, with an ID
// and a repository digest derived deterministically from that reference, and
// the given size in bytes. It returns an error if ref is not a valid image
// reference.
func NewImage(ref string, size uint64) (*runtimeapi.Image, error) {
	named, err := parseRef(ref)
	if err != nil {
		return nil, err
	}
	norm := named.String()
	img := &runtimeapi.Image{Id: derivedDigest("config", norm), Size: size}
	if _, digested := named.(reference.Digested); digested {
		img.RepoDigests = []string{norm}
	} else {
		img.RepoTags = []string{norm}
		img.RepoDigests = []string{named.Name() + "@" + derivedDigest("manifest", norm)}
	}
	return img, nil
}

// parseRef parses an image reference and normalizes it like containerd:
// "nginx" is "docker.io/library/nginx:latest".
func parseRef(ref string) (reference.Named, error) {
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return nil, fmt.Errorf("invalid image reference %q: %w", ref, err)
	}
	return reference.TagNameOnly(named), nil
}

// derivedDigest returns a sha256 digest of kind and ref, standing in for the
// content digests a registry would serve.
func derivedDigest(kind, ref string) string {
	sum := sha256.Sum256([]byte("fakecri " + kind + " " + ref))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// imageStore is a set of images indexed by ID and by normalized tag and
// digest. Stored images are owned by the store: they are copied on the way in
// and must be copied on the way out. The zero value is empty; the Server's
// mutex guards it.
type imageStore struct {
	byID  map[string]*runtimeapi.Image
	byRef map[string]string // normalized tag or digest to image ID
}

// add stores a copy of img with its tags and digests normalized (a
// reference that does not parse is kept as given) and returns the copy. An
// image without an ID gets one derived from its first reference. An image
// with the same ID is replaced, and a tag or digest that named another image
// moves to this one; an image left with no tag or digest is removed.
func (st *imageStore) add(img *runtimeapi.Image) *runtimeapi.Image {
	img = proto.Clone(img).(*runtimeapi.Image)
	img.RepoTags = normalizeRefs(img.RepoTags)
	img.RepoDigests = normalizeRefs(img.RepoDigests)
	refs := slices.Concat(img.RepoTags, img.RepoDigests)
	if img.Id == "" {
		first := ""
		if len(refs) > 0 {
			first = refs[0]
		}
		img.Id = derivedDigest("config", first)
	}
	if st.byID == nil {
		st.byID = map[string]*runtimeapi.Image{}
		st.byRef = map[string]string{}
	}
	st.remove(img.Id)
	for _, ref := range refs {
		if owner, ok := st.byRef[ref]; ok {
			st.untag(owner, ref)
		}
		st.byRef[ref] = img.Id
	}
	st.byID[img.Id] = img
	return img
}

// untag removes ref from the image with the given ID, and the image itself
// if no reference is left.
func (st *imageStore) untag(id, ref string) {
	img := st.byID[id]
	isRef := func(r string) bool { return r == ref }
	img.RepoTags = slices.DeleteFunc(img.RepoTags, isRef)
	img.RepoDigests = slices.DeleteFunc(img.RepoDigests, isRef)
	delete(st.byRef, ref)
	if len(img.RepoTags) == 0 && len(img.RepoDigests) == 0 {
		delete(st.byID, id)
	}
}

// remove deletes the image with the given ID and all its references; it is a
// no-op for an unknown ID.
func (st *imageStore) remove(id string) {
	img, ok := st.byID[id]
	if !ok {
		return
	}
	for _, ref := range slices.Concat(img.RepoTags, img.RepoDigests) {
		delete(st.byRef, ref)
	}
	delete(st.byID, id)
}

// set replaces the content of the store with copies of imgs.
func (st *imageStore) set(imgs []*runtimeapi.Image) {
	*st = imageStore{}
	for _, img := range imgs {
		st.add(img)
	}
}

// lookup returns the stored image that ref names by ID, tag or digest, or
// nil if none does. It returns an error only if ref is neither an ID of a
// stored image nor a valid reference.
func (st *imageStore) lookup(ref string) (*runtimeapi.Image, error) {
	if img, ok := st.byID[ref]; ok {
		return img, nil
	}
	named, err := parseRef(ref)
	if err != nil {
		return nil, err
	}
	return st.byID[st.byRef[named.String()]], nil
}

// list returns copies of all stored images, ordered by ID.
func (st *imageStore) list() []*runtimeapi.Image {
	out := make([]*runtimeapi.Image, 0, len(st.byID))
	for _, img := range st.byID {
		out = append(out, clone(img))
	}
	slices.SortFunc(out, func(a, b *runtimeapi.Image) int { return cmp.Compare(a.Id, b.Id) })
	return out
}

// usage returns the total size and the number of stored images.
func (st *imageStore) usage() (bytes, count uint64) {
	for _, img := range st.byID {
		bytes += img.Size
		count++
	}
	return bytes, count
}

func normalizeRefs(refs []string) []string {
	var out []string
	for _, ref := range refs {
		if named, err := parseRef(ref); err == nil {
			ref = named.String()
		}
		if !slices.Contains(out, ref) {
			out = append(out, ref)
		}
	}
	return out
}

// clone returns a deep copy of m (nil for nil).
func clone[T proto.Message](m T) T {
	return proto.Clone(m).(T)
}

// cloneAll returns deep copies of ms (nil for nil).
func cloneAll[T proto.Message](ms []T) []T {
	if ms == nil {
		return nil
	}
	out := make([]T, len(ms))
	for i, m := range ms {
		out[i] = clone(m)
	}
	return out
}
