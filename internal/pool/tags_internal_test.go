package pool

import "testing"

// docs/protocols/mimedefang-multiplexor.md, "Status tags": how the reference turns one 63-byte piece of a -Z pipe read into
// a tag, and a command into its own tag.
func TestStatusChunkTag(t *testing.T) {
	for _, c := range []struct {
		in, tag string
		ok      bool
	}{
		{"", "", false},
		{"\n", "", false},
		{"hello%20world\n", "hello world", true},
		{"a\nb\n", "b", true},
		{"a\nb", "b", true},
		{"ab\n\n", "ab\n", true},
		{"x\x00y\n", "x", true},
		{"%41%00B", "A", true},
	} {
		tag, ok := statusChunkTag([]byte(c.in))
		if tag != c.tag || ok != c.ok {
			t.Errorf("%q: %q %v, want %q %v", c.in, tag, ok, c.tag, c.ok)
		}
	}
	for in, want := range map[string]string{
		"relayok 192.0.2.9 host 25":     "relayok 192.0.2.9",
		"STATUS hello%20world again":    "STATUS hello world",
		"scan":                          "scan",
		"x %09tab%7F":                   "x  tab ",
		"a %00b c":                      "a ",
		"w " + string(make([]byte, 80)): "w ",
	} {
		if got := commandTag(in); got != want {
			t.Errorf("commandTag(%q) = %q, want %q", in, got, want)
		}
	}
	// The raw command is cut to 63 bytes before it is decoded.
	long := "cmd " + "%41%41%41%41%41%41%41%41%41%41%41%41%41%41%41%41%41%41%41%41%41%41"
	if got := commandTag(long); got != "cmd AAAAAAAAAAAAAAAAAAA%4" {
		t.Errorf("commandTag(long) = %q", got)
	}
}
