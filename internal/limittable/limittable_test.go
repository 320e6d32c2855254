package limittable

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"sluice/internal/rules"
	"sluice/internal/safefs"
)

const example = `# key                  limits
customer@example.com   20/1h
Bulk@Example.NET       500/1h exact, 5000/1d smooth burst=50   # a big one
friend@example.org	exempt

192.0.2.0/24           30/10m
`

func TestParse(t *testing.T) {
	tab, errs := Parse(strings.NewReader(example), "customers", nil)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if tab.Len() != 4 || tab.Name() != "customers" {
		t.Fatalf("Len %d Name %q", tab.Len(), tab.Name())
	}
	cases := []struct{ key, want string }{
		{"customer@example.com", "@2 20/1h exact"},
		{"CUSTOMER@example.com", "@2 20/1h exact"},
		{"bulk@example.net", "@3 500/1h exact, 5000/1d smooth burst=50"},
		{"friend@example.org", "@4 exempt"},
		{"192.0.2.0/24", "@6 30/10m exact"},
		{"other@example.com", "none"},
	}
	for _, c := range cases {
		e, ok := tab.Lookup(c.key)
		got := "none"
		if ok {
			got = fmt.Sprintf("@%d %s", e.Line, describe(e))
		}
		if got != c.want {
			t.Errorf("Lookup(%q) = %s, want %s", c.key, got, c.want)
		}
	}
}

func describe(e Entry) string {
	if e.Exempt {
		return "exempt"
	}
	s := make([]string, len(e.Limits))
	for i, l := range e.Limits {
		s[i] = l.String()
	}
	return strings.Join(s, ", ")
}

// TestParseMalformed: every bad line is reported, with its number, in one
// run, and a table with a bad line is not used at all.
func TestParseMalformed(t *testing.T) {
	noExact := func(l rules.Limit) error {
		if l.Algorithm == rules.Exact {
			return errors.New("this rule counts bytes: no exact limits")
		}
		return nil
	}
	cases := []struct {
		name, in string
		check    Check
		want     []string
	}{
		{"no value", "a@b\n", nil, []string{`t:1: "a@b" has no value: want limits such as "20/1h", or "exempt"`}},
		{"comment only value", "a@b   # 20/1h\n", nil, []string{`t:1: "a@b" has no value`}},
		{"bad limit", "ok 1/1s\na@b 20\n", nil, []string{`t:2: limit "20": want N/PERIOD`}},
		{"bad algorithm", "a@b 20/1h fast\n", nil, []string{`t:1: limit "20/1h fast": unknown algorithm "fast"`}},
		{"zero", "a@b 0/1h\n", nil, []string{`t:1: limit 0/1h exact: count must be between 1`}},
		{"empty limit in list", "a@b 20/1h,\n", nil, []string{`t:1: empty limit`}},
		{"too many limits", "a@b " + strings.Repeat("1/1s,", MaxLimits) + "1/1s\n", nil, []string{fmt.Sprintf("t:1: more than %d limits", MaxLimits)}},
		{"duplicate", "a@b 1/1s\n\nA@B 2/1s\n", nil, []string{`t:3: "a@b" already has an entry at line 1`}},
		{"continuation", "a@b 1/1s\n  2/1s\n", nil, []string{`t:2: a line starts with its key; continuation lines are not supported`}},
		{"control", "a\x00b 1/1s\n", nil, []string{`t:1: control characters are not allowed`}},
		{"long key", strings.Repeat("k", MaxKeyLen+1) + " 1/1s\n", nil, []string{fmt.Sprintf("t:1: key longer than %d bytes", MaxKeyLen)}},
		{"long line", "a 1/1s\n" + strings.Repeat("k", MaxLineLen+1) + "\n", nil, []string{fmt.Sprintf("t:2: line longer than %d bytes", MaxLineLen)}},
		{"check", "a 1/1s smooth\nb 1/1s\n", noExact, []string{"t:2: this rule counts bytes: no exact limits"}},
		{"every bad line", "a\nb 1/1s\nc x\nd 1/1s\ne\n", nil, []string{`t:1: "a" has no value`, `t:3: limit "x"`, `t:5: "e" has no value`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tab, errs := Parse(strings.NewReader(c.in), "t", c.check)
			if tab != nil {
				t.Errorf("a table with bad lines was returned")
			}
			if len(errs) != len(c.want) {
				t.Fatalf("errors %q, want %d: %q", errs, len(c.want), c.want)
			}
			for i, e := range errs {
				if !strings.HasPrefix(e.Error(), c.want[i]) {
					t.Errorf("error %d: %q, want %q...", i, e, c.want[i])
				}
			}
		})
	}
}

