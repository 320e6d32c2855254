package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestCheckWarnsOfShadowedClass: `sluice check` on the shipped
// examples/sluice.toml with its include_dir on and a conf.d file that
// adds a class inside the example's local (127.0.0.0/8) says where each
// class came from and warns that local takes the new class's peers,
// naming both, the masks and how to order them; done as the warning
// says (the class defined in the main file above local, the conf.d file
// changing it in place), the warning is gone.
func TestCheckWarnsOfShadowedClass(t *testing.T) {
	cfg, _ := hostFreeConfig(t, "../../examples/sluice.toml")
	b, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	main := strings.Replace(string(b), "# include_dir = ", "include_dir = ", 1)
	confd := filepath.Join(filepath.Dir(cfg), "host", "etc", "sluice", "conf.d")
	if !strings.Contains(main, "include_dir = \""+confd+"\"") {
		t.Fatalf("the example no longer names /etc/sluice/conf.d as include_dir:\n%s", main)
	}
	if err := os.MkdirAll(confd, 0o755); err != nil {
		t.Fatal(err)
	}
	frag := filepath.Join(confd, "50-monitor.toml")
	if err := os.WriteFile(frag, []byte("# the monitoring agent\n[[class]]\nname = \"monitor\"\nmatch = [\"127.0.0.2\"]\nrefuse = 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	write := func(text string) {
		t.Helper()
		if err := os.WriteFile(cfg, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(main)
	local := lineOf(t, main, "name = \"local\"") - 1 // its [[class]]
	code, out, errs := run("check", "-c", cfg)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{
		"local                  -       -  127.0.0.0/8 ::1/128\nmonitor                1       -  127.0.0.2/32\neveryone             200       -  *\n",
		"class origins (a class an include_dir file adds goes just before the catch-all \"everyone\", the files in name order; one whose name is already there is changed in place):\n" +
			fmt.Sprintf("  local            %s:%d\n", cfg, local) +
			fmt.Sprintf("  monitor          added by %s:2\n", frag),
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks\n%s\n%s", want, out)
		}
	}
	warning := fmt.Sprintf("warning: class \"monitor\" (%s:2) never matches: an earlier class matches every one of its peers first (127.0.0.2/32 inside \"local\"'s 127.0.0.0/8 at %s:%d), and the first class that matches wins; "+
		"a class that an include_dir file adds goes after the main file's classes, just before the catch-all \"everyone\": to have it tried before \"local\", define class \"monitor\" in %s above \"local\" (the include_dir file then changes it in place), or narrow \"local\"\n",
		frag, cfg, local, cfg)
	if !strings.Contains(errs, warning) {
		t.Errorf("stderr lacks\n%s\n%s", warning, errs)
	}

	// As the warning says: monitor in the main file, above local.
	main = strings.Replace(main, "[[class]]\nname = \"local\"", "[[class]]\nname = \"monitor\"\nmatch = [\"127.0.0.2\"]\n\n[[class]]\nname = \"local\"", 1)
	write(main)
	code, out, errs = run("check", "-c", cfg)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if want := "monitor                1       -  127.0.0.2/32\nlocal                  -       -  127.0.0.0/8 ::1/128\n"; !strings.Contains(out, want) {
		t.Errorf("output lacks\n%s\n%s", want, out)
	}
	if want := fmt.Sprintf("  monitor          %s, changed by %s:2\n", cfg, frag); !strings.Contains(out, want) {
		t.Errorf("output lacks\n%s\n%s", want, out)
	}
	if strings.Contains(errs, "never match") {
		t.Errorf("monitor goes first, yet:\n%s", errs)
	}
}

// lineOf is the number of the first line of text that holds s.
func lineOf(t *testing.T, text, s string) int {
	t.Helper()
	i := slices.IndexFunc(strings.Split(text, "\n"), func(l string) bool { return strings.Contains(l, s) })
	if i < 0 {
		t.Fatalf("no line holds %q", s)
	}
	return i + 1
}
