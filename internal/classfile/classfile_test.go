package classfile

import (
	"fmt"
	"strings"
	"testing"
)

func TestParseXLA(t *testing.T) {
	in := `# File name used to store the counters
L/etc/sendmail.la
# Classes definition
# Lname            #queue #reject
L*.insa-lyon.fr         8       3
Lgrasp.insa-lyon.fr	2	2   # one host
L192.0.2.0/24 4 4
L*                     15      16
`
	res, errs := Parse(strings.NewReader(in), "sendmail.cf")
	if len(errs) != 0 {
		t.Fatalf("errors: %v", errs)
	}
	want := []string{"*.insa-lyon.fr 8 3 @5", "grasp.insa-lyon.fr 2 2 @6", "192.0.2.0/24 4 4 @7", "* 15 16 @8"}
	var got []string
	for _, e := range res.Entries {
		got = append(got, fmt.Sprintf("%s %d %d @%d", e.Mask, e.Queue, e.Refuse, e.Line))
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("entries = %q, want %q", got, want)
	}
	if len(res.Notes) != 1 || !strings.Contains(res.Notes[0], "sendmail.cf:2: XLA counter file \"/etc/sendmail.la\" ignored") {
		t.Errorf("notes = %q", res.Notes)
	}
}

func TestParsePlainKeepsLeadingL(t *testing.T) {
	res, errs := Parse(strings.NewReader("localhost 5 5\n* 3 3\n"), "classes")
	if len(errs) != 0 || len(res.Entries) != 2 || res.Entries[0].Mask.String() != "localhost" {
		t.Fatalf("got %+v %v", res, errs)
	}
}

func TestParseErrors(t *testing.T) {
	cases := []struct{ in, want string }{
		{"*.a.org 8\n", "f:1: want \"mask queue refuse\", got 2 fields"},
		{"\n\n*.a.org 8 x\n", "f:3: refuse: \"x\" is not a non-negative integer"},
		{"*.a.org -1 2\n", "f:1: queue: \"-1\" is not a non-negative integer"},
		{"a*b 1 1\n", "f:1: invalid host mask \"a*b\""},
		{"* 99999999 1\n", "f:1: queue: 99999999 is larger than 1048576"},
		{strings.Repeat("x", MaxLineLen+10) + "\n", "line longer than 4096 bytes"},
		{"L*.a.org 1 2 3\n", "f:1: want \"mask queue refuse\", got 4 fields"},
		{"\x00\xff 1 1\n", "not allowed in a host name"},
		{"192.168.1.300 1 1\n", "f:1: invalid address \"192.168.1.300\""},
		{"10.0.0.0/33 1 1\n", "f:1: invalid network \"10.0.0.0/33\""},
	}
	for _, c := range cases {
		_, errs := Parse(strings.NewReader(c.in), "f")
		if len(errs) == 0 || !strings.Contains(errs[0].Error(), c.want) {
			t.Errorf("Parse(%q) errors = %v, want %q", c.in, errs, c.want)
		}
	}
	// All errors are reported, not only the first.
	_, errs := Parse(strings.NewReader("a 1\nb x 1\n* 1 1\n"), "f")
	if len(errs) != 2 {
		t.Errorf("want 2 errors, got %v", errs)
	}
	// Too many entries.
	_, errs = Parse(strings.NewReader(strings.Repeat("* 1 1\n", MaxEntries+1)), "f")
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "more than 10000 classes") {
		t.Errorf("want entry cap error, got %v", errs)
	}
}

func FuzzParse(f *testing.F) {
	f.Add("L/etc/sendmail.la\nL*.insa-lyon.fr 8 3\nL* 15 16\n")
	f.Add("localhost 1 1\n# c\n192.0.2.0/24 3 3 # x\n* 0 0")
	f.Fuzz(func(t *testing.T, in string) {
		res, _ := Parse(strings.NewReader(in), "fuzz")
		if len(res.Entries) > MaxEntries {
			t.Fatalf("%d entries", len(res.Entries))
		}
	})
}
