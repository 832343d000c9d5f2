package nodekit_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDocListsEveryPackage: the package documentation (doc.go) names every
// package of the module (not of the modules nested in it), so a newcomer's map is never short of one. The
// packages under internal/ and examples/ may be named by their last element
// in that directory's entry.
func TestDocListsEveryPackage(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	mentioned := func(name string) bool {
		return regexp.MustCompile(`(^|[\s(,])` + regexp.QuoteMeta(name) + `($|[\s),:;.]|/\.\.\.)`).Match(doc)
	}
	err = filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path == "." {
				return nil
			}
			// Modules of their own (e2e, hack/defaultscheck) document
			// themselves.
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil || d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir
			}
			return nil
		}
		dir := filepath.Dir(path)
		if dir == "." || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || filepath.Base(path) != firstGoFile(t, dir) {
			return nil
		}
		pkg := filepath.ToSlash(dir)
		parent := filepath.ToSlash(filepath.Dir(dir))
		if !mentioned(pkg) && !((parent == "internal" || parent == "examples") && mentioned(filepath.Base(dir))) {
			t.Errorf("doc.go does not name the package %s", pkg)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// firstGoFile is the first non-test Go file of dir, by name: each package is
// checked once.
func firstGoFile(t *testing.T, dir string) string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if n := e.Name(); strings.HasSuffix(n, ".go") && !strings.HasSuffix(n, "_test.go") {
			return n
		}
	}
	return ""
}
