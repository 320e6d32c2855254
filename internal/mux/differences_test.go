package mux_test

import (
	"bytes"
	"flag"
	"os"
	"slices"
	"strings"
	"testing"

	"sluice/internal/mux"
)

var updateDocs = flag.Bool("update", false, "rewrite the deliberate-difference lists of README.md and docs/mux.md")

// The lists of deliberate differences in README.md and docs/mux.md, of
// the differential fuzzer's causes and the table of MIMEDefang versions in
// docs/mux.md, are generated from mux.Differences, mux.FuzzCauses and
// mux.VersionChoices, between markers; run `go test
// ./internal/mux -run TestDifferencesDocs -update` after changing them.
func TestDifferencesDocs(t *testing.T) {
	seen := map[string]bool{}
	for _, d := range slices.Concat(mux.Differences, mux.FuzzCauses) {
		if d.ID == "" || d.Summary == "" || d.Detail == "" || seen[d.ID] {
			t.Errorf("difference %+v: empty field or repeated id", d)
		}
		seen[d.ID] = true
	}
	var summary, detail, causes []string
	for i, d := range mux.Differences {
		end := ";"
		if i == len(mux.Differences)-1 {
			end = "."
		}
		summary = append(summary, wrapBullet(d.Summary+end))
		detail = append(detail, wrapBullet(d.Detail))
	}
	for _, c := range mux.FuzzCauses {
		causes = append(causes, wrapBullet(c.Detail))
	}
	versions := "| Behaviour | Follows | The other version, and why |\n|---|---|---|\n"
	for _, v := range mux.VersionChoices {
		if v.ID == "" || v.Behaviour == "" || v.Why == "" || seen["version:"+v.ID] || (v.Follows != "3.3" && v.Follows != "3.7.1") {
			t.Errorf("version choice %+v: empty field, repeated id or no version", v)
		}
		seen["version:"+v.ID] = true
		versions += "| " + v.Behaviour + " | " + v.Follows + " | " + v.Why + " |\n"
	}
	for _, f := range []struct {
		path   string
		blocks map[string]string // marker name -> body
	}{
		{"../../README.md", map[string]string{"": strings.Join(summary, "")}},
		{"../../docs/mux.md", map[string]string{"": strings.Join(detail, ""), "FuzzCauses": strings.Join(causes, ""),
			"VersionChoices": versions}},
	} {
		b, err := os.ReadFile(f.path)
		if err != nil {
			t.Fatal(err)
		}
		got := b
		for name, body := range f.blocks {
			if got, err = replaceBetween(got, name, body); err != nil {
				t.Fatalf("%s: markers %q: %v", f.path, name, err)
			}
		}
		if *updateDocs {
			if err := os.WriteFile(f.path, got, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if !bytes.Equal(got, b) {
			t.Errorf("%s: the generated lists are not mux.Differences and mux.FuzzCauses: run go test ./internal/mux -run TestDifferencesDocs -update", f.path)
		}
	}
}

// markers are the lines around a generated list: name "" for the
// deliberate differences, "FuzzCauses" for the fuzzer's causes,
// "VersionChoices" for the table of MIMEDefang versions.
func markers(name string) (begin, end string) {
	src := "internal/mux/differences.go"
	if name != "" {
		src += " (" + name + ")"
	}
	return "<!-- generated from " + src + ": begin -->\n", "<!-- generated from " + src + ": end -->\n"
}

// replaceBetween puts body between the markers called name in doc.
func replaceBetween(doc []byte, name, body string) ([]byte, error) {
	begin, end := markers(name)
	s := string(doc)
	i := strings.Index(s, begin)
	j := strings.Index(s, end)
	if i < 0 || j < i {
		return nil, os.ErrNotExist
	}
	return []byte(s[:i+len(begin)] + body + s[j:]), nil
}

// wrapBullet renders text as a Markdown bullet wrapped at 76 columns.
func wrapBullet(text string) string {
	var b strings.Builder
	line := "-"
	for _, w := range strings.Fields(text) {
		if len(line)+1+len(w) > 76 && line != "-" {
			b.WriteString(line + "\n")
			line = " "
		}
		line += " " + w
	}
	b.WriteString(line + "\n")
	return b.String()
}
