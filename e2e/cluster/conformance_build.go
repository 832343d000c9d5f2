package cluster

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
)

// ConformanceBinaries are upstream's end-to-end test programs at the
// Kubernetes version e2e/tools pins (BuildConformance).
type ConformanceBinaries struct {
	// KubernetesVersion is the k8s.io/kubernetes version they come from.
	KubernetesVersion string
	// Source is that version's module directory (in the module cache),
	// e2e.test's --repo-root for the files it reads at run time.
	Source string
	// E2ETest is test/e2e compiled as a test binary, upstream's e2e.test.
	E2ETest string
	// Ginkgo is the ginkgo CLI of the version e2e.test links, which runs
	// it in parallel processes.
	Ginkgo string
	// Agnhost is test/images/agnhost, the program of most test images,
	// linked statically.
	Agnhost string
	// Nonewprivs is test/images/nonewprivs (nnp), the program of the
	// nonewprivs test image, linked statically.
	Nonewprivs string
	// Ash is a static busybox of upstream's ash alone, the sh of the
	// busybox test images (busybox_ash.go).
	Ash string
}

// conformanceRecipe versions how BuildConformance builds, in its cache key.
const conformanceRecipe = "conformance-2"

// BuildConformance returns upstream's e2e.test, the ginkgo CLI, agnhost and
// nnp at the pinned Kubernetes version, and upstream's ash
// (buildUpstreamAsh), building them with the go command
// in a copy of the tools module (as BuildKubelet does) when the cache does
// not hold them, and caching them in <cache>/conformance-<version>/bin. A
// cold build takes several minutes on two cores even with the control
// plane already built (e2e.test links every test/e2e suite); a cached one
// returns at once.
func BuildConformance(ctx context.Context, opts BuildOptions) (ConformanceBinaries, error) {
	opts, goBin, err := opts.complete()
	if err != nil {
		return ConformanceBinaries{}, err
	}
	k8sVersion, _, err := pinnedVersions(opts.Source.Tools)
	if err != nil {
		return ConformanceBinaries{}, err
	}
	ldflags := versionLDFlags(k8sVersion)
	name := "conformance-" + k8sVersion
	binDir := filepath.Join(opts.CacheDir, name, "bin")
	bins := ConformanceBinaries{
		KubernetesVersion: k8sVersion,
		E2ETest:           filepath.Join(binDir, "e2e.test"),
		Ginkgo:            filepath.Join(binDir, "ginkgo"),
		Agnhost:           filepath.Join(binDir, "agnhost"),
		Nonewprivs:        filepath.Join(binDir, "nnp"),
	}
	outputs := []string{bins.E2ETest, bins.Ginkgo, bins.Agnhost, bins.Nonewprivs}
	// All four are linked statically: agnhost and nnp because they run in
	// images holding nothing else; ginkgo and e2e.test (which Kubernetes'
	// own build links with cgo's default) because with cgo they would
	// compile every package they share with the control plane
	// (BuildControlPlane, static) a second time, minutes of a cold CI run,
	// for nothing cgo gives them here (Go's resolver serves their lookups).
	static := []string{"CGO_ENABLED=0"}
	err = buildInToolsCopy(ctx, opts, goBin, name, binDir, outputs, static, []byte(ldflags+"\n"+conformanceRecipe),
		func(build func(args ...string) error, staging string) error {
			fmt.Fprintf(opts.Log, "building e2e.test, ginkgo, agnhost and nnp %s into %s\n", k8sVersion, binDir)
			for _, args := range [][]string{
				{"build", "-o", filepath.Join(staging, "ginkgo"), "github.com/onsi/ginkgo/v2/ginkgo"},
				{"build", "-ldflags", ldflags, "-o", filepath.Join(staging, "agnhost"), kubernetesModule + "/test/images/agnhost"},
				{"build", "-ldflags", "-s -w", "-o", filepath.Join(staging, "nnp"), kubernetesModule + "/test/images/nonewprivs"},
				{"test", "-c", "-ldflags", ldflags, "-o", filepath.Join(staging, "e2e.test"), kubernetesModule + "/test/e2e"},
			} {
				if err := build(args...); err != nil {
					return err
				}
			}
			return nil
		})
	if err != nil {
		return ConformanceBinaries{}, fmt.Errorf("build conformance binaries %s: %w", k8sVersion, err)
	}
	dir, err := runCommand(ctx, opts.Source.Tools, []string{"GOWORK=off"}, nil, goBin, "list", "-m", "-f", "{{.Dir}}", kubernetesModule)
	if err != nil {
		return ConformanceBinaries{}, fmt.Errorf("locate the source of %s %s: %w", kubernetesModule, k8sVersion, err)
	}
	bins.Source = strings.TrimSpace(string(dir))
	if bins.Ash, err = buildUpstreamAsh(ctx, opts); err != nil {
		return ConformanceBinaries{}, err
	}
	return bins, nil
}
