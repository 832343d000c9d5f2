package conformance

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// TestRegistryServesPushedImage pushes a docker archive to the test
// registry and pulls it back by its name and by its digest, as a node
// pulling with policy Always does; the blobs are kept in the given
// directory; an image of another registry is refused.
func TestRegistryServesPushedImage(t *testing.T) {
	dir := t.TempDir()
	blobs := filepath.Join(dir, "blobs")
	if err := os.MkdirAll(blobs, 0o755); err != nil {
		t.Fatal(err)
	}
	r, err := startRegistry(blobs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.close(); err != nil {
			t.Error(err)
		}
	})

	img, err := random.Image(1024, 2)
	if err != nil {
		t.Fatal(err)
	}
	ref := r.host + "/" + repoPath + "/kitten:1.7"
	tag, err := name.NewTag(ref)
	if err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(dir, "kitten.tar")
	if err := tarball.WriteToFile(archive, tag, img); err != nil {
		t.Fatal(err)
	}
	if err := r.push(t.Context(), archive, ref); err != nil {
		t.Fatal(err)
	}

	want, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	pulled, err := remote.Image(tag, remote.WithContext(t.Context()))
	if err != nil {
		t.Fatalf("pull %s: %v", ref, err)
	}
	if got, err := pulled.Digest(); err != nil || got != want {
		t.Errorf("pulled %s: digest %s (%v), want %s", ref, got, err, want)
	}
	layers, err := pulled.Layers()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(blobs, d.Algorithm, d.Hex)); err != nil {
			t.Errorf("layer %s is not kept in %s: %v", d, blobs, err)
		}
	}
	byDigest, err := name.NewDigest(r.host + "/" + repoPath + "/kitten@" + want.String())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := remote.Image(byDigest, remote.WithContext(t.Context())); err != nil {
		t.Errorf("pull %s: %v", byDigest, err)
	}

	if err := r.push(t.Context(), archive, "nodekit.local/e2e/kitten:1.7"); err == nil || !strings.Contains(err.Error(), "not an image of the test registry") {
		t.Errorf("push to another registry: err = %v, want a refusal", err)
	}
}

// TestRepoListRenamesPublicRegistries: KUBE_TEST_REPO_LIST renames every
// public registry the framework pulls from into the prefix, and leaves the
// invalid and the authenticated ones (tests that expect a failed pull or
// need credentials) alone.
func TestRepoListRenamesPublicRegistries(t *testing.T) {
	const prefix = "127.0.0.1:5000/e2e"
	list := repoList(prefix)
	for key, repo := range list {
		if !strings.HasPrefix(repo, prefix) {
			t.Errorf("%s = %s, not under %s", key, repo, prefix)
		}
	}
	for _, key := range []string{"promoterE2eRegistry", "dockerLibraryRegistry", "sigStorageRegistry"} {
		if _, ok := list[key]; !ok {
			t.Errorf("%s is not renamed", key)
		}
	}
	for _, key := range []string{"invalidRegistry", "privateRegistry"} {
		if _, ok := list[key]; ok {
			t.Errorf("%s is renamed; its tests expect a failed pull or credentials", key)
		}
	}
}
