package mux_test

import (
	"bytes"
	"flag"
	"os"
	"strings"
	"testing"

	"sluice/internal/mux"
)

var updateDocs = flag.Bool("update", false, "rewrite the deliberate-difference lists of README.md and docs/mux.md")

// The lists of deliberate differences in README.md and docs/mux.md are
// generated from mux.Differences, between markers; run `go test
// ./internal/mux -run TestDifferencesDocs -update` after changing it.
func TestDifferencesDocs(t *testing.T) {
	seen := map[string]bool{}
	for _, d := range mux.Differences {
		if d.ID == "" || d.Summary == "" || d.Detail == "" || seen[d.ID] {
			t.Errorf("difference %+v: empty field or repeated id", d)
		}
		seen[d.ID] = true
	}
	var summary, detail []string
	for i, d := range mux.Differences {
		end := ";"
		if i == len(mux.Differences)-1 {
			end = "."
		}
		summary = append(summary, wrapBullet(d.Summary+end))
		detail = append(detail, wrapBullet(d.Detail))
	}
	for _, f := range []struct{ path, body string }{
		{"../../README.md", strings.Join(summary, "")},
		{"../../docs/mux.md", strings.Join(detail, "")},
	} {
		b, err := os.ReadFile(f.path)
		if err != nil {
			t.Fatal(err)
		}
		got, err := replaceBetween(b, f.body)
		if err != nil {
			t.Fatalf("%s: %v", f.path, err)
		}
		if *updateDocs {
			if err := os.WriteFile(f.path, got, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if !bytes.Equal(got, b) {
			t.Errorf("%s: the deliberate differences are not mux.Differences: run go test ./internal/mux -run TestDifferencesDocs -update", f.path)
		}
	}
}

const (
	beginMarker = "<!-- generated from internal/mux/differences.go: begin -->\n"
	endMarker   = "<!-- generated from internal/mux/differences.go: end -->\n"
)

// replaceBetween puts body between the markers of doc.
func replaceBetween(doc []byte, body string) ([]byte, error) {
	s := string(doc)
	i := strings.Index(s, beginMarker)
	j := strings.Index(s, endMarker)
	if i < 0 || j < i {
		return nil, os.ErrNotExist
	}
	return []byte(s[:i+len(beginMarker)] + body + s[j:]), nil
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
