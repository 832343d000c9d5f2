package pods

import (
	"reflect"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
)

// TestPodSpecFieldTable: every field of the pod spec types is in exactly
// one of fieldsActedOn, fieldsRefused and fieldsNotForTheNode, and every
// entry names a field: a field a new Kubernetes release adds fails here
// until someone decides what the node does with it.
func TestPodSpecFieldTable(t *testing.T) {
	fields := map[string]bool{}
	walk := func(prefix string, typ reflect.Type) []string {
		var names []string
		for i := range typ.NumField() {
			f := typ.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "" {
				continue // embedded (EphemeralContainer's common part)
			}
			names = append(names, name)
			fields[prefix+"."+name] = true
		}
		return names
	}
	walk("PodSpec", reflect.TypeFor[v1.PodSpec]())
	container := walk("Container", reflect.TypeFor[v1.Container]())
	walk("EphemeralContainer", reflect.TypeFor[v1.EphemeralContainer]())
	walk("SecurityContext", reflect.TypeFor[v1.SecurityContext]())
	walk("PodSecurityContext", reflect.TypeFor[v1.PodSecurityContext]())
	// An ephemeral container's common part is a container's fields, so
	// the Container entries cover it; it must not drift from Container.
	var common []string
	typ := reflect.TypeFor[v1.EphemeralContainerCommon]()
	for i := range typ.NumField() {
		name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
		common = append(common, name)
	}
	if !reflect.DeepEqual(common, container) {
		t.Errorf("EphemeralContainerCommon fields %v differ from Container's %v: give them entries of their own", common, container)
	}

	tables := map[string]map[string]string{"fieldsActedOn": fieldsActedOn, "fieldsRefused": fieldsRefused, "fieldsNotForTheNode": fieldsNotForTheNode}
	for field := range fields {
		var in []string
		for name, table := range tables {
			if _, ok := table[field]; ok {
				in = append(in, name)
			}
		}
		switch len(in) {
		case 0:
			t.Errorf("%s is in no table of pods/fields.go: act on it, refuse pods that set it (with the kubelet's reason), or say who else does", field)
		case 1:
		default:
			t.Errorf("%s is in %v: one table only", field, in)
		}
	}
	for name, table := range tables {
		for field, where := range table {
			if !fields[field] {
				t.Errorf("%s lists %s, which is no field", name, field)
			}
			if strings.TrimSpace(where) == "" {
				t.Errorf("%s: %s says nothing about where it is handled", name, field)
			}
		}
	}
}
