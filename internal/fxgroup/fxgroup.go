// Package fxgroup builds the typed registration helpers of nodekit's value
// groups (status.AsSetter, pods.AsAdmitHandler, podsource.AsSource, ...): a
// helper takes an ordinary fx constructor whose result is the piece an
// embedder wrote (a Setter, an AdmitHandler, a Source) and adds what it
// returns to the right group as the right type, so a piece can never land
// in a group nobody reads.
package fxgroup

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"

	"go.uber.org/fx"
)

var errorType = reflect.TypeFor[error]()

// Provide returns an fx option that calls constructor (a func with any fx
// parameters, returning a V, or a V and an error; a V value instead of a
// func is supplied as is) and adds wrap of its result to the value group
// named group. A plain nil constructor adds wrap of the zero V (the
// helpers' "remove the default of this name"). It panics when constructor
// has another shape: a programming error, found when the program is built.
func Provide[V, T any](group string, constructor any, wrap func(V) T) fx.Option {
	want := reflect.TypeFor[V]()
	out := reflect.TypeFor[T]()
	if constructor == nil {
		// A plain nil: the zero V, which the helpers' groups read as
		// "remove the default of this name".
		var zero V
		return fx.Provide(fx.Annotated{Group: group, Target: func() T { return wrap(zero) }})
	}
	ctor := reflect.ValueOf(constructor)
	ct := ctor.Type()
	if ct.Kind() != reflect.Func || ct.AssignableTo(want) {
		// A value, not a constructor.
		v, ok := constructor.(V)
		if !ok && ct.AssignableTo(want) {
			// A func literal of a named func type's signature.
			v, ok = ctor.Convert(want).Interface().(V)
		}
		if !ok {
			panic(fmt.Sprintf("fxgroup: %T is neither a %v nor a constructor of one", constructor, want))
		}
		return fx.Provide(fx.Annotated{Group: group, Target: func() T { return wrap(v) }})
	}
	withErr := ct.NumOut() == 2 && ct.Out(1) == errorType
	if ct.NumOut() < 1 || ct.NumOut() > 2 || (ct.NumOut() == 2 && !withErr) || !ct.Out(0).AssignableTo(want) || ct.IsVariadic() {
		panic(fmt.Sprintf("fxgroup: constructor %v must return a %v, or a %v and an error", ct, want, want))
	}
	in := make([]reflect.Type, ct.NumIn())
	for i := range in {
		in[i] = ct.In(i)
	}
	ft := reflect.FuncOf(in, []reflect.Type{out, errorType}, false)
	fn := reflect.MakeFunc(ft, func(args []reflect.Value) []reflect.Value {
		res := ctor.Call(args)
		errv := reflect.Zero(errorType)
		if withErr && !res[1].IsNil() {
			return []reflect.Value{reflect.Zero(out), res[1]}
		}
		var v V
		if r := res[0]; r.IsValid() && !(r.Kind() == reflect.Interface && r.IsNil()) {
			v = r.Convert(want).Interface().(V)
		}
		// Through a pointer: a nil interface T has no reflect.Value of
		// its own.
		t := wrap(v)
		return []reflect.Value{reflect.ValueOf(&t).Elem(), errv}
	})
	return fx.Provide(fx.Annotated{Group: group, Target: fn.Interface()})
}

// groupNode matches a value group in fx's DOT graph: "[type=T group=G]".
var groupNode = regexp.MustCompile(`"\[type=(\S+) group=([^\]"]+)\]"`)

// Check returns an fx option that fails the application's start when one
// of groups (by name, with the type it holds) also has values of another
// type: a value provided with the group's tag but a type nobody reads
// there (a constructor returning a concrete type, say) would otherwise be
// dropped without a word. The error names the group, both types and the
// typed helper to use.
func Check(groups map[string]reflect.Type) fx.Option {
	return fx.Invoke(func(g fx.DotGraph) error {
		var errs []error
		seen := map[string]bool{}
		for _, m := range groupNode.FindAllStringSubmatch(string(g), -1) {
			typ, group := m[1], m[2]
			want, ok := groups[group]
			if !ok || typ == want.String() || seen[typ+" "+group] {
				continue
			}
			seen[typ+" "+group] = true
			errs = append(errs, fmt.Errorf("a %s was provided to the value group %q, which holds %v: nothing reads it there; add it with the group's As* helper", typ, group, want))
		}
		return errors.Join(errs...)
	})
}
