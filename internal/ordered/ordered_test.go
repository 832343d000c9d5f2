package ordered

import (
	"slices"
	"strings"
	"testing"
)

func names(es []Entry[*int]) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.Name)
	}
	return out
}

func isNil(p *int) bool { return p == nil }

func TestResolve(t *testing.T) {
	one := new(int)
	known := func(n string) bool { return n == "Optional" }
	in := []Entry[*int]{
		{Name: "Ready", Order: 100, Value: one, Default: true},
		{Name: "Address", Order: 10, Value: one, Default: true},
		{Name: "Images", Order: 50, Value: one, Default: true},
		{Name: "Mine", Order: 50, Value: one},
		{Name: "Images", Value: nil},             // removes the default
		{Name: "Address", Order: 20, Value: one}, // replaces it, at its own order
		{Name: "Optional", Value: nil},           // absent in this configuration: no-op
	}
	out, err := Resolve("thing", in, isNil, known)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := names(out), []string{"Address", "Mine", "Ready"}; !slices.Equal(got, want) {
		t.Errorf("order = %v, want %v", got, want)
	}
	if out[0].Default || out[0].Order != 20 {
		t.Errorf("Address was not replaced: %+v", out[0])
	}
}

func TestResolveErrors(t *testing.T) {
	one := new(int)
	for name, in := range map[string][]Entry[*int]{
		"no name":   {{Value: one}},
		"duplicate": {{Name: "a", Value: one}, {Name: "a", Value: one}},
		"unknown":   {{Name: "Typo", Value: nil}},
	} {
		if _, err := Resolve("thing", in, isNil, func(string) bool { return false }); err == nil || !strings.Contains(err.Error(), "thing") {
			t.Errorf("%s: err = %v", name, err)
		}
	}
}
