package cluster

import (
	"archive/tar"
	"bufio"
	"compress/bzip2"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
)

// Upstream's busybox image (the e2e framework's BusyBox) runs busybox's
// ash as sh. Debian's busybox-static, which the harness packs otherwise,
// reverts upstream commit 9c143ce52 ("ash: retain envvars with bad names
// in initial environment"): its sh drops environment variables whose names
// are not shell identifiers (data-1, 1-data-1, $_-data-1), which the
// envFrom conformance tests expect `sh -c env` to print. The stand-in
// busybox images therefore get upstream's ash, built from the upstream
// tarball of Debian's busybox source package (Debian's patches are not
// applied), statically, with the applets the upstream image has beside it
// left to Debian's busybox.

// ashRecipe versions how buildUpstreamAsh configures and builds, in its
// cache key.
const ashRecipe = "ash-1"

// ashConfig are the busybox options set for the ash build, on top of
// allnoconfig: ash as sh with the features of busybox's defconfig, a static
// binary that reads /etc/passwd and /etc/group itself (a static glibc
// cannot load its NSS modules in an image without them). Options these
// make visible take their defaults.
var ashConfig = []string{
	"STATIC", "LONG_OPTS", "USE_BB_PWD_GRP", "FEATURE_EDITING",
	"SH_IS_ASH", "ASH", "ASH_OPTIMIZE_FOR_SIZE", "ASH_INTERNAL_GLOB", "ASH_BASH_COMPAT",
	"ASH_BASH_NOT_FOUND_HOOK", "ASH_JOB_CONTROL", "ASH_ALIAS", "ASH_RANDOM_SUPPORT",
	"ASH_EXPAND_PRMT", "ASH_IDLE_TIMEOUT", "ASH_MAIL", "ASH_ECHO", "ASH_PRINTF", "ASH_TEST",
	"ASH_HELP", "ASH_GETOPTS", "ASH_CMDCMD",
	"FEATURE_SH_MATH", "FEATURE_SH_MATH_64", "FEATURE_SH_MATH_BASE", "FEATURE_SH_EXTRA_QUIET",
	"FEATURE_SH_READ_FRAC", "FEATURE_SH_HISTFILESIZE",
}

// buildUpstreamAsh returns a static busybox holding only ash (run as sh or
// ash), built from upstream's source as described above and cached in
// <cache>/busybox-ash/<tarball>-<recipe>/busybox. The source is fetched once
// with apt-get (Debian's source package of busybox, downloaded only, into
// <cache>/busybox-ash/src); building needs make and gcc with a static libc
// (Debian's make, gcc and libc6-dev: hack/install-deps.sh) and takes about a
// minute on two cores.
func buildUpstreamAsh(ctx context.Context, opts BuildOptions) (string, error) {
	root := filepath.Join(opts.CacheDir, "busybox-ash")
	tarball, err := busyboxSource(ctx, filepath.Join(root, "src"), opts.Log)
	if err != nil {
		return "", fmt.Errorf("upstream busybox ash: %w", err)
	}
	version := strings.TrimSuffix(filepath.Base(tarball), filepath.Ext(tarball))
	version = strings.TrimSuffix(strings.TrimSuffix(version, ".tar"), ".orig")
	binDir := filepath.Join(root, version+"-"+ashRecipe)
	out := filepath.Join(binDir, "busybox")
	err = cached(root, "build", binDir, cacheKey([]byte(version), []byte(ashRecipe)), []string{out}, func(staging string) error {
		fmt.Fprintf(opts.Log, "building ash from %s into %s\n", tarball, out)
		if err := extractTarball(tarball, staging); err != nil {
			return err
		}
		if err := configureAsh(ctx, staging); err != nil {
			return err
		}
		if _, err := runCommand(ctx, staging, nil, nil, "make", "-j"+strconv.Itoa(runtime.NumCPU())); err != nil {
			return fmt.Errorf("%w (make and gcc with libc6-dev are needed: hack/install-deps.sh)", err)
		}
		return checkStatic(filepath.Join(staging, "busybox"))
	})
	if err != nil {
		return "", fmt.Errorf("upstream busybox ash: %w", err)
	}
	return out, nil
}

