package config

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// readDoc reads a page of the repository, relative to its root.
func readDoc(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("../..", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestDocsFuzzTargets: docs/reliability.md gives the number of fuzz
// targets there are, and its table names each of them.
func TestDocsFuzzTargets(t *testing.T) {
	var targets []string
	fuzzFunc := regexp.MustCompile(`(?m)^func (Fuzz\w+)\(`)
	err := filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range fuzzFunc.FindAllStringSubmatch(string(b), -1) {
			rel, _ := filepath.Rel("../..", filepath.Dir(path))
			targets = append(targets, "`"+filepath.ToSlash(rel)+"` "+m[1])
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	doc := readDoc(t, "docs/reliability.md")
	want := strconv.Itoa(len(targets)) + " `Fuzz*` targets"
	if !strings.Contains(doc, want) {
		t.Errorf("docs/reliability.md does not say %q (the repository has %d: %v)", want, len(targets), targets)
	}
	_, table, _ := strings.Cut(doc, "| decoder | target | seeds |")
	table, _, _ = strings.Cut(table, "\n\n")
	for _, target := range targets {
		pkg, name, _ := strings.Cut(target, " ")
		found := false
		for _, line := range strings.Split(table, "\n") {
			if strings.Contains(line, pkg) && regexp.MustCompile(`\b`+name+`\b`).MatchString(line) {
				found = true
			}
		}
		if !found {
			t.Errorf("docs/reliability.md's fuzzing table lacks %s", target)
		}
	}
}

// TestDocsAgree checks statements the issue found contradicted elsewhere.
func TestDocsAgree(t *testing.T) {
	// [[throttle.policy]] shared: one budget for every key the policy
	// matches (what the governor does), in the generated reference and
	// in throttle.md alike; it has nothing to do with Redis.
	cfgDoc, throttleDoc := readDoc(t, "docs/config.md"), readDoc(t, "docs/throttle.md")
	var sharedRow string
	for _, line := range strings.Split(cfgDoc, "\n") {
		if strings.HasPrefix(line, "| `shared` |") {
			sharedRow = line
		}
	}
	if !strings.Contains(sharedRow, "every key the policy matches share one budget") || strings.Contains(sharedRow, "Redis") {
		t.Errorf("docs/config.md on shared: %q", sharedRow)
	}
	if !strings.Contains(throttleDoc, "every key the policy matches shares one budget") {
		t.Error("docs/throttle.md no longer says what shared does")
	}

	// The qmail-remote report: the format docs/throttle.md gives is the
	// one the wrapper prints.
	code := readDoc(t, "internal/cli/throttle.go")
	m := regexp.MustCompile(`Fprintf\(stdout, "(Z[^"]*)"`).FindStringSubmatch(code)
	if m == nil {
		t.Fatal("internal/cli/throttle.go: no qmail-remote report format")
	}
	if docFormat := strings.ReplaceAll(m[1], `\x00`, `\0`); !strings.Contains(throttleDoc, "(`"+docFormat+"`)") {
		t.Errorf("docs/throttle.md does not give the report format %q", docFormat)
	}

	// Reload: README names both ways, SIGHUP and the file watch.
	readme := readDoc(t, "README.md")
	if !strings.Contains(readme, "SIGHUP rereads the file") || !strings.Contains(readme, "watches it with inotify") {
		t.Error("README.md does not name both ways to reload (SIGHUP and saving the file)")
	}
	// The check messages README quotes are the ones sluice check gives.
	golden := readDoc(t, "internal/config/testdata/bad/first-hour.err")
	for _, quoted := range []string{"log.levle: unknown key; did", `limiter.max_keys:
expected an integer, got the string "10k"`} {
		if !strings.Contains(readme, quoted) {
			t.Errorf("README.md no longer quotes %q", quoted)
		}
		if flat := strings.ReplaceAll(quoted, "\n", " "); !strings.Contains(golden, flat) {
			t.Errorf("README.md quotes %q, which sluice check does not say", flat)
		}
	}
	// A failed reload reaches systemd on both paths: the claim stands on
	// internal/cli's TestServeSignals, which checks both.
	rel := readDoc(t, "docs/reliability.md")
	if strings.Contains(rel, `systemd told "the last reload failed"`) && !strings.Contains(rel, "after SIGHUP and after a change of the file alike") {
		t.Error("docs/reliability.md claims systemd hears of failed reloads without saying for which paths")
	}
	tests := readDoc(t, "internal/cli/cli_test.go")
	if !strings.Contains(tests, "The file watch: a broken file") {
		t.Error("internal/cli/cli_test.go TestServeSignals no longer checks the file-watch path")
	}
}
