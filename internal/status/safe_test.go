package status

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// hostile is what a remote SMTP client can put in a MAIL FROM or HELO
// name for a terminal to act on: an OSC title, an SGR colour, CR, LF, tab,
// DEL, a C1 CSI (as a lone byte and as UTF-8), invalid UTF-8 and a bidi
// override.
const hostile = "a\x1b]0;pwned\x07b\x1b[31mc\rd\ne\tf\x7fg\x9bh\u009bi\xff\xc3j\u202ek@x.example"

func TestSafe(t *testing.T) {
	for in, want := range map[string]string{
		"":                               "",
		"sender=a@b.example":             "sender=a@b.example",
		"Grüße, 日本 ☃ a b":                "Grüße, 日本 ☃ a b",
		hostile:                          "a?]0;pwned?b?[31mc?d?e?f?g?h?i??j?k@x.example",
		"\u2028\u2029\u200b\u00a0\ufeff": "?????",
		"\ufffd":                         "?",
	} {
		if got := Safe(in); got != want {
			t.Errorf("Safe(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzSafe: whatever comes in, Safe's output is valid UTF-8 without a
// control character, format character (bidi overrides) or other rune a
// terminal may act on; text that was fine is kept as it is, and each
// rune is one rune out.
func FuzzSafe(f *testing.F) {
	for _, s := range []string{"", "sender=a@b.example", hostile, "\xed\xa0\x80", "\xf4\x90\x80\x80", "Grüße"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := Safe(s)
		if !utf8.ValidString(out) {
			t.Fatalf("Safe(%q) = %q: invalid UTF-8", s, out)
		}
		for _, r := range out {
			if r < 0x20 || (r >= 0x7f && r < 0xa0) || !unicode.IsPrint(r) || unicode.Is(unicode.Cf, r) {
				t.Fatalf("Safe(%q) = %q: has %U", s, out, r)
			}
		}
		if n, m := utf8.RuneCountInString(s), utf8.RuneCountInString(out); n != m {
			t.Fatalf("Safe(%q) = %q: %d runes from %d", s, out, m, n)
		}
		if utf8.ValidString(s) && !strings.ContainsFunc(s, func(r rune) bool { return !unicode.IsPrint(r) || r == utf8.RuneError }) && out != s {
			t.Fatalf("Safe(%q) = %q: printable text changed", s, out)
		}
	})
}
