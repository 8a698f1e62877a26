package cli

import (
	"reflect"

	"github.com/iosched/iosched/internal/statefile"
)

// printableState is a copy of st with every string in it (map keys too)
// made printable: the state file holds what the daemon read from sysfs (a
// scheduler name, a model, a disk's name), from the policy and from the
// kernel's errors, and anyone who can write the runtime directory can put
// anything in it. Escaping the whole state, rather than each field where
// it is printed, leaves no field a new line of status forgets.
func printableState(st *statefile.State) *statefile.State {
	return printableCopy(reflect.ValueOf(st)).Interface().(*statefile.State)
}

// printableCopy copies v with printable applied to every string in it.
// Unexported fields (time.Time's) are copied as they are.
func printableCopy(v reflect.Value) reflect.Value {
	switch v.Kind() {
	case reflect.String:
		c := reflect.New(v.Type()).Elem()
		c.SetString(printable(v.String()))
		return c
	case reflect.Pointer:
		if v.IsNil() {
			return v
		}
		c := reflect.New(v.Type().Elem())
		c.Elem().Set(printableCopy(v.Elem()))
		return c
	case reflect.Struct:
		c := reflect.New(v.Type()).Elem()
		c.Set(v)
		for i := range v.NumField() {
			if c.Field(i).CanSet() {
				c.Field(i).Set(printableCopy(v.Field(i)))
			}
		}
		return c
	case reflect.Slice:
		if v.IsNil() {
			return v
		}
		c := reflect.MakeSlice(v.Type(), v.Len(), v.Len())
		for i := range v.Len() {
			c.Index(i).Set(printableCopy(v.Index(i)))
		}
		return c
	case reflect.Map:
		if v.IsNil() {
			return v
		}
		c := reflect.MakeMapWithSize(v.Type(), v.Len())
		for it := v.MapRange(); it.Next(); {
			c.SetMapIndex(printableCopy(it.Key()), printableCopy(it.Value()))
		}
		return c
	case reflect.Interface:
		if v.IsNil() {
			return v
		}
		c := reflect.New(v.Type()).Elem()
		c.Set(printableCopy(v.Elem()))
		return c
	}
	return v
}
