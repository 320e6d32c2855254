package cli

import (
	"strings"
	"testing"
)

// TestHelp: sluice's own help goes to stdout with status 0, so that
// "sluice serve --help | less" shows it; a flag error or no command at
// all goes to stderr with status 2.
func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"-h"}, {"--help"}, {"-help"}} {
		code, out, errs := run(args...)
		if code != 0 || errs != "" || !strings.HasPrefix(out, "usage: sluice <command>") || !strings.Contains(out, "  serve ") {
			t.Errorf("sluice %s: exit %d, stdout %q, stderr %q", strings.Join(args, " "), code, out, errs)
		}
	}
	for _, name := range []string{"serve", "check", "status", "throttle", "version"} {
		for _, args := range [][]string{{name, "-h"}, {name, "--help"}, {"help", name}} {
			code, out, errs := run(args...)
			if code != 0 || errs != "" || !strings.HasPrefix(out, "usage: sluice "+name) {
				t.Errorf("sluice %s: exit %d, stdout %q, stderr %q", strings.Join(args, " "), code, out, errs)
			}
		}
		code, out, errs := run(name, "-no-such-flag")
		if code != 2 || out != "" || !strings.Contains(errs, "flag provided but not defined: -no-such-flag") || !strings.Contains(errs, "usage: sluice "+name) {
			t.Errorf("sluice %s -no-such-flag: exit %d, stdout %q, stderr %q", name, code, out, errs)
		}
	}
	if code, out, errs := run("serve", "-h"); !strings.Contains(out, "-state-dir directory") {
		t.Errorf("serve -h lists no flags: %d %q %q", code, out, errs)
	}
	// The mimedefang programs keep the reference's -h (usage on stderr,
	// tested against it in mux_test.go and ctl_test.go); "sluice help
	// mux" is the way to their usage on stdout.
	if code, out, errs := run("help", "mux"); code != 0 || errs != "" || !strings.Contains(out, "Usage: sluice mux [options]") {
		t.Errorf("sluice help mux: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if code, out, errs := run("help", "nope"); code != 2 || out != "" || !strings.Contains(errs, `unknown command "nope"`) {
		t.Errorf("sluice help nope: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if code, out, errs := run(); code != 2 || out != "" || !strings.Contains(errs, "usage: sluice") {
		t.Errorf("sluice: exit %d, stdout %q, stderr %q", code, out, errs)
	}
}
