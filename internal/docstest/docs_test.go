package docstest

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sluice/internal/config"
	"sluice/internal/testutil/peer"
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
			// The host's /etc/sluice is not the test's: a file a block
			// names there (a password file) is looked for in a directory
			// of the test's own.
			dir := t.TempDir()
			text := strings.ReplaceAll(strings.Join(lines, "\n"), "\"/etc/sluice/", "\""+dir+"/etc/sluice/")
			path := filepath.Join(dir, "block.toml")
			if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
			n++
			_, errs := config.Load(path)
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

// TestExampleConfigs: every examples/*.toml passes sluice check.
func TestExampleConfigs(t *testing.T) {
	files, _ := filepath.Glob("../../examples/*.toml")
	if len(files) < 2 {
		t.Fatalf("found %d example configs", len(files))
	}
	for _, f := range files {
		if _, errs := config.Load(f); len(errs) > 0 {
			t.Errorf("%s: %v", f, errs)
		}
	}
}

// TestSystemdUnit has systemd-analyze check the example units (the
// service and its socket unit, together), with the binary's path pointed
// at one that exists here. Any complaint fails.
func TestSystemdUnit(t *testing.T) {
	sa := peer.Binary(t, "systemd", "systemd-analyze")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var units []string
	names, _ := filepath.Glob("../../examples/systemd/*")
	if len(names) < 3 {
		t.Fatalf("found %d unit files in examples/systemd", len(names))
	}
	for _, name := range names {
		name = filepath.Base(name)
		b, err := os.ReadFile("../../examples/systemd/" + name)
		if err != nil {
			t.Fatal(err)
		}
		unit := filepath.Join(dir, name)
		if err := os.WriteFile(unit, bytes.ReplaceAll(b, []byte("/usr/local/bin/sluice"), []byte(exe)), 0o644); err != nil {
			t.Fatal(err)
		}
		units = append(units, unit)
	}
	out, err := exec.Command(sa, append([]string{"verify"}, units...)...).CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
	// The rating docs/operations.md gives, if it gives one, is the one
	// systemd-analyze gives.
	out, err = exec.Command(sa, "security", "--offline=true", filepath.Join(dir, "sluice.service")).CombinedOutput()
	m := regexp.MustCompile(`Overall exposure level for sluice.service: ([0-9.]+)`).FindSubmatch(out)
	if err != nil || m == nil {
		t.Fatalf("systemd-analyze security: %v\n%s", err, out)
	}
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, claim := range regexp.MustCompile("`systemd-analyze security` rates the shipped unit ([0-9.]+)").FindAllSubmatch(doc, -1) {
		if !bytes.Equal(claim[1], m[1]) {
			t.Errorf("docs/operations.md rates the unit %s; systemd-analyze security rates it %s", claim[1], m[1])
		}
	}
}

// TestSystemdSocketMatchesConfig: every ListenStream= of the example
// socket units is a listen address of the example config; sluice refuses
// a passed socket that no listen address names.
func TestSystemdSocketMatchesConfig(t *testing.T) {
	cfg, errs := config.Load("../../examples/sluice.toml")
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	listens := map[string]bool{}
	for _, l := range slices.Concat(cfg.Anvil.Listen, cfg.Policy.Listen, cfg.Throttle.Listen, cfg.Milter.Listen, cfg.Web.Listen) {
		network, addr, err := config.ParseListen(l)
		if err != nil {
			t.Fatal(err)
		}
		if network == "unix" {
			addr = cfg.Path(addr)
		}
		listens[addr] = true
	}
	units, _ := filepath.Glob("../../examples/systemd/*.socket")
	n := 0
	for _, unit := range units {
		b, err := os.ReadFile(unit)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if addr, ok := strings.CutPrefix(line, "ListenStream="); ok {
				n++
				if !listens[addr] {
					t.Errorf("%s listens on %s, which examples/sluice.toml does not name", filepath.Base(unit), addr)
				}
			}
		}
	}
	if n < 3 {
		t.Fatalf("only %d ListenStream= lines in examples/systemd/*.socket", n)
	}
}
