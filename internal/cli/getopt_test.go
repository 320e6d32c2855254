package cli

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// getoptRun records what getopt reports, as "c=val" items.
func getoptRun(args []string, posix bool) (opts, operands []string, err error) {
	operands, err = getopt(args, "sx", "ihv", posix, func(c byte, val string) (bool, error) {
		opts = append(opts, fmt.Sprintf("%c=%s", c, val))
		return c != 'v', nil // -v stops at once, as the reference's does
	})
	return opts, operands, err
}

func TestGetopt(t *testing.T) {
	cases := []struct {
		name     string
		args     []string
		posix    bool
		opts     []string
		operands []string
		err      string
	}{
		{"nothing", nil, false, nil, nil, ""},
		{"cluster", []string{"-ih"}, false, []string{"i=", "h="}, nil, ""},
		{"attached argument", []string{"-s/tmp/x"}, false, []string{"s=/tmp/x"}, nil, ""},
		{"separate argument", []string{"-s", "/tmp/x", "status"}, false, []string{"s=/tmp/x"}, []string{"status"}, ""},
		{"argument ends a cluster", []string{"-isx", "y"}, false, []string{"i=", "s=x"}, []string{"y"}, ""},
		{"argument that looks like an option", []string{"-s", "-i"}, false, []string{"s=-i"}, nil, ""},
		{"permuted", []string{"status", "-i", "x"}, false, []string{"i="}, []string{"status", "x"}, ""},
		{"posix stops at the first operand", []string{"status", "-i"}, true, nil, []string{"status", "-i"}, ""},
		{"double dash", []string{"-i", "--", "-h"}, false, []string{"i="}, []string{"-h"}, ""},
		{"lone dash is an operand", []string{"-", "-i"}, false, []string{"i="}, []string{"-"}, ""},
		{"stop", []string{"-v", "-q"}, false, []string{"v="}, nil, ""},
		{"missing argument", []string{"-i", "-s"}, false, []string{"i="}, nil, "option requires an argument -- 's'"},
		{"unknown", []string{"-iq"}, false, []string{"i="}, nil, "invalid option -- 'q'"},
		{"unknown byte as it was", []string{"-\xe9"}, false, nil, nil, "invalid option -- '\xe9'"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			opts, operands, err := getoptRun(c.args, c.posix)
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != c.err || !slices.Equal(opts, c.opts) || !slices.Equal(operands, c.operands) {
				t.Errorf("getopt(%q) = %q, %q, %q; want %q, %q, %q", c.args, opts, operands, got, c.opts, c.operands, c.err)
			}
		})
	}
}

// An error from the callback stops the walk and is returned as it is.
func TestGetoptCallbackError(t *testing.T) {
	bad := errors.New("bad value")
	_, err := getopt([]string{"-s", "x", "-i"}, "s", "i", false, func(c byte, _ string) (bool, error) {
		if c == 's' {
			return true, bad
		}
		t.Errorf("-%c seen after the error", c)
		return true, nil
	})
	if err != bad {
		t.Fatalf("err %v, want %v", err, bad)
	}
}

// FuzzGetopt: any argv (words split at NUL) is walked without a panic;
// every option reported is one of the given letters, and every word
// ends up as an option, an option's argument or an operand.
func FuzzGetopt(f *testing.F) {
	for _, s := range []string{"-ih", "-s\x00/tmp/x\x00status", "status\x00-i", "--\x00-h", "-s", "-q", "-", ""} {
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, argv string, posix bool) {
		var args []string
		if argv != "" {
			args = strings.Split(argv, "\x00")
		}
		opts, operands, err := getoptRun(args, posix)
		for _, o := range opts {
			if !strings.ContainsRune("sxihv", rune(o[0])) {
				t.Fatalf("option %q not asked for", o)
			}
		}
		if err == nil && len(operands) > len(args) {
			t.Fatalf("%d operands from %d words", len(operands), len(args))
		}
	})
}
