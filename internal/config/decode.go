package config

import (
	"encoding"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pelletier/go-toml/v2"
)

// The configuration is decoded in two steps, so that one run of sluice
// check reports every mistake: the TOML document is first parsed into
// generic values (a syntax error stops there), then walked against the
// Config struct, field by field by their toml tags. A key that is not a
// field, or a value of the wrong type, is reported and left out; every
// other value is stored on top of the defaults. Validate then runs on the
// result, so the type errors and the value errors come out together.

var textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()

// decoder walks a generic TOML document against a struct.
type decoder struct {
	c    *Config // for errAt: file name and key lines
	errs []error
}

func (d *decoder) add(path, format string, args ...any) {
	d.errs = append(d.errs, d.c.errAt(path, format, args...))
}

// table stores the keys of m in the struct v, in the order of their lines.
func (d *decoder) table(path string, m map[string]any, v reflect.Value) {
	fields := tomlFields(v.Type())
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int {
		if la, lb := d.c.lines[joinKey(path, a)], d.c.lines[joinKey(path, b)]; la != lb {
			return la - lb
		}
		return strings.Compare(a, b)
	})
	for _, k := range keys {
		p := joinKey(path, k)
		i, ok := fields[k]
		if !ok {
			d.unknown(p, k, fields)
			continue
		}
		d.value(p, m[k], v.FieldByIndex(i))
	}
}

// unknown reports a key the struct has no field for, with the nearest
// known key when one is close.
func (d *decoder) unknown(path, key string, fields map[string][]int) {
	names := make([]string, 0, len(fields))
	for n := range fields {
		names = append(names, n)
	}
	if s := nearest(key, names); s != "" {
		d.add(path, "unknown key; did you mean %s?", s)
		return
	}
	d.add(path, "unknown key")
}

// value stores x in v, or reports why it does not fit. It reports whether
// it stored it.
func (d *decoder) value(path string, x any, v reflect.Value) bool {
	t := v.Type()
	if t.Kind() == reflect.Pointer {
		nv := reflect.New(t.Elem())
		if !d.value(path, x, nv.Elem()) {
			return false
		}
		v.Set(nv)
		return true
	}
	if reflect.PointerTo(t).Implements(textUnmarshaler) {
		s, ok := x.(string)
		if !ok {
			d.mismatch(path, t, x)
			return false
		}
		nv := reflect.New(t)
		if err := nv.Interface().(encoding.TextUnmarshaler).UnmarshalText([]byte(s)); err != nil {
			d.add(path, "%v", err)
			return false
		}
		v.Set(nv.Elem())
		return true
	}
	switch t.Kind() {
	case reflect.String:
		s, ok := x.(string)
		if !ok {
			break
		}
		v.SetString(s)
		return true
	case reflect.Bool:
		b, ok := x.(bool)
		if !ok {
			break
		}
		v.SetBool(b)
		return true
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, ok := x.(int64)
		if !ok {
			break
		}
		if v.OverflowInt(n) {
			d.add(path, "%d is out of range", n)
			return false
		}
		v.SetInt(n)
		return true
	case reflect.Slice:
		arr, ok := x.([]any)
		if !ok {
			break
		}
		return d.array(path, arr, v)
	case reflect.Struct:
		m, ok := x.(map[string]any)
		if !ok {
			break
		}
		d.table(path, m, v)
		return true
	default:
		d.add(path, "internal error: no decoder for %s", t)
		return false
	}
	d.mismatch(path, t, x)
	return false
}

// array stores in v a new slice of the elements of arr that fit, leaving
// out (and reporting) those that do not; a table element is kept even when
// one of its keys does not fit (that key is reported and keeps its zero
// value), so that the rest of the table is still checked.
func (d *decoder) array(path string, arr []any, v reflect.Value) bool {
	s := reflect.MakeSlice(v.Type(), 0, len(arr))
	for i, x := range arr {
		e := reflect.New(v.Type().Elem()).Elem()
		if d.value(path+"["+strconv.Itoa(i+1)+"]", x, e) {
			s = reflect.Append(s, e)
		}
	}
	v.Set(s)
	return true
}

