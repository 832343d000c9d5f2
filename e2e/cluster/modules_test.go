package cluster

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLibraryModulesMatchE2E: every module the library's packages are built
// from has the same version in the e2e module. The e2e module requires
// k8s.io/kubernetes, which raises some of the library's dependencies; where
// the two disagree, every package above the differing module (golang.org/x/sys
// is below nearly all of them) is compiled twice, once for go vet and the
// agent binary (the library's versions) and once for the e2e tests, which
// cost a cold CI run minutes. Raise the library's requirement to the e2e
// module's version (go get module@version) when this fails.
func TestLibraryModulesMatchE2E(t *testing.T) {
	src, err := LocateSource()
	if err != nil {
		t.Fatal(err)
	}
	goBin, err := goCommand()
	if err != nil {
		t.Fatal(err)
	}
	goList := func(dir string, args ...string) string {
		cmd := exec.Command(goBin, append([]string{"list"}, args...)...)
		cmd.Dir = dir
		cmd.Env = append(cmd.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list %s in %s: %v", strings.Join(args, " "), dir, err)
		}
		return string(out)
	}
	// The modules of the library's build (tests included), without the
	// main module itself (no version).
	library := map[string]string{}
	for _, line := range strings.Split(goList(src.Root, "-deps", "-test", "-f", "{{with .Module}}{{if not .Main}}{{.Path}} {{.Version}}{{end}}{{end}}", "./..."), "\n") {
		if path, version, ok := strings.Cut(line, " "); ok {
			library[path] = version
		}
	}
	if len(library) == 0 {
		t.Fatal("go list found no dependency of the library")
	}
	// The e2e module's build list, a replaced module at its replacement's
	// version (e2e replaces k8s.io/* by their published releases).
	e2e := map[string]string{}
	for _, line := range strings.Split(goList(src.E2E, "-m", "-f", "{{.Path}} {{with .Replace}}{{.Version}}{{else}}{{.Version}}{{end}}", "all"), "\n") {
		if path, version, ok := strings.Cut(line, " "); ok {
			e2e[path] = version
		}
	}
	for path, version := range library {
		if got, ok := e2e[path]; ok && got != version {
			t.Errorf("%s: the library builds %s, the e2e module %s (go get %s@%s in the repository root)", path, version, got, path, got)
		}
	}
}
