package app

import (
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"testing"

	"sluice/internal/config"
	"sluice/internal/testutil/logbuf"
)

// settingKeys lists every setting of config.Config: the key of each
// field that is not a table, with whether it (or a table above it) is
// listed reloadable; and every table's key.
func settingKeys(t reflect.Type, prefix string, visit func(key string, index []int, leaf bool)) {
	for _, k := range config.Keys(t) {
		key := k.Name
		if prefix != "" {
			key = prefix + "." + k.Name
		}
		if ft := k.Field.Type; ft.Kind() == reflect.Struct {
			visit(key, k.Index, false)
			settingKeys(ft, key, func(key string, index []int, leaf bool) {
				visit(key, append(slices.Clone(k.Index), index...), leaf)
			})
			continue
		}
		visit(key, k.Index, true)
	}
}

// perturb changes v to a different value of its type.
func perturb(t *testing.T, key string, v reflect.Value) {
	switch v.Kind() {
	case reflect.String:
		v.SetString(v.String() + "x")
	case reflect.Bool:
		v.SetBool(!v.Bool())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(v.Int() + 1)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(v.Uint() + 1)
	case reflect.Slice:
		v.Set(reflect.Append(v, reflect.Zero(v.Type().Elem())))
	case reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		} else {
			v.SetZero()
		}
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		m.SetMapIndex(reflect.Zero(v.Type().Key()), reflect.Zero(v.Type().Elem()))
		v.Set(m)
	default:
		t.Fatalf("%s: the test cannot change a %s; teach perturb", key, v.Kind())
	}
}

// underReloadable reports whether key or a table above it is listed
// reloadable.
func underReloadable(key string) bool {
	for k := key; ; {
		if reloadable[k] {
			return true
		}
		i := strings.LastIndexByte(k, '.')
		if i < 0 {
			return false
		}
		k = k[:i]
	}
}

// TestRestartNeededCoversEverySetting changes every setting of the
// configuration, one at a time: each is either listed reloadable (and a
// reload reports nothing) or reported as needing a restart. A field added
// to config.Config is covered without touching this test.
func TestRestartNeededCoversEverySetting(t *testing.T) {
	keys := map[string]bool{}
	n := 0
	settingKeys(reflect.TypeFor[config.Config](), "", func(key string, index []int, leaf bool) {
		keys[key] = true
		if !leaf {
			return
		}
		n++
		old, cur := config.Default(), config.Default()
		perturb(t, key, reflect.ValueOf(cur).Elem().FieldByIndex(index))
		got := restartNeeded(old, cur)
		want := []string{key}
		if note, ok := restartNotes[key]; ok {
			want = []string{note}
		}
		if underReloadable(key) {
			want = nil
		}
		if !slices.Equal(got, want) {
			t.Errorf("changing %s: restartNeeded = %q, want %q", key, got, want)
		}
	})
	if n < 50 {
		t.Fatalf("found only %d settings; is the walk right?", n)
	}
	for k := range reloadable {
		if !keys[k] {
			t.Errorf("reloadable lists %q, which is no setting", k)
		}
	}
	for k := range restartNotes {
		if !keys[k] {
			t.Errorf("restartNotes lists %q, which is no setting", k)
		}
	}
	if got := restartNeeded(config.Default(), config.Default()); len(got) != 0 {
		t.Errorf("unchanged configuration: restartNeeded = %q", got)
	}
}

// TestReloadNamesRestartSettings: a reload applies a changed rule without
// a word, and names a changed setting it cannot apply until a restart
// (one the old hand-written comparison missed).
func TestReloadNamesRestartSettings(t *testing.T) {
	dir := t.TempDir()
	path := writeConfig(t, dir, cfgText(dir, "2"))
	logs := &logbuf.Buffer{}
	d := startDaemonLog(t, path, slog.New(slog.NewTextHandler(logs, nil)))
	writeConfig(t, dir, cfgText(dir, "5"))
	if err := d.Reload(); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(logs.String(), "applies only after a restart") {
		t.Fatalf("a rule change was reported as needing a restart:\n%s", logs.String())
	}
	writeConfig(t, dir, cfgText(dir, "5")+"[log]\nmax_lines_per_second = 7\n")
	if err := d.Reload(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), `applies only after a restart" setting=log.max_lines_per_second`) {
		t.Fatalf("log.max_lines_per_second not reported:\n%s", logs.String())
	}
}
