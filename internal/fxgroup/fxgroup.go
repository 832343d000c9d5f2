// Package fxgroup builds the typed registration helpers of nodekit's value
// groups (status.AsSetter, pods.AsAdmitHandler, podsource.AsSource, ...): a
// helper takes an ordinary fx constructor whose result is the piece an
// embedder wrote (a Setter, an AdmitHandler, a Source) and adds what it
// returns to the right group as the right type, so a piece can never land
// in a group nobody reads.
package fxgroup

import (
	"fmt"
	"reflect"

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
		return fx.Provide(fx.Annotate(func() T { return wrap(zero) }, fx.ResultTags(`group:"`+group+`"`)))
	}
	ctor := reflect.ValueOf(constructor)
	ct := ctor.Type()
	if ct.Kind() != reflect.Func || ct.AssignableTo(want) {
		// A value, not a constructor.
		v, ok := constructor.(V)
		if !ok {
			panic(fmt.Sprintf("fxgroup: %T is neither a %v nor a constructor of one", constructor, want))
		}
		return fx.Provide(fx.Annotate(func() T { return wrap(v) }, fx.ResultTags(`group:"`+group+`"`)))
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
		return []reflect.Value{reflect.ValueOf(wrap(v)), errv}
	})
	return fx.Provide(fx.Annotate(fn.Interface(), fx.ResultTags(`group:"`+group+`"`)))
}
