package percent

import (
	"strings"
	"testing"
)

// codings: Decode(enc) is dec; for a canonical enc (canon), Encode(dec)
// is enc again. The rest are malformed or non-canonical encodings: a %
// without two hex digits after it is kept, lower-case hex is decoded.
var codings = []struct {
	enc, dec string
	canon    bool
}{
	{"", "", true},
	{"plain-text_1.2@x", "plain-text_1.2@x", true},
	{"a%20b%09c%0A", "a b\tc\n", true},
	{"%25%5C%27%22", "%\\'\"", true},
	{"%00%01%7F%80%FF~!", "\x00\x01\x7f\x80\xff~!", true},
	{"%C3%A9", "é", true},
	{"scan%20Q1%20/var/spool", "scan Q1 /var/spool", true},
	{"%", "%", false},
	{"100%", "100%", false},
	{"%4", "%4", false},
	{"%4g", "%4g", false},
	{"%g4", "%g4", false},
	{"%zz%2", "%zz%2", false},
	{"%41%", "A%", false},
	{"%%41", "%A", false},
	{"%e9%E9", "\xe9\xe9", false},
	{"%41%4a%4A", "AJJ", false},
	{"%00x", "\x00x", false},
	{"%%%", "%%%", false},
	{"a%2", "a%2", false},
}

func TestCodings(t *testing.T) {
	for _, c := range codings {
		if got := Decode(c.enc); got != c.dec {
			t.Errorf("Decode(%q) = %q, want %q", c.enc, got, c.dec)
		}
		if got := Encode(c.dec); c.canon && got != c.enc {
			t.Errorf("Encode(%q) = %q, want %q", c.dec, got, c.enc)
		}
	}
}

func FuzzDecode(f *testing.F) {
	for _, s := range []string{"a%20b", "%", "%4", "%41", "%%41", "scan%20Q1", "\x00\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		enc := Encode(s)
		for i := 0; i < len(enc); i++ {
			if c := enc[i]; c != '%' && NeedsEncoding(c) {
				t.Fatalf("Encode(%q) = %q keeps byte %#x", s, enc, c)
			}
		}
		if got := Decode(enc); got != s {
			t.Fatalf("round trip of %q gave %q", s, got)
		}
		if d := Decode(s); len(d) > len(s) || !strings.Contains(s, "%") && d != s {
			t.Fatalf("Decode(%q) = %q", s, d)
		}
	})
}
