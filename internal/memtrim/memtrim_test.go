package memtrim

import (
	"bufio"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/nodekit/nodekit/internal/testenv"
)

func TestReadOnlyMappings(t *testing.T) {
	const maps = `00400000-0212e000 r-xp 00000000 fe:00 10707487                           /usr/bin/node agent
0212e000-0451a000 r--p 01d2e000 fe:00 10707487                           /usr/bin/node agent
0451a000-045c7000 rw-p 0411a000 fe:00 10707487                           /usr/bin/node agent
045c7000-04600000 rw-p 00000000 00:00 0
7f57eed96000-7f57eeeec000 r-xp 00026000 fe:00 326269                     /usr/lib/x86_64-linux-gnu/libc.so.6
7f0000000000-7f0000001000 r--s 00000000 fe:00 10707487                   /usr/bin/node agent
7f0000002000-7f0000003000 r--p 00000000 fe:00 10707488                   /usr/bin/node agent (deleted)
7f0000004000-7f0000005000 r--p 00000000 fe:00 10707489                   /usr/bin/node agent2
`
	got, err := readOnlyMappings(strings.NewReader(maps), "/usr/bin/node agent")
	if err != nil {
		t.Fatal(err)
	}
	want := []mapping{{0x400000, 0x212e000}, {0x212e000, 0x451a000}, {0x7f0000002000, 0x7f0000003000}}
	if !slices.Equal(got, want) {
		t.Errorf("readOnlyMappings = %x, want %x (the writable, shared, anonymous and other files' mappings left out)", got, want)
	}
	if _, err := readOnlyMappings(strings.NewReader("zz-00 r--p 0 fe:00 1 /x\n"), "/x"); err == nil {
		t.Error("malformed address: no error")
	}
}

// rssFile is RssFile of /proc/self/status in kB.
func rssFile(t *testing.T) uint64 {
	t.Helper()
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		testenv.Unavailable(t, "no /proc: %v", err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "RssFile:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb
		}
	}
	testenv.Unavailable(t, "the kernel reports no RssFile in /proc/self/status")
	return 0
}

func TestReleaseUnmapsTheExecutable(t *testing.T) {
	before := rssFile(t)
	cachedBefore := cachedPages(t)
	res, err := Release()
	if err != nil {
		t.Fatal(err)
	}
	after := rssFile(t)
	if res.Mappings < 1 || res.Bytes == 0 {
		t.Errorf("Release = %+v, want the executable's read-only mappings", res)
	}
	// The test binary's pages in use come back at once (this code, the
	// runtime's), but not all of them.
	if after >= before {
		t.Errorf("RssFile %d kB before Release, %d kB after: nothing released", before, after)
	}

	// The mappings read one page per fault from now on, and the page cache
	// kept only the pages this process maps.
	if flags := readOnlyVMFlags(t); len(flags) == 0 {
		t.Error("no read-only mapping of the executable in /proc/self/smaps")
	} else {
		for _, f := range flags {
			if !slices.Contains(f, "rr") {
				t.Errorf("a read-only mapping of the executable has VmFlags %v after Release, want rr (MADV_RANDOM)", f)
			}
		}
	}
	cachedAfter := cachedPages(t)
	t.Logf("RssFile %d kB before Release, %d kB after; pages cached %d before, %d after", before, after, cachedBefore, cachedAfter)
	if cachedAfter >= cachedBefore {
		t.Errorf("%d pages of the executable in the page cache before Release, %d after: none dropped", cachedBefore, cachedAfter)
	}
}

// cachedPages is how many pages of the test binary the page cache holds
// (mincore on a mapping of its own, which faults nothing in).
func cachedPages(t *testing.T) int {
	t.Helper()
	f, err := os.Open("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	vec := make([]byte, (len(m)+os.Getpagesize()-1)/os.Getpagesize())
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		t.Fatal("mincore:", errno)
	}
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n
}

// readOnlyVMFlags returns the VmFlags of each private read-only mapping of
// the test binary in /proc/self/smaps.
func readOnlyVMFlags(t *testing.T) [][]string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out [][]string
	inExe := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		switch {
		case len(fields) >= 5 && strings.Contains(fields[0], "-") && !strings.HasSuffix(fields[0], ":"):
			perms := fields[1]
			inExe = len(fields) >= 6 && strings.Join(fields[5:], " ") == exe && perms[1] != 'w' && perms[3] == 'p'
		case inExe && len(fields) > 0 && fields[0] == "VmFlags:":
			out = append(out, fields[1:])
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestExecutableSize: the test binary's read-only mappings are its text and
// read-only data, more than nothing and no larger than its file.
func TestExecutableSize(t *testing.T) {
	if _, err := os.Stat("/proc/self/maps"); err != nil {
		testenv.Unavailable(t, "no /proc: %v", err)
	}
	size, err := ExecutableSize()
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(exe)
	if err != nil {
		t.Fatal(err)
	}
	if size < 1<<20 || size > uint64(fi.Size()) {
		t.Errorf("ExecutableSize = %d, want at least 1 MiB and at most the file's %d bytes", size, fi.Size())
	}
}
