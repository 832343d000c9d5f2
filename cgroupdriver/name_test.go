package cgroupdriver

import (
	"strings"
	"testing"
)

func TestNameConversions(t *testing.T) {
	tests := []struct {
		name     Name
		cgroupfs string
		systemd  string
		unit     string
	}{
		{rootName, "/", "/", "-.slice"},
		{Name{"kubepods"}, "/kubepods", "/kubepods.slice", "kubepods.slice"},
		{Name{"kubepods", "burstable"}, "/kubepods/burstable", "/kubepods.slice/kubepods-burstable.slice", "kubepods-burstable.slice"},
		{
			Name{"kubepods", "burstable", "pod1234-abcd-5678-efgh"},
			"/kubepods/burstable/pod1234-abcd-5678-efgh",
			"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234_abcd_5678_efgh.slice",
			"kubepods-burstable-pod1234_abcd_5678_efgh.slice",
		},
		{
			Name{"kubepods", "pod7e0a6f4c-3d2b-4a1e-9c8f-0123456789ab"},
			"/kubepods/pod7e0a6f4c-3d2b-4a1e-9c8f-0123456789ab",
			"/kubepods.slice/kubepods-pod7e0a6f4c_3d2b_4a1e_9c8f_0123456789ab.slice",
			"kubepods-pod7e0a6f4c_3d2b_4a1e_9c8f_0123456789ab.slice",
		},
		{
			Name{"my-root", "kubepods", "besteffort", "podx"},
			"/my-root/kubepods/besteffort/podx",
			"/my_root.slice/my_root-kubepods.slice/my_root-kubepods-besteffort.slice/my_root-kubepods-besteffort-podx.slice",
			"my_root-kubepods-besteffort-podx.slice",
		},
	}
	for _, tc := range tests {
		t.Run(tc.cgroupfs, func(t *testing.T) {
			if err := tc.name.Validate(); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			if got := tc.name.ToCgroupfs(); got != tc.cgroupfs {
				t.Errorf("ToCgroupfs = %q, want %q", got, tc.cgroupfs)
			}
			if got := tc.name.ToSystemd(); got != tc.systemd {
				t.Errorf("ToSystemd = %q, want %q", got, tc.systemd)
			}
			if got := tc.name.SystemdUnit(); got != tc.unit {
				t.Errorf("SystemdUnit = %q, want %q", got, tc.unit)
			}
			if got := ParseCgroupfs(tc.cgroupfs); !got.Equal(tc.name) {
				t.Errorf("ParseCgroupfs(%q) = %q, want %q", tc.cgroupfs, got, tc.name)
			}
			for _, in := range []string{tc.systemd, tc.unit, strings.TrimPrefix(tc.systemd, "/")} {
				got, err := ParseSystemd(in)
				if err != nil {
					t.Errorf("ParseSystemd(%q): %v", in, err)
				} else if !got.Equal(tc.name) {
					t.Errorf("ParseSystemd(%q) = %q, want %q", in, got, tc.name)
				}
			}
		})
	}
}

