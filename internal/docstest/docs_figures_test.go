package docstest

import (
	"path"
	"regexp"
	"strings"
	"testing"
)

var (
	// figure is a number as the docs write figures: 31.8k, 1,000, 0.82-0.99,
	// 2026-11-25, 10:24, 23.7x, 5 %.
	figure = regexp.MustCompile(`\d+(?:[.,:]\d+)*(?:-\d+(?:[.,:]\d+)*)*[kx]?`)
	// docsLink is a markdown link to a page under docs/ or under
	// bench/results/ (the bench log): its target.
	docsLink = regexp.MustCompile(`\]\(((?:docs|bench/results)/[\w/.-]+\.md)(?:#[\w-]*)?\)`)
	// logLink is a markdown link to a section of the bench log: its anchor.
	logLink = regexp.MustCompile(`\]\(bench/results/log\.md#([\w-]+)\)`)
	// notFigure is what a table cell holds besides its figures: link
	// targets (the link text stays), code spans (commands), emphasis, and
	// words, digits in them too (p99).
	notFigure = regexp.MustCompile("\\]\\([^)]*\\)|`[^`]*`|\\*\\*|\\b[A-Za-z_]\\w*")
)

// benchmarkRows is README.md's benchmark table: the script of each row
// and its "measured here" cell.
func benchmarkRows(t *testing.T, readme string) map[string]string {
	t.Helper()
	_, sec, _ := strings.Cut(readme, "\n## Benchmarks\n")
	sec, _, _ = strings.Cut(sec, "\n## ")
	rows := map[string]string{}
	for line := range strings.SplitSeq(sec, "\n") {
		if !strings.HasPrefix(line, "| `bench/") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		if len(cells) != 3 {
			t.Fatalf("README.md's benchmark row has %d cells, want 3: %s", len(cells), line)
		}
		rows[strings.Trim(cells[0], "`")] = cells[2]
	}
	if len(rows) < 6 {
		t.Fatalf("README.md's benchmark table has %d rows: is the layout as expected?", len(rows))
	}
	return rows
}

// figures lists the figures of a table cell, outside its link targets and
// code spans.
func figures(cell string) []string {
	return figure.FindAllString(notFigure.ReplaceAllString(cell, " "), -1)
}

// hasFigure reports whether page states fig as such: not as a part of a
// longer number, a range, a date or a word (0.91 is not in 0.75-0.91,
// 17.6 not in 17.6k, 99 not in p99).
func hasFigure(page, fig string) bool {
	isDigit := func(b byte) bool { return b >= '0' && b <= '9' }
	isAlnum := func(b byte) bool { return isDigit(b) || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' }
	joins := func(b byte) bool { return strings.IndexByte(".,:-", b) >= 0 }
	for off := 0; ; {
		i := strings.Index(page[off:], fig)
		if i < 0 {
			return false
		}
		i += off
		j := i + len(fig)
		before := i == 0 || !(isAlnum(page[i-1]) || joins(page[i-1]) && i >= 2 && isDigit(page[i-2]))
		after := j == len(page) || !(isAlnum(page[j]) || joins(page[j]) && j+1 < len(page) && isDigit(page[j+1]))
		if before && after {
			return true
		}
		off = i + 1
	}
}

// TestReadmeFiguresInDocs: every figure README.md's benchmark table
// states is quoted from the bench log, bench/results/log.md, where each
// dated run is recorded once, so that the README never keeps an older
// copy of a figure or one the log does not have: each row cites a section
// of the log (bench/results/log.md#anvil), and each figure of its
// "measured here" cell appears, as the same figure, in a section it
// cites. A row's links to design pages (docs/) say how the script
// measures; they are no source of figures.
func TestReadmeFiguresInDocs(t *testing.T) {
	sections := logSections(readDoc(t, "bench/results/log.md"))
	rows := benchmarkRows(t, readDoc(t, "README.md"))
	checked := 0
	for script, cell := range rows {
		for _, m := range docsLink.FindAllStringSubmatch(cell, -1) {
			readDoc(t, path.Clean(m[1])) // every link leads to a page
		}
		var cited []string
		for _, m := range logLink.FindAllStringSubmatch(cell, -1) {
			if _, ok := sections[m[1]]; !ok {
				t.Errorf("README.md's row for %s cites bench/results/log.md#%s: the log has no such section", script, m[1])
			}
			cited = append(cited, sections[m[1]])
		}
		if len(cited) == 0 {
			t.Errorf("README.md's row for %s cites no section of bench/results/log.md for its figures", script)
			continue
		}
		for _, fig := range figures(cell) {
			checked++
			found := false
			for _, sec := range cited {
				found = found || hasFigure(sec, fig)
			}
			if !found {
				t.Errorf("README.md's row for %s states %s, which the log's sections it cites do not", script, fig)
			}
		}
	}
	if checked < 50 {
		t.Fatalf("checked only %d figures: is the table as expected?", checked)
	}
}

// logSections splits the bench log into its "## name" sections, by the
// anchor a link to each has (the name, as the log writes them: one
// lower-case word).
func logSections(log string) map[string]string {
	secs := map[string]string{}
	parts := strings.Split(log, "\n## ")
	for _, p := range parts[1:] {
		name, body, _ := strings.Cut(p, "\n")
		secs[strings.ToLower(strings.TrimSpace(name))] = body
	}
	return secs
}

// TestHasFigure: a figure is found only as itself.
func TestHasFigure(t *testing.T) {
	page := "sluice/floor 0.75-0.91 of it, 17.6k decisions, p99 3.1 ms, on 2026-11-25 at 10:24 UTC, 1,000 clients (0.36)."
	for fig, want := range map[string]bool{
		"0.75-0.91": true, "17.6k": true, "3.1": true, "2026-11-25": true, "10:24": true, "1,000": true, "0.36": true,
		"0.91": false, "0.75": false, "17.6": false, "99": false, "11": false, "24": false, "000": false, "3": false, "0.3": false,
	} {
		if got := hasFigure(page, fig); got != want {
			t.Errorf("hasFigure(%q) = %v, want %v", fig, got, want)
		}
	}
	if got := figures("a 1.5x gain, `QUICK=1` on [2026-11-24](docs/mux.md#performance) **0.95**, p99 at c=64, 5 %"); strings.Join(got, " ") != "1.5x 2026-11-24 0.95 64 5" {
		t.Errorf("figures = %q", got)
	}
}