// TestParseManyBadLines: a file of garbage is reported line by line up
// to MaxErrors, then counted, so the report is bounded too.
func TestParseManyBadLines(t *testing.T) {
	_, errs := Parse(strings.NewReader(strings.Repeat("x\n", 5000)), "t", nil)
	if len(errs) != MaxErrors+1 || errs[MaxErrors].Error() != fmt.Sprintf("t: %d more bad lines", 5000-MaxErrors) {
		t.Fatalf("%d errors, last %v", len(errs), errs[len(errs)-1])
	}
}

// TestReadFileRefuses: a symbolic link, a FIFO (which would hang a
// reload) and a file over the cap are refused before they are read, with
// one clear error.
func TestReadFileRefuses(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	if err := os.WriteFile(good, []byte("a@b 20/1h\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if tab, errs := ReadFile(good, nil); len(errs) > 0 || tab.Len() != 1 {
		t.Fatalf("good: %v", errs)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink("/dev/zero", link); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big")
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(1 << 30); err != nil { // 1 GiB, sparse
		t.Fatal(err)
	}
	f.Close()
	for _, c := range []struct {
		path string
		want error
	}{{fifo, safefs.ErrNotRegular}, {link, safefs.ErrNotRegular}, {big, safefs.ErrTooLarge}, {dir, safefs.ErrNotRegular}} {
		tab, errs := ReadFile(c.path, nil)
		if tab != nil || len(errs) != 1 || !errors.Is(errs[0], c.want) {
			t.Errorf("%s: %v, want one error wrapping %v", c.path, errs, c.want)
		}
	}
}

func TestChanges(t *testing.T) {
	old, _ := Parse(strings.NewReader("a 1/1s\nb 2/1s\nc exempt\nd 4/1s\n"), "t", nil)
	cur, _ := Parse(strings.NewReader("d 4/1s exact\nb 3/1s\nc 1/1s\ne exempt\n"), "t", nil)
	if a, r, c := Changes(old, cur); a != 1 || r != 1 || c != 2 {
		t.Errorf("Changes = +%d -%d ~%d, want +1 -1 ~2", a, r, c)
	}
	if a, r, c := Changes(nil, cur); a != 4 || r != 0 || c != 0 {
		t.Errorf("from nothing: +%d -%d ~%d", a, r, c)
	}
	if a, r, c := Changes(old, nil); a != 0 || r != 4 || c != 0 {
		t.Errorf("to nothing: +%d -%d ~%d", a, r, c)
	}
}

func FuzzParse(f *testing.F) {
	f.Add(example)
	f.Add("a@b 1/1s,2/1d smooth burst=3\n#x\n\n b\n")
	f.Add("a exempt\na 1/1s\n")
	f.Fuzz(func(t *testing.T, in string) {
		tab, errs := Parse(strings.NewReader(in), "t", nil)
		if (tab == nil) == (len(errs) == 0) {
			t.Fatalf("table %v with %d errors", tab != nil, len(errs))
		}
		if len(errs) > MaxErrors+1 {
			t.Fatalf("%d errors", len(errs))
		}
		if tab == nil {
			return
		}
		// Every entry is found again under its key, with valid limits.
		for k := range tab.keys {
			e, ok := tab.Lookup(k)
			if !ok || e.Exempt == (len(e.Limits) > 0) {
				t.Fatalf("%q: %+v %v", k, e, ok)
			}
			for _, l := range e.Limits {
				if err := l.Validate(); err != nil {
					t.Fatal(err)
				}
			}
		}
	})
}
