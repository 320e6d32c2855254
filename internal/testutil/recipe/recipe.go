// Package recipe reads the configuration blocks an administrator is told
// to copy from the documentation, so that the tests that run them use the
// page's text and the page cannot drift from what is tested.
//
// A recipe is a fenced code block preceded by the line
// `<!-- recipe: NAME -->` (an HTML comment, invisible when rendered; it
// may be indented like the block, inside a list item).
package recipe

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

var block = regexp.MustCompile("(?ms)^ *<!-- recipe: ([a-z0-9.-]+) -->\n( *)```[a-z]*[^\n]*\n(.*?)^ *```")

// Root is the repository's top directory, found from this source file.
func Root() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

// All returns the recipes of a page (a path relative to the repository,
// such as "docs/throttle.md"), by name.
func All(page string) (map[string]string, error) {
	b, err := os.ReadFile(filepath.Join(Root(), page))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", page, err)
	}
	out := map[string]string{}
	for _, m := range block.FindAllSubmatch(b, -1) {
		name, indent := string(m[1]), string(m[2])
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("%s: recipe %q appears twice", page, name)
		}
		var lines []string
		for _, l := range strings.Split(string(m[3]), "\n") {
			lines = append(lines, strings.TrimPrefix(l, indent))
		}
		out[name] = strings.Join(lines, "\n")
	}
	return out, nil
}

// Get returns one recipe of page, failing the test if it is missing.
func Get(tb testing.TB, page, name string) string {
	tb.Helper()
	all, err := All(page)
	if err != nil {
		tb.Fatal(err)
	}
	r, ok := all[name]
	if !ok {
		tb.Fatalf("%s has no block marked <!-- recipe: %s -->", page, name)
	}
	return r
}

// Replace returns s with each old replaced by its new, failing the test
// when an old is not in s: a test may change only what it says it changes
// (a path to a temporary one, a limit to a shorter one), and must notice
// when the page no longer has it.
func Replace(tb testing.TB, s string, oldnew ...string) string {
	tb.Helper()
	for i := 0; i+1 < len(oldnew); i += 2 {
		if !strings.Contains(s, oldnew[i]) {
			tb.Fatalf("the recipe no longer contains %q:\n%s", oldnew[i], s)
		}
		s = strings.ReplaceAll(s, oldnew[i], oldnew[i+1])
	}
	return s
}

// MainCF reads a main.cf recipe: "name = value" lines, a value continued on
// lines that start with white space, "#" lines ignored. Postfix has no
// comments after a value, so a "#" inside one stays part of it, as
// Postfix would read it.
func MainCF(tb testing.TB, text string) map[string]string {
	tb.Helper()
	out := map[string]string{}
	last := ""
	for _, line := range strings.Split(text, "\n") {
		switch {
		case strings.TrimSpace(line) == "" || strings.HasPrefix(strings.TrimSpace(line), "#"):
		case line[0] == ' ' || line[0] == '\t':
			if last == "" {
				tb.Fatalf("main.cf recipe: continuation line with no parameter: %q", line)
			}
			out[last] = strings.TrimSpace(out[last] + " " + strings.TrimSpace(line))
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok {
				tb.Fatalf("main.cf recipe: not name = value: %q", line)
			}
			last = strings.TrimSpace(k)
			out[last] = strings.TrimSpace(v)
		}
	}
	return out
}
