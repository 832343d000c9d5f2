package fxgroup

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"go.uber.org/fx"
)

type handler interface{ Name() string }

type named string

func (n named) Name() string { return string(n) }

type entry struct {
	label string
	h     handler
}

func collect(t *testing.T, opts ...fx.Option) ([]entry, error) {
	t.Helper()
	var got []entry
	app := fx.New(append(opts,
		fx.NopLogger,
		fx.Supply("dep"),
		fx.Invoke(fx.Annotate(func(es []entry) { got = es }, fx.ParamTags(`group:"things"`))),
	)...)
	return got, app.Err()
}

func wrapAs(label string) func(handler) entry {
	return func(h handler) entry { return entry{label: label, h: h} }
}

func TestProvide(t *testing.T) {
	got, err := collect(t,
		Provide("things", func(s string) named { return named("from-" + s) }, wrapAs("ctor")),
		Provide("things", func() (handler, error) { return named("iface"), nil }, wrapAs("err")),
		Provide("things", named("value"), wrapAs("value")),
	)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]string{}
	for _, e := range got {
		names[e.label] = e.h.Name()
	}
	if names["ctor"] != "from-dep" || names["err"] != "iface" || names["value"] != "value" || len(got) != 3 {
		t.Errorf("group = %v", names)
	}
}

func TestProvideError(t *testing.T) {
	_, err := collect(t, Provide("things", func() (named, error) { return "", errors.New("boom") }, wrapAs("x")))
	if err == nil || !strings.Contains(err.Error(), "boom") {
		t.Errorf("err = %v", err)
	}
}

func TestProvideRejectsWrongShapes(t *testing.T) {
	for name, ctor := range map[string]any{
		"wrong result":  func() int { return 1 },
		"not a value":   42,
		"three results": func() (named, error, error) { return "", nil, nil },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			Provide("things", ctor, wrapAs("x"))
		}()
	}
}

// TestProvideNil: a plain nil (the helpers' "remove the default of this
// name") adds the zero value instead of panicking.
func TestProvideNil(t *testing.T) {
	got, err := collect(t, Provide("things", nil, wrapAs("removal")))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].label != "removal" || got[0].h != nil {
		t.Errorf("group = %+v, want one entry with a nil handler", got)
	}
}

// TestProvideNilInterfaceResult: a constructor that returns a nil value of
// an interface group type (a source not configured) adds nil, without the
// reflection panicking.
func TestProvideNilInterfaceResult(t *testing.T) {
	var got []handler
	app := fx.New(fx.NopLogger,
		Provide("handlers", func() (handler, error) { return nil, nil }, func(h handler) handler { return h }),
		fx.Invoke(fx.Annotate(func(hs []handler) { got = hs }, fx.ParamTags(`group:"handlers"`))),
	)
	if err := app.Err(); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] != nil {
		t.Errorf("group = %v, want one nil", got)
	}
}

// TestCheckRefusesAWronglyTypedGroupValue: a value of another type than
// the group holds (a constructor returning a concrete type, annotated by
// hand) fails the start, naming the group and both types; the right type
// passes.
func TestCheckRefusesAWronglyTypedGroupValue(t *testing.T) {
	groups := map[string]reflect.Type{"things": reflect.TypeFor[entry]()}
	app := fx.New(fx.NopLogger, Check(groups),
		Provide("things", named("ok"), wrapAs("ok")),
		fx.Provide(fx.Annotate(func() named { return "concrete" }, fx.ResultTags(`group:"things"`))))
	err := app.Err()
	if err == nil || !strings.Contains(err.Error(), `fxgroup.named was provided to the value group "things"`) {
		t.Fatalf("start with a wrongly typed group value: %v", err)
	}
	if app := fx.New(fx.NopLogger, Check(groups), Provide("things", named("ok"), wrapAs("ok"))); app.Err() != nil {
		t.Errorf("start with the group's own type: %v", app.Err())
	}
}
