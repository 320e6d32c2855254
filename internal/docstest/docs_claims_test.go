package docstest

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"sluice/internal/config"
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

// TestDocsFuzzTargets: docs/reliability.md's fuzzing table names every
// fuzz target of the repository, and where the page counts them ("20
// `Fuzz*` targets") the count is the repository's.
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
	for _, m := range regexp.MustCompile("(\\d+) `Fuzz\\*` targets").FindAllStringSubmatch(doc, -1) {
		if m[1] != strconv.Itoa(len(targets)) {
			t.Errorf("docs/reliability.md counts %s fuzz targets; the repository has %d: %v", m[1], len(targets), targets)
		}
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

// checkQuote is a backticked check message on a page: a dotted key, a
// colon and the message (`limiter.max_keys: expected an integer, got the
// string "10k"`), possibly broken over lines.
var checkQuote = regexp.MustCompile("`([a-z_]+(?:\\[\\d+\\])?(?:\\.[a-z_]+(?:\\[\\d+\\])?)+:\\s[^`]+)`")

// quotedMessages returns the check messages page quotes, each with its
// white space collapsed.
func quotedMessages(page string) []string {
	var out []string
	for _, m := range checkQuote.FindAllStringSubmatch(page, -1) {
		out = append(out, strings.Join(strings.Fields(m[1]), " "))
	}
	return out
}

// TestDocsQuoteCheckMessages: a configuration error the pages quote (as
// README.md does `log.levle: unknown key; did you mean level?`) is one
// sluice check gives: some file of internal/config/testdata/bad makes config.Load report it.
// (TestBadFiles keeps the .err files equal to what Load says, and
// internal/cli's TestCheckBad runs sluice check on first-hour.toml.)
func TestDocsQuoteCheckMessages(t *testing.T) {
	sample := "its line (`log.levle: unknown key; did\nyou mean level?`), or `a.b` and `c.d:\nx`"
	if got := quotedMessages(sample); len(got) != 2 || got[0] != "log.levle: unknown key; did you mean level?" || got[1] != "c.d: x" {
		t.Fatalf("quotedMessages(%q) = %q", sample, got)
	}
	var said []string
	files, _ := filepath.Glob("../config/testdata/bad/*.toml")
	for _, f := range files {
		_, errs := config.Load(f)
		for _, e := range errs {
			said = append(said, strings.Join(strings.Fields(e.Error()), " "))
		}
	}
	if len(said) < 20 {
		t.Fatalf("internal/config/testdata/bad gives only %d errors", len(said))
	}
	for _, page := range docPages(t, "../..") {
		for _, q := range quotedMessages(readDoc(t, page)) {
			if !slices.ContainsFunc(said, func(e string) bool { return strings.Contains(e, q) }) {
				t.Errorf("%s quotes %q, which no file of internal/config/testdata/bad makes sluice check say", page, q)
			}
		}
	}
}