func TestParseCgroupfsTolerance(t *testing.T) {
	for in, want := range map[string]Name{
		"":                        rootName,
		"/":                       rootName,
		"kubepods/burstable":      {"kubepods", "burstable"},
		"//kubepods//besteffort/": {"kubepods", "besteffort"},
	} {
		if got := ParseCgroupfs(in); !got.Equal(want) {
			t.Errorf("ParseCgroupfs(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParseSystemdErrors(t *testing.T) {
	for _, in := range []string{
		"kubepods",                  // not a slice
		".slice",                    // empty name
		"kubepods-.slice",           // empty component
		"-kubepods.slice",           // empty component
		"kubepods--burstable.slice", // empty component
		"/kubepods.slice/kubepods-burstable.scope", // a scope, not a slice
		"/foo.slice/kubepods-burstable.slice",      // path is not the expansion
		"/kubepods-burstable.slice",                // path is not the expansion
		"/kubepods.slice/-.slice",                  // root below a parent
		"..slice",                                  // component "."
	} {
		if n, err := ParseSystemd(in); err == nil {
			t.Errorf("ParseSystemd(%q) = %q, want an error", in, n)
		}
	}
}

func TestNameValidate(t *testing.T) {
	for _, n := range []Name{
		{""}, {"a", ""}, {"."}, {"a", ".."}, {"a/b"}, {"a_b"}, {"a\x00b"},
	} {
		if err := n.Validate(); err == nil {
			t.Errorf("Validate(%q) = nil, want an error", []string(n))
		}
		if _, err := newName(rootName, n...); err == nil {
			t.Errorf("NewName(%q) succeeded, want an error", []string(n))
		}
	}
	parent := Name{"kubepods"}
	child, err := newName(parent, "burstable", "pod-1")
	if err != nil {
		t.Fatal(err)
	}
	if !child.Equal(Name{"kubepods", "burstable", "pod-1"}) || !child.Parent().Parent().Equal(parent) {
		t.Errorf("NewName = %q", child)
	}
	child[0] = "changed"
	if parent[0] != "kubepods" {
		t.Errorf("NewName shares its parent's storage")
	}
	if !rootName.Parent().Equal(rootName) {
		t.Errorf("the root's parent is not the root")
	}
}

// FuzzSystemdRoundTrip checks ParseSystemd(ToSystemd(x)) == x, and the same
// for the bare unit name and the cgroupfs form, for every valid Name. The
// input is the Name's components joined with "/".
func FuzzSystemdRoundTrip(f *testing.F) {
	for _, s := range []string{
		"kubepods",
		"kubepods/burstable/pod1234-abcd-5678-efgh",
		"kubepods/pod7e0a6f4c-3d2b-4a1e-9c8f-0123456789ab",
		"a-/-b/--/x.slice/.slice",
		"nodekit-test-1/kubepods/besteffort/pod-",
		"ü-ñ/\t/ /\\",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n := Name(strings.Split(s, "/"))
		if n.Validate() != nil {
			return
		}
		got, err := ParseSystemd(n.ToSystemd())
		if err != nil {
			t.Fatalf("ParseSystemd(ToSystemd(%q) = %q): %v", []string(n), n.ToSystemd(), err)
		}
		if !got.Equal(n) {
			t.Fatalf("ParseSystemd(ToSystemd(%q)) = %q", []string(n), []string(got))
		}
		got, err = ParseSystemd(n.SystemdUnit())
		if err != nil || !got.Equal(n) {
			t.Fatalf("ParseSystemd(SystemdUnit(%q)) = %q, %v", []string(n), []string(got), err)
		}
		if got := ParseCgroupfs(n.ToCgroupfs()); !got.Equal(n) {
			t.Fatalf("ParseCgroupfs(ToCgroupfs(%q)) = %q", []string(n), []string(got))
		}
	})
}

// FuzzParseSystemd checks that ParseSystemd never panics and that whatever
// it accepts converts back to the canonical form of its input.
func FuzzParseSystemd(f *testing.F) {
	for _, s := range []string{
		"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234_abcd.slice",
		"kubepods-besteffort.slice", "-.slice", "/", "a--b.slice", "/a.slice/a-b.scope",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseSystemd(s)
		if err != nil {
			return
		}
		if err := n.Validate(); err != nil {
			t.Fatalf("ParseSystemd(%q) = invalid %q: %v", s, []string(n), err)
		}
		want := "/" + strings.TrimPrefix(s, "/")
		if !strings.Contains(s, "/") || s == "/" {
			want = n.ToSystemd() // a bare unit name: any expansion is fine
			if s != "" && s != "/" && s != systemdRootSlice && n.SystemdUnit() != s {
				t.Fatalf("ParseSystemd(%q) = %q whose unit is %q", s, []string(n), n.SystemdUnit())
			}
		}
		if n.ToSystemd() != want {
			t.Fatalf("ParseSystemd(%q) = %q which converts back to %q", s, []string(n), n.ToSystemd())
		}
	})
}
