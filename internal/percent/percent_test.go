package percent

import (
	"strings"
	"testing"
)

func TestEncodeDecode(t *testing.T) {
	for _, c := range []struct{ in, enc string }{
		{"", ""},
		{"plain-text_1.2@x", "plain-text_1.2@x"},
		{"a b\tc\n", "a%20b%09c%0A"},
		{"%\\'\"", "%25%5C%27%22"},
		{"\x00\x01\x7f\x80\xff~!", "%00%01%7F%80%FF~!"},
		{"é", "%C3%A9"},
		{"scan Q1 /var/spool", "scan%20Q1%20/var/spool"},
	} {
		if got := Encode(c.in); got != c.enc {
			t.Errorf("Encode(%q) = %q, want %q", c.in, got, c.enc)
		}
		if got := Decode(c.enc); got != c.in {
			t.Errorf("Decode(%q) = %q, want %q", c.enc, got, c.in)
		}
	}
}

// TestDecodeMalformed: a % without two hex digits after it is kept.
func TestDecodeMalformed(t *testing.T) {
	for in, want := range map[string]string{
		"%":         "%",
		"100%":      "100%",
		"%4":        "%4",
		"%4g":       "%4g",
		"%g4":       "%g4",
		"%zz%2":     "%zz%2",
		"%41%":      "A%",
		"%%41":      "%A",
		"%e9%E9":    "\xe9\xe9",
		"%41%4a%4A": "AJJ",
		"%00x":      "\x00x",
		"%%%":       "%%%",
		"a%2":       "a%2",
	} {
		if got := Decode(in); got != want {
			t.Errorf("Decode(%q) = %q, want %q", in, got, want)
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
