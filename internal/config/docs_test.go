package config

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// tomlBlock is a fenced ```toml block of a Markdown page.
var tomlBlock = regexp.MustCompile("(?ms)^( *)```toml( [a-z-]+)?\n(.*?)^ *```")

// TestDocsConfigBlocks loads every ```toml block of README.md and docs/
// as a configuration file: what the documentation tells administrators
// to write must pass sluice check. A block marked ```toml fragment is a
// piece that is not meant to stand alone (it names files that exist only
// on the administrator's host) and is checked for TOML syntax only.
func TestDocsConfigBlocks(t *testing.T) {
	pages, _ := filepath.Glob("../../docs/*.md")
	pages = append(pages, "../../README.md")
	n := 0
	for _, page := range pages {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for i, m := range tomlBlock.FindAllSubmatch(b, -1) {
			indent, mark, body := string(m[1]), strings.TrimSpace(string(m[2])), string(m[3])
			var lines []string
			for _, l := range strings.Split(body, "\n") {
				lines = append(lines, strings.TrimPrefix(l, indent))
			}
			path := filepath.Join(t.TempDir(), "block.toml")
			if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
				t.Fatal(err)
			}
			n++
			_, errs := Load(path)
			for _, e := range errs {
				if mark == "fragment" && !strings.Contains(e.Error(), "syntax") && !strings.Contains(e.Error(), "unknown key") {
					continue
				}
				t.Errorf("%s, toml block %d: %v", filepath.Base(page), i+1, e)
			}
		}
	}
	if n < 5 {
		t.Fatalf("found only %d toml blocks in the docs", n)
	}
}
