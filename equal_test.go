package confighash

import (
	"errors"
	"reflect"
	"regexp"
	"testing"
	"unsafe"
)

// differ changes the field, and reports false when it does not know how to change a
// field of that type: then the test fails, and this function learns it.
func differ(f reflect.Value) bool {
	f = reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem() // unexported fields too
	switch f.Type() {
	case reflect.TypeFor[[]NamePattern]():
		f.Set(reflect.ValueOf([]NamePattern{{Kind: ConfigMap, Expr: regexp.MustCompile("x")}}))
		return true
	case reflect.TypeFor[error]():
		f.Set(reflect.ValueOf(errors.New("x")))
		return true
	}
	switch f.Kind() {
	case reflect.Int, reflect.Int64:
		f.SetInt(f.Int() + 1)
	case reflect.Uint8:
		f.SetUint(f.Uint() ^ 1)
	case reflect.Bool:
		f.SetBool(!f.Bool())
	case reflect.String:
		f.SetString(f.String() + "x")
	case reflect.Map:
		m := reflect.MakeMap(f.Type())
		m.SetMapIndex(reflect.New(f.Type().Key()).Elem(), reflect.New(f.Type().Elem()).Elem())
		f.Set(m)
	case reflect.Slice:
		f.Set(reflect.Append(f, reflect.New(f.Type().Elem()).Elem()))
	case reflect.Struct:
		return differ(f.Field(0))
	default:
		return false
	}
	return true
}

// testEqualComparesEveryField fails when a field of T can change without equal
// noticing: a field added and not compared.
func testEqualComparesEveryField[T any](t *testing.T, equal func(a, b T) bool, base T) {
	t.Helper()
	if !equal(base, base) {
		t.Fatalf("%T differs from itself", base)
	}
	typ := reflect.TypeFor[T]()
	for i := range typ.NumField() {
		changed := base
		if !differ(reflect.ValueOf(&changed).Elem().Field(i)) {
			t.Fatalf("%s.%s: the test cannot change a %s; teach differ", typ.Name(), typ.Field(i).Name, typ.Field(i).Type)
		}
		if equal(base, changed) || equal(changed, base) {
			t.Errorf("%s.Equal ignores %s", typ.Name(), typ.Field(i).Name)
		}
	}
}

func TestEqualComparesEveryField(t *testing.T) {
	testEqualComparesEveryField(t, Source.Equal, Source{})
	testEqualComparesEveryField(t, Reference.Equal, Reference{})
	testEqualComparesEveryField(t, Policy.Equal, Policy{})
	testEqualComparesEveryField(t, State.Equal, State{})
	testEqualComparesEveryField(t, Pacing.Equal, Pacing{})
}
