package docstest

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestMuxOptionsTable: the options table of
// docs/protocols/mimedefang-multiplexor.md lists exactly the options
// `sluice mux` accepts (internal/cli/mux.go's getopt letters), each with
// an argument exactly when getopt expects one.
func TestMuxOptionsTable(t *testing.T) {
	code := readDoc(t, "internal/cli/mux.go")
	letters := func(name string) string {
		m := regexp.MustCompile(name + `\s*=\s*"(\w+)"`).FindStringSubmatch(code)
		if m == nil {
			t.Fatalf("internal/cli/mux.go: no %s", name)
		}
		return m[1]
	}
	withArg, without := letters("muxArgOpts"), letters("muxFlagOpts")
	doc := readDoc(t, "docs/protocols/mimedefang-multiplexor.md")
	_, table, ok := strings.Cut(doc, "| opt | default | notes |")
	if !ok {
		t.Fatal("docs/protocols/mimedefang-multiplexor.md: no options table")
	}
	table, _, _ = strings.Cut(table, "\n\n")
	documented := map[byte]bool{}
	opt := regexp.MustCompile("`-(\\w)( [^`]+)?`")
	for _, row := range strings.Split(table, "\n") {
		cells := strings.Split(row, "|")
		if len(cells) < 3 {
			continue
		}
		for _, m := range opt.FindAllStringSubmatch(cells[1], -1) {
			c := m[1][0]
			documented[c] = true
			switch {
			case strings.IndexByte(withArg, c) >= 0 && m[2] == "":
				t.Errorf("-%c takes an argument; the table shows none", c)
			case strings.IndexByte(without, c) >= 0 && m[2] != "":
				t.Errorf("-%c takes no argument; the table shows %q", c, m[2])
			case strings.IndexByte(withArg+without, c) < 0:
				t.Errorf("the table lists -%c, which sluice mux does not accept", c)
			}
		}
	}
	for _, c := range []byte(withArg + without) {
		if !documented[c] {
			t.Errorf("sluice mux accepts -%c; the options table does not list it", c)
		}
	}
}

// TestDocsCommandFlags: every flag the pages (and the example units) give
// to `sluice serve`, `check`, `status`, `throttle` or `version` is one
// that subcommand defines in internal/cli.
func TestDocsCommandFlags(t *testing.T) {
	const root = "../.."
	defined := map[string]map[string]bool{}
	newFlags := regexp.MustCompile(`newFlags\("(\w+)"|fs\.\w+\("([\w-]+)"`)
	files, _ := filepath.Glob(filepath.Join(root, "internal/cli/*.go"))
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		cmd := ""
		for _, m := range newFlags.FindAllStringSubmatch(string(b), -1) {
			if m[1] != "" {
				cmd = m[1]
				defined[cmd] = map[string]bool{}
			} else if cmd != "" {
				defined[cmd][m[2]] = true
			}
		}
	}
	if len(defined) < 5 || !defined["serve"]["grace"] {
		t.Fatalf("found the flags of only %v: is internal/cli laid out as expected?", defined)
	}
	pages := []string{"README.md"}
	for _, glob := range []string{"docs/*.md", "docs/protocols/*.md", "examples/systemd/*"} {
		m, _ := filepath.Glob(filepath.Join(root, glob))
		for _, p := range m {
			rel, _ := filepath.Rel(root, p)
			pages = append(pages, filepath.ToSlash(rel))
		}
	}
	use := regexp.MustCompile("sluice (serve|check|status|throttle|version)\\b([^`|;&]*)")
	seen := 0
	for _, page := range pages {
		for i, line := range strings.Split(readDoc(t, page), "\n") {
			for _, m := range use.FindAllStringSubmatch(line, -1) {
				for _, tok := range strings.Fields(m[2]) {
					if tok == "--" {
						break
					}
					if len(tok) < 2 || tok[0] != '-' || tok[1] == '-' {
						continue
					}
					seen++
					name, _, _ := strings.Cut(tok[1:], "=")
					if !defined[m[1]][name] {
						t.Errorf("%s:%d: sluice %s has no flag -%s", page, i+1, m[1], name)
					}
				}
			}
		}
	}
	if seen < 5 {
		t.Fatalf("found only %d flags in the pages", seen)
	}
}

// TestDocsConfigKeys: a configuration key the pages cite by its dotted
// path (`limiter.status_interval`, `store.redis.addrs`) is one the
// generated reference, docs/config.md, lists.
func TestDocsConfigKeys(t *testing.T) {
	known := map[string]bool{}
	section := ""
	sectionHead := regexp.MustCompile(`^## \[+([\w.]+)\]+`)
	keyRow := regexp.MustCompile("^\\| `(\\w+)` \\|")
	for _, line := range strings.Split(readDoc(t, "docs/config.md"), "\n") {
		if m := sectionHead.FindStringSubmatch(line); m != nil {
			section = m[1]
			known[section] = true
		} else if strings.HasPrefix(line, "## ") {
			section = ""
		} else if m := keyRow.FindStringSubmatch(line); m != nil && section != "" {
			known[section+"."+m[1]] = true
		}
	}
	if len(known) < 50 {
		t.Fatalf("docs/config.md: found only %d keys", len(known))
	}
	cited := regexp.MustCompile("`((?:log|limiter|store|anvil|policy|throttle|milter|web|class)(?:\\.[a-z_]+)+)`")
	pages := docPages(t, "../..")
	tr := loadGoTree(t, "../..")
	seen := 0
	for _, page := range pages {
		if page == "docs/config.md" {
			continue
		}
		for i, line := range strings.Split(readDoc(t, page), "\n") {
			for _, m := range cited.FindAllStringSubmatch(line, -1) {
				pkg, name, _ := strings.Cut(m[1], ".")
				if strings.HasSuffix(m[1], ".go") || isGoName(tr, pkg, name) {
					continue // a file (app/throttle.go) or a Go name (milter.conn)
				}
				seen++
				if !known[m[1]] {
					t.Errorf("%s:%d: `%s` is no key of docs/config.md", page, i+1, m[1])
				}
			}
		}
	}
	if seen < 10 {
		t.Fatalf("found only %d keys cited", seen)
	}
}

// isGoName reports whether name is defined in a package called pkg.
func isGoName(tr goTree, pkg, name string) bool {
	for _, d := range tr.pkgs[pkg] {
		if tr.names[d][name] {
			return true
		}
	}
	return false
}