// configureAsh writes dir's .config: allnoconfig, then ashConfig set and
// every option that makes visible at its default (make oldconfig answered
// with empty lines).
func configureAsh(ctx context.Context, dir string) error {
	if _, err := runCommand(ctx, dir, nil, nil, "make", "allnoconfig"); err != nil {
		return fmt.Errorf("%w (make is needed: hack/install-deps.sh)", err)
	}
	path := filepath.Join(dir, ".config")
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	want := map[string]bool{}
	for _, o := range ashConfig {
		want["CONFIG_"+o] = true
	}
	var b strings.Builder
	for _, line := range strings.Split(string(data), "\n") {
		if name, ok := strings.CutPrefix(line, "# "); ok {
			if name, ok = strings.CutSuffix(name, " is not set"); ok && want[name] {
				line = name + "=y"
				delete(want, name)
			}
		} else if name, ok := strings.CutSuffix(line, "=y"); ok {
			delete(want, name)
			if name == "CONFIG_SH_IS_NONE" {
				line = "# CONFIG_SH_IS_NONE is not set"
			}
		}
		b.WriteString(line + "\n")
	}
	if len(want) > 0 {
		missing := make([]string, 0, len(want))
		for name := range want {
			missing = append(missing, name)
		}
		return fmt.Errorf("busybox's allnoconfig has no options %v (another busybox version?)", missing)
	}
	if err := os.WriteFile(path, []byte(strings.TrimSuffix(b.String(), "\n")), 0o644); err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, "make", "oldconfig")
	cmd.Dir = dir
	cmd.Stdin = strings.NewReader(strings.Repeat("\n", 10000))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("make oldconfig: %w\n%s", err, lastLines(string(out), 20))
	}
	return nil
}

