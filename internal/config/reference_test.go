package config

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// referencePath is the configuration reference generated from the
// structs of this package: their toml tags, doc comments and the values
// of Default(). TestConfigReference fails when it is out of date; run
// `go test ./internal/config -update` to rewrite it.
const referencePath = "../../docs/config.md"

func TestConfigReference(t *testing.T) {
	got, err := configReference()
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(referencePath, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(referencePath)
	if err != nil {
		t.Fatalf("%v (run go test ./internal/config -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is out of date with the config structs: run go test ./internal/config -update", referencePath)
	}
}

// readStructDocs returns, from this package's source, each struct's
// fields' documentation and each struct's own.
func readStructDocs() (map[string]map[string]string, map[string]string, error) {
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		return nil, nil, err
	}
	fields := map[string]map[string]string{}
	types := map[string]string{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, parser.ParseComments)
		if err != nil {
			return nil, nil, err
		}
		for _, decl := range af.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.TYPE {
				continue
			}
			for _, spec := range gd.Specs {
				ts := spec.(*ast.TypeSpec)
				st, ok := ts.Type.(*ast.StructType)
				if !ok {
					continue
				}
				types[ts.Name.Name] = strings.TrimSpace(gd.Doc.Text())
				m := map[string]string{}
				for _, fl := range st.Fields.List {
					doc := strings.TrimSpace(fl.Doc.Text())
					if c := strings.TrimSpace(fl.Comment.Text()); c != "" {
						doc = strings.TrimSpace(doc + " " + c)
					}
					for _, n := range fl.Names {
						m[n.Name] = strings.Join(strings.Fields(doc), " ")
					}
				}
				fields[ts.Name.Name] = m
			}
		}
	}
	return fields, types, nil
}

func configReference() ([]byte, error) {
	fields, types, err := readStructDocs()
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.WriteString("# Configuration reference\n\n")
	b.WriteString("Generated from the structs of `internal/config` (their doc comments and the values of\n")
	b.WriteString("`Default()`) by `go test ./internal/config -update`; a test fails when it is out of date.\n")
	b.WriteString("Every key is optional: a missing key keeps its default. Unknown keys are errors.\n")
	b.WriteString("`sluice check -c FILE` validates a file and prints it as understood.\n")
	b.WriteString("Durations are written \"60s\", \"10m\" or \"1h30m\" (a bare number is seconds).\n")
	var missing []string
	w := refWriter{b: &b, missing: &missing, fields: fields, types: types}
	w.section("", reflect.ValueOf(Default()).Elem(), false)
	if len(missing) > 0 {
		return nil, fmt.Errorf("config fields without a doc comment (the reference needs one): %s", strings.Join(missing, ", "))
	}
	return b.Bytes(), nil
}

type refWriter struct {
	b       *bytes.Buffer
	missing *[]string
	fields  map[string]map[string]string
	types   map[string]string
}

// section writes the plain keys of the struct v at path, then its tables.
func (w refWriter) section(path string, v reflect.Value, array bool) {
	t := v.Type()
	switch {
	case path == "":
		w.b.WriteString("\n## Top level\n\n")
	case array:
		fmt.Fprintf(w.b, "\n## [[%s]]\n\n", path)
	default:
		fmt.Fprintf(w.b, "\n## [%s]\n\n", path)
	}
	if d := w.types[t.Name()]; d != "" {
		w.b.WriteString(strings.Join(strings.Fields(d), " ") + "\n\n")
	}
	w.b.WriteString("| key | type | default | meaning |\n|---|---|---|---|\n")
	type sub struct {
		path  string
		v     reflect.Value
		array bool
	}
	var subs []sub
	for _, k := range Keys(t) {
		f, tag := k.Field, k.Name
		key := tag
		if path != "" {
			key = path + "." + tag
		}
		fv := v.FieldByIndex(k.Index)
		owner := t // the struct that declares f: t, or one t embeds
		if len(k.Index) > 1 {
			owner = t.FieldByIndex(k.Index[:len(k.Index)-1]).Type
		}
		doc := w.fields[owner.Name()][f.Name]
		// "StateDir holds ..." reads "`state_dir` holds ..." here.
		if rest, ok := strings.CutPrefix(doc, f.Name+" "); ok {
			doc = "`" + tag + "` " + rest
		} else if rest, ok := strings.CutPrefix(doc, f.Name+": "); ok {
			doc = rest
		}
		if st, ok := tableType(f.Type); ok {
			sv := fv
			if f.Type.Kind() == reflect.Slice {
				sv = reflect.New(st).Elem()
			}
			subs = append(subs, sub{key, sv, f.Type.Kind() == reflect.Slice})
			continue
		}
		if doc == "" {
			*w.missing = append(*w.missing, owner.Name()+"."+f.Name)
		}
		def := defaultText(fv)
		switch key {
		case "state_dir":
			def = "`\"/var/lib/sluice\"` as root, else `$XDG_STATE_HOME/sluice` (`~/.local/state/sluice`)"
		case "runtime_dir":
			def = "`\"/run/sluice\"` as root, else `$XDG_RUNTIME_DIR/sluice`; `state_dir` when only that is set"
		}
		fmt.Fprintf(w.b, "| `%s` | %s | %s | %s |\n", tag, typeName(f.Type), def, escapeCell(doc))
	}
	for _, s := range subs {
		w.section(s.path, s.v, s.array)
	}
}

// tableType reports whether t is written as a TOML table (a struct other
// than Duration) or an array of tables.
func tableType(t reflect.Type) (reflect.Type, bool) {
	if t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	if t.Kind() == reflect.Struct && t != reflect.TypeFor[Duration]() {
		return t, true
	}
	return nil, false
}

func typeName(t reflect.Type) string {
	switch {
	case t == reflect.TypeFor[Duration]():
		return "duration"
	case t.Kind() == reflect.Pointer:
		return typeName(t.Elem())
	case t.Kind() == reflect.Slice:
		return "list of " + typeName(t.Elem())
	case t.Kind() == reflect.Bool:
		return "boolean"
	case t.Kind() == reflect.String:
		return "string"
	case t == reflect.TypeFor[Duration]():
		return "duration"
	}
	return "integer"
}

func defaultText(v reflect.Value) string {
	switch {
	case v.Type() == reflect.TypeFor[Duration]():
		if v.Int() == 0 {
			return "—"
		}
		return "`\"" + Duration(v.Int()).D().String() + "\"`"
	case v.Kind() == reflect.Pointer:
		if v.IsNil() {
			return "—"
		}
		return defaultText(v.Elem())
	case v.Kind() == reflect.Slice:
		if v.Len() == 0 {
			return "—"
		}
		var parts []string
		for i := 0; i < v.Len(); i++ {
			parts = append(parts, strconv.Quote(v.Index(i).String()))
		}
		return "`[" + strings.Join(parts, ", ") + "]`"
	case v.Kind() == reflect.String:
		if v.String() == "" {
			return "—"
		}
		return "`" + strconv.Quote(v.String()) + "`"
	case v.Kind() == reflect.Bool:
		return "`" + strconv.FormatBool(v.Bool()) + "`"
	}
	if v.IsZero() {
		return "`0`"
	}
	return "`" + strconv.FormatInt(v.Int(), 10) + "`"
}

func escapeCell(s string) string {
	return strings.ReplaceAll(s, "|", "\\|")
}
