package manifest

import (
	"bytes"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// corePackage is the import path of the versioned core API types. The
// kubelet hashes a static pod in its internal form (package
// k8s.io/kubernetes/pkg/apis/core, named core), whose types have the same
// names, fields and field order as the versioned ones in v1.37; only the
// package name in the printed type names differs.
const corePackage = "k8s.io/api/core/v1"

// dumpForHash writes v as k8s.io/utils/dump.ForHash prints the kubelet's
// internal form of it: go-spew's "%#v" with methods disabled, no pointer
// addresses or capacities and map keys sorted, with the types of the core
// API package printed as core.<Name> instead of v1.<Name>. The kubelet
// hashes that text to make a static pod's UID; e2e/kubeletparity checks
// the two agree.
func dumpForHash(v any) []byte {
	d := &dumper{}
	d.value(reflect.ValueOf(v), false)
	return d.buf.Bytes()
}

type dumper struct {
	buf bytes.Buffer
}

// typeName is reflect's name of t with the core API package renamed.
func typeName(t reflect.Type) string {
	if t.Name() != "" {
		if t.PkgPath() == corePackage {
			return "core." + t.Name()
		}
		return t.String()
	}
	switch t.Kind() {
	case reflect.Pointer:
		return "*" + typeName(t.Elem())
	case reflect.Slice:
		return "[]" + typeName(t.Elem())
	case reflect.Array:
		return "[" + strconv.Itoa(t.Len()) + "]" + typeName(t.Elem())
	case reflect.Map:
		return "map[" + typeName(t.Key()) + "]" + typeName(t.Elem())
	}
	return t.String()
}

// unpack is go-spew's unpackValue: an interface stands for its value, whose
// type is then printed.
func unpack(v reflect.Value, hideType bool) (reflect.Value, bool) {
	if v.Kind() == reflect.Interface {
		hideType = false
		if !v.IsNil() {
			v = v.Elem()
		}
	}
	return v, hideType
}

// value is go-spew's formatState.format; hideType is its ignoreNextType.
func (d *dumper) value(v reflect.Value, hideType bool) {
	kind := v.Kind()
	if kind == reflect.Invalid {
		d.buf.WriteString("<invalid>")
		return
	}
	if kind == reflect.Pointer {
		d.pointer(v, hideType)
		return
	}
	if !hideType {
		d.buf.WriteString("(" + typeName(v.Type()) + ")")
	}
	switch kind {
	case reflect.Bool:
		d.buf.WriteString(strconv.FormatBool(v.Bool()))
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		d.buf.WriteString(strconv.FormatInt(v.Int(), 10))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		d.buf.WriteString(strconv.FormatUint(v.Uint(), 10))
	case reflect.Float32:
		d.buf.WriteString(strconv.FormatFloat(v.Float(), 'g', -1, 32))
	case reflect.Float64:
		d.buf.WriteString(strconv.FormatFloat(v.Float(), 'g', -1, 64))
	case reflect.String:
		d.buf.WriteString(v.String())
	case reflect.Interface:
		if v.IsNil() {
			d.buf.WriteString("<nil>")
		}
	case reflect.Slice, reflect.Array:
		if kind == reflect.Slice && v.IsNil() {
			d.buf.WriteString("<nil>")
			return
		}
		d.buf.WriteByte('[')
		for i := range v.Len() {
			if i > 0 {
				d.buf.WriteByte(' ')
			}
			d.value(unpack(v.Index(i), true))
		}
		d.buf.WriteByte(']')
	case reflect.Map:
		if v.IsNil() {
			d.buf.WriteString("<nil>")
			return
		}
		d.buf.WriteString("map[")
		keys := v.MapKeys()
		slices.SortStableFunc(keys, compareKeys)
		for i, k := range keys {
			if i > 0 {
				d.buf.WriteByte(' ')
			}
			d.value(unpack(k, true))
			d.buf.WriteByte(':')
			d.value(unpack(v.MapIndex(k), true))
		}
		d.buf.WriteByte(']')
	case reflect.Struct:
		t := v.Type()
		d.buf.WriteByte('{')
		for i := range v.NumField() {
			if i > 0 {
				d.buf.WriteByte(' ')
			}
			d.buf.WriteString(t.Field(i).Name)
			d.buf.WriteByte(':')
			d.value(unpack(v.Field(i), false))
		}
		d.buf.WriteByte('}')
	case reflect.Uintptr:
		d.hexPointer(v.Uint())
	case reflect.UnsafePointer, reflect.Chan, reflect.Func:
		// go-spew prints their address; no pod holds one.
		d.hexPointer(uint64(v.Pointer()))
	}
}

// hexPointer is go-spew's printHexPtr.
func (d *dumper) hexPointer(p uint64) {
	if p == 0 {
		d.buf.WriteString("<nil>")
		return
	}
	d.buf.WriteString("0x" + strconv.FormatUint(p, 16))
}

// pointer is go-spew's formatPtr for a tree without shared pointers (a
// decoded pod has none): the type with one * per indirection, then the
// value pointed to or <nil>.
func (d *dumper) pointer(v reflect.Value, hideType bool) {
	if v.IsNil() && hideType {
		d.buf.WriteString("<nil>")
		return
	}
	indirects, nilFound := 0, false
	ve := v
	for ve.Kind() == reflect.Pointer {
		if ve.IsNil() {
			nilFound = true
			break
		}
		indirects++
		ve = ve.Elem()
		if ve.Kind() == reflect.Interface {
			if ve.IsNil() {
				nilFound = true
				break
			}
			ve = ve.Elem()
		}
	}
	if !hideType {
		d.buf.WriteString("(" + strings.Repeat("*", indirects) + typeName(ve.Type()) + ")")
	} else {
		if nilFound {
			indirects += strings.Count(typeName(ve.Type()), "*")
		}
		d.buf.WriteString("<" + strings.Repeat("*", indirects) + ">")
	}
	if nilFound {
		d.buf.WriteString("<nil>")
		return
	}
	d.value(ve, true)
}

// compareKeys orders map keys as go-spew's SortKeys: by value for strings,
// numbers and booleans.
func compareKeys(a, b reflect.Value) int {
	switch a.Kind() {
	case reflect.String:
		return strings.Compare(a.String(), b.String())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return compare(a.Int(), b.Int())
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return compare(a.Uint(), b.Uint())
	case reflect.Bool:
		return compare(boolInt(a.Bool()), boolInt(b.Bool()))
	}
	return strings.Compare(a.String(), b.String())
}

func compare[T int64 | uint64 | int](a, b T) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