// busyboxSource returns the upstream tarball of Debian's busybox source
// package in dir, downloading the package there with apt-get if dir has
// none. apt-get uses a private copy of the system's package sources with
// "deb" turned into "deb-src", and private lists and caches, so the
// system's apt state is left as it was.
func busyboxSource(ctx context.Context, dir string, log io.Writer) (string, error) {
	if tarball, err := findOrigTarball(dir); err == nil {
		return tarball, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	aptDir, err := os.MkdirTemp(dir, "apt-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(aptDir)
	parts := filepath.Join(aptDir, "sources.list.d")
	for _, d := range []string{parts, filepath.Join(aptDir, "lists", "partial"), filepath.Join(aptDir, "cache", "archives", "partial")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return "", err
		}
	}
	n, err := sourcePackageLists("/etc/apt", aptDir)
	if err != nil {
		return "", err
	}
	if n == 0 {
		return "", errors.New("no Debian package sources in /etc/apt to fetch busybox's source package from")
	}
	aptOpts := []string{
		"-o", "Dir::Etc::SourceList=" + filepath.Join(aptDir, "sources.list"),
		"-o", "Dir::Etc::SourceParts=" + parts,
		"-o", "Dir::State::Lists=" + filepath.Join(aptDir, "lists"),
		"-o", "Dir::Cache=" + filepath.Join(aptDir, "cache"),
		"-o", "APT::Sandbox::User=root",
		"-qq",
	}
	fmt.Fprintf(log, "downloading Debian's busybox source package into %s\n", dir)
	if _, err := runCommand(ctx, dir, nil, nil, "apt-get", append(aptOpts, "update")...); err != nil {
		return "", fmt.Errorf("fetch busybox's source package: %w", err)
	}
	if _, err := runCommand(ctx, dir, nil, nil, "apt-get", append(aptOpts, "source", "--download-only", "busybox")...); err != nil {
		return "", fmt.Errorf("fetch busybox's source package: %w", err)
	}
	return findOrigTarball(dir)
}

// findOrigTarball returns the one busybox_*.orig.tar.* in dir.
func findOrigTarball(dir string) (string, error) {
	m, err := filepath.Glob(filepath.Join(dir, "busybox_*.orig.tar.*"))
	if err != nil {
		return "", err
	}
	if len(m) != 1 {
		return "", fmt.Errorf("%d busybox_*.orig.tar.* in %s, want 1", len(m), dir)
	}
	return m[0], nil
}

// sourcePackageLists copies the package sources under etc (sources.list,
// sources.list.d/*.list and *.sources) into dir as source-package sources
// (one-line "deb" entries become "deb-src", deb822 "Types: deb" becomes
// "Types: deb-src") and returns how many entries it wrote.
func sourcePackageLists(etc, dir string) (int, error) {
	n := 0
	convert := func(src, dst string, deb822 bool) error {
		f, err := os.Open(src)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		defer f.Close()
		var b strings.Builder
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			line := sc.Text()
			switch {
			case !deb822 && strings.HasPrefix(strings.TrimSpace(line), "deb "):
				line = "deb-src " + strings.TrimPrefix(strings.TrimSpace(line), "deb ")
				n++
			case deb822 && strings.HasPrefix(line, "Types:"):
				types := strings.Fields(strings.TrimPrefix(line, "Types:"))
				line = "Types: deb-src"
				if !slices.Contains(types, "deb") {
					line = "Types: " + strings.Join(types, " ")
				} else {
					n++
				}
			}
			b.WriteString(line + "\n")
		}
		if err := sc.Err(); err != nil {
			return err
		}
		return os.WriteFile(dst, []byte(b.String()), 0o644)
	}
	if err := convert(filepath.Join(etc, "sources.list"), filepath.Join(dir, "sources.list"), false); err != nil {
		return 0, err
	}
	if _, err := os.Stat(filepath.Join(dir, "sources.list")); errors.Is(err, os.ErrNotExist) {
		if err := os.WriteFile(filepath.Join(dir, "sources.list"), nil, 0o644); err != nil {
			return 0, err
		}
	}
	entries, err := os.ReadDir(filepath.Join(etc, "sources.list.d"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return 0, err
	}
	for _, e := range entries {
		name := e.Name()
		deb822 := strings.HasSuffix(name, ".sources")
		if !deb822 && !strings.HasSuffix(name, ".list") {
			continue
		}
		if err := convert(filepath.Join(etc, "sources.list.d", name), filepath.Join(dir, "sources.list.d", name), deb822); err != nil {
			return 0, err
		}
	}
	return n, nil
}

// extractTarball unpacks a .tar.bz2 or .tar.gz source tarball into dir,
// dropping its top-level directory.
func extractTarball(path, dir string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	var r io.Reader
	switch {
	case strings.HasSuffix(path, ".bz2"):
		r = bzip2.NewReader(bufio.NewReader(f))
	case strings.HasSuffix(path, ".gz"):
		gz, err := gzip.NewReader(f)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		defer gz.Close()
		r = gz
	default:
		return fmt.Errorf("%s: not a .tar.bz2 or .tar.gz", path)
	}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		_, rel, ok := strings.Cut(h.Name, "/")
		if !ok || rel == "" {
			continue
		}
		target := filepath.Join(dir, filepath.FromSlash(rel))
		if !strings.HasPrefix(target, dir+string(filepath.Separator)) {
			return fmt.Errorf("%s: entry %s leaves the directory", path, h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(target, 0o755)
		case tar.TypeReg:
			err = writeFileFrom(target, tr, os.FileMode(h.Mode)&0o777)
		case tar.TypeSymlink:
			if err = os.MkdirAll(filepath.Dir(target), 0o755); err == nil {
				err = os.Symlink(h.Linkname, target)
			}
		}
		if err != nil {
			return fmt.Errorf("%s: %s: %w", path, h.Name, err)
		}
	}
}

func writeFileFrom(path string, r io.Reader, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, r)
	return errors.Join(err, f.Close())
}
