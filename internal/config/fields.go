package config

import (
	"reflect"
	"strings"
)

// Key is one TOML key of a configuration struct: the field it is
// stored in, found by Index (through an embedded struct, whose fields
// are keys of the table that embeds it, as go-toml reads them too).
type Key struct {
	Name  string // the key as written: the field's toml tag, else its name
	Index []int  // for reflect.Value.FieldByIndex
	Field reflect.StructField
}

// Keys lists the keys of the struct type t in the order of its fields.
// Unexported fields and fields tagged toml:"-" are not keys; an embedded
// struct without a toml name lends its keys to t.
func Keys(t reflect.Type) []Key {
	var out []Key
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
		if name == "-" || !f.IsExported() && !f.Anonymous {
			continue
		}
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			for _, k := range Keys(f.Type) {
				k.Index = append([]int{i}, k.Index...)
				out = append(out, k)
			}
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out = append(out, Key{Name: name, Index: []int{i}, Field: f})
	}
	return out
}

// Diff calls changed with the key path of every setting that differs
// between a and b, two values of one configuration struct type, in the
// order of the fields. It descends into tables and compares everything
// else whole (a list, an array of tables, a pointer by what it points
// to). skip, when it reports true for a key, leaves the setting (a
// table: everything under it) out. prefix is a's own key ("" for the
// whole configuration).
func Diff(a, b reflect.Value, prefix string, skip func(key string) bool, changed func(key string, a, b reflect.Value)) {
	for _, k := range Keys(a.Type()) {
		key := k.Name
		if prefix != "" {
			key = prefix + "." + k.Name
		}
		if skip != nil && skip(key) {
			continue
		}
		av, bv := a.FieldByIndex(k.Index), b.FieldByIndex(k.Index)
		if isTable(k.Field.Type) {
			Diff(av, bv, key, skip, changed)
			continue
		}
		if !reflect.DeepEqual(av.Interface(), bv.Interface()) {
			changed(key, av, bv)
		}
	}
}

// isTable reports whether a field of type t is written as a TOML table:
// a struct that does not read itself from a string.
func isTable(t reflect.Type) bool {
	return t.Kind() == reflect.Struct && !reflect.PointerTo(t).Implements(textUnmarshaler)
}
