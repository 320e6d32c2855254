package docstest

import (
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// modulePackages lists the module's packages (relative import paths) that
// start with one of prefixes.
func modulePackages(t *testing.T, prefixes ...string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "sluice/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []string
	for _, p := range strings.Fields(string(out)) {
		rel := strings.TrimPrefix(p, "sluice/")
		for _, pre := range prefixes {
			if strings.HasPrefix(rel, pre) {
				pkgs = append(pkgs, rel)
				break
			}
		}
	}
	if len(pkgs) < 20 {
		t.Fatalf("go list found only %d packages: %v", len(pkgs), pkgs)
	}
	return pkgs
}

// TestArchitectureListsEveryPackage: docs/architecture.md's package map
// has a row for every package under internal/ and bench/internal/, and
// README.md's layout names each of them.
func TestArchitectureListsEveryPackage(t *testing.T) {
	arch := readDoc(t, "docs/architecture.md")
	_, readmeLayout, _ := strings.Cut(readDoc(t, "README.md"), "## Layout")
	readmeLayout, _, _ = strings.Cut(readmeLayout, "\n## ")
	for _, p := range modulePackages(t, "internal/", "bench/internal/") {
		if !strings.Contains(arch, "\n| `"+p+"` |") {
			t.Errorf("docs/architecture.md has no row for %s", p)
		}
		if !regexp.MustCompile(`(^|[\s/,])` + regexp.QuoteMeta(path.Base(p)) + `\b`).MatchString(readmeLayout) {
			t.Errorf("README.md's layout does not name %s", p)
		}
	}
}

// TestReadmeNamesEveryDependency: README.md's Dependencies section names
// every module go.mod requires directly and every tool it pins, so a new
// dependency comes with its reason.
func TestReadmeNamesEveryDependency(t *testing.T) {
	gomod := readDoc(t, "go.mod")
	_, deps, _ := strings.Cut(readDoc(t, "README.md"), "## Dependencies")
	deps, _, _ = strings.Cut(deps, "\n## ")
	var mods []string
	block := ""
	for _, line := range strings.Split(gomod, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasSuffix(line, "("):
			block = strings.Fields(line)[0]
			continue
		case line == ")":
			block = ""
			continue
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		switch {
		case block == "require" && !strings.Contains(line, "// indirect"):
			mods = append(mods, f[0])
		case block == "tool":
			mods = append(mods, f[0])
		case block == "" && (f[0] == "require" || f[0] == "tool") && len(f) > 1 && !strings.Contains(line, "// indirect"):
			mods = append(mods, f[1])
		}
	}
	if len(mods) < 5 {
		t.Fatalf("found only %d direct dependencies in go.mod: %v", len(mods), mods)
	}
	for _, m := range mods {
		// A tool is named by its module (honnef.co/go/tools for
		// honnef.co/go/tools/cmd/staticcheck).
		name := m
		if i := strings.Index(name, "/cmd/"); i > 0 {
			name = name[:i]
		}
		if !strings.Contains(deps, "`"+name) {
			t.Errorf("README.md's Dependencies section does not name %s", m)
		}
	}
}

// TestReadmeNamesEveryBenchmarkPackage: README.md's paragraph on the Go
// benchmarks names every package that has one.
func TestReadmeNamesEveryBenchmarkPackage(t *testing.T) {
	const root = "../.."
	_, para, _ := strings.Cut(readDoc(t, "README.md"), "Go benchmarks for the hot paths:")
	para, _, _ = strings.Cut(para, "\n\n")
	bench := regexp.MustCompile(`(?m)^func Benchmark\w*\(`)
	found := 0
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if !bench.Match(b) {
			return nil
		}
		found++
		rel, _ := filepath.Rel(root, filepath.Dir(p))
		if dir := "./" + filepath.ToSlash(rel) + "/"; !strings.Contains(para, dir) {
			t.Errorf("README.md's Go benchmarks paragraph does not name %s (%s has benchmarks)", dir, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found < 5 {
		t.Fatalf("found only %d files with benchmarks", found)
	}
}
