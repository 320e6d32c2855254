package wire

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// pairs returns a list's names and values in one slice, as
// Macro.NameValues holds them.
func pairs(l MacroList) []string {
	var nv []string
	for name, value := range l.All() {
		nv = append(nv, name, value)
	}
	return nv
}

func TestDecodeMacroList(t *testing.T) {
	cases := []struct {
		data string
		cmd  Code
		nv   []string
		err  string
	}{
		{"C", CmdConnect, nil, ""},
		{"Cj\x00mx.example\x00", CmdConnect, []string{"j", "mx.example"}, ""},
		{"C{daemon_name}\x00smtpd\x00v\x00\x00", CmdConnect, []string{"{daemon_name}", "smtpd", "v", ""}, ""},
		{"E\x00\x00", CmdEOM, []string{"", ""}, ""},
		{"", 0, nil, "MACRO without a command code"},
		{"Cj\x00", CmdConnect, nil, `name "j" without a value`},
		{"Cj\x00v\x00k\x00", CmdConnect, nil, `name "k" without a value`},
		{"C\x00", CmdConnect, nil, `name "" without a value`},
		{"Cj\x00x", CmdConnect, nil, "macro without its terminating NUL"},
		{"Cj", CmdConnect, nil, "macro without its terminating NUL"},
	}
	for _, c := range cases {
		cmd, l, err := DecodeMacroList([]byte(c.data))
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) || !errors.Is(err, ErrMalformed) {
				t.Errorf("DecodeMacroList(%q) = %v, want an ErrMalformed saying %q", c.data, err, c.err)
			}
			continue
		}
		if err != nil || cmd != c.cmd || !slices.Equal(pairs(l), c.nv) {
			t.Errorf("DecodeMacroList(%q) = %v %q %v, want %v %q", c.data, cmd, pairs(l), err, c.cmd, c.nv)
		}
	}
}

// A caller may stop the walk early.
func TestMacroListStop(t *testing.T) {
	_, l, err := DecodeMacroList([]byte("Ca\x001\x00b\x002\x00"))
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	for name := range l.All() {
		seen = append(seen, name)
		break
	}
	if !slices.Equal(seen, []string{"a"}) {
		t.Fatalf("seen %q", seen)
	}
}

// splitMacros is the plain reading of a MACRO packet, string by string,
// that DecodeMacroList must agree with: its names and values, or false
// for a packet to refuse.
func splitMacros(data []byte) (Code, []string, bool) {
	if len(data) == 0 {
		return 0, nil, false
	}
	var nv []string
	rest := data[1:]
	for len(rest) > 0 {
		name, after, ok := strings.Cut(string(rest), "\x00")
		if !ok {
			return 0, nil, false
		}
		nv, rest = append(nv, name), []byte(after)
	}
	return Code(data[0]), nv, len(nv)%2 == 0
}

// FuzzMacroList: DecodeMacroList agrees with the plain reading on every
// input, in what it accepts and in the names and values, and
// Macro.DecodeData with it.
func FuzzMacroList(f *testing.F) {
	for _, s := range []string{"C", "Cj\x00mx\x00", "Cj\x00", "Cj\x00x", "", "E\x00\x00\x00\x00"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cmd, l, err := DecodeMacroList(data)
		wcmd, wnv, ok := splitMacros(data)
		if (err == nil) != ok {
			t.Fatalf("%q: DecodeMacroList %v, plain reading ok %v", data, err, ok)
		}
		var m Macro
		merr := m.DecodeData(data)
		if err != nil {
			if !errors.Is(err, ErrMalformed) || merr == nil || err.Error() != merr.Error() {
				t.Fatalf("%q: errors %v and %v", data, err, merr)
			}
			return
		}
		if cmd != wcmd || !slices.Equal(pairs(l), wnv) || merr != nil || m.Cmd != wcmd || !slices.Equal(m.NameValues, wnv) {
			t.Fatalf("%q: %v %q and %v %q (%v), want %v %q", data, cmd, pairs(l), m.Cmd, m.NameValues, merr, wcmd, wnv)
		}
	})
}