func (d *decoder) mismatch(path string, t reflect.Type, got any) {
	msg := fmt.Sprintf("expected %s, got %s", want(t), describe(got))
	if h := hint(t, got); h != "" {
		msg += " (write " + h + ")"
	}
	d.add(path, "%s", msg)
}

// hint is how to write the value the administrator probably meant, or "".
func hint(t reflect.Type, got any) string {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch v := got.(type) {
	case int64:
		if t == reflect.TypeFor[Duration]() && v >= 0 {
			return strconv.Quote(strconv.FormatInt(v, 10) + "s")
		}
		if t.Kind() == reflect.String {
			return strconv.Quote(strconv.FormatInt(v, 10))
		}
	case string:
		if len(v) > 40 {
			return ""
		}
		switch {
		case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.String:
			return "[" + strconv.Quote(v) + "]"
		case t.Kind() >= reflect.Int && t.Kind() <= reflect.Int64:
			if _, err := strconv.ParseInt(v, 10, 64); err == nil {
				return v + ", without quotes"
			}
		case t.Kind() == reflect.Bool:
			switch strings.ToLower(v) {
			case "true", "yes", "on", "1":
				return "true, without quotes"
			case "false", "no", "off", "0":
				return "false, without quotes"
			}
		}
	}
	return ""
}

// want names what a Go type takes in TOML.
func want(t reflect.Type) string {
	if t == reflect.TypeFor[Duration]() {
		return `a duration string such as "60s" or "10m"`
	}
	switch t.Kind() {
	case reflect.Pointer:
		return want(t.Elem())
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean (true or false)"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Slice:
		if e := t.Elem(); e.Kind() == reflect.Struct && !reflect.PointerTo(e).Implements(textUnmarshaler) {
			return "an array of tables ([[...]])"
		}
		return "an array of " + strings.TrimPrefix(strings.TrimPrefix(want(t.Elem()), "a "), "an ") + "s"
	case reflect.Struct:
		return "a table"
	}
	return t.String()
}

// describe names a decoded TOML value for a message.
func describe(x any) string {
	switch v := x.(type) {
	case string:
		if len(v) > 40 {
			v = v[:40] + "..."
		}
		return "the string " + strconv.Quote(v)
	case int64:
		return "the integer " + strconv.FormatInt(v, 10)
	case float64:
		return "the float " + strconv.FormatFloat(v, 'g', -1, 64)
	case bool:
		return "the boolean " + strconv.FormatBool(v)
	case []any:
		return "an array"
	case map[string]any:
		return "a table"
	case time.Time, toml.LocalDate, toml.LocalTime, toml.LocalDateTime:
		return "a date or time"
	}
	return fmt.Sprintf("a %T", x)
}

// tomlFields maps the toml names of a struct's fields to their index.
func tomlFields(t reflect.Type) map[string][]int {
	out := map[string][]int{}
	for _, k := range Keys(t) {
		out[k.Name] = k.Index
	}
	return out
}

func joinKey(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// nearest returns the name closest to key by edit distance (a swap of two
// neighbouring letters counts as one edit), if it is close enough to be
// a likely typo; else "".
func nearest(key string, names []string) string {
	best, bestD := "", -1
	slices.Sort(names)
	for _, n := range names {
		d := editDistance(strings.ToLower(key), n)
		if bestD < 0 || d < bestD {
			best, bestD = n, d
		}
	}
	limit := 2
	if len(key) <= 4 {
		limit = 1
	}
	if bestD < 0 || bestD > limit {
		return ""
	}
	return best
}

// editDistance is the optimal string alignment distance: insertions,
// deletions, substitutions and transpositions of neighbours each cost one.
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return max(len(a), len(b))
	}
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
