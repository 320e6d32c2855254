package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckSaysWhichDoorCaps: check names the doors that enforce the
// refuse caps, and warns when a Postfix session seen by anvil and a
// milter on TCP would hold two slots, until anvil.class_caps = false.
func TestCheckSaysWhichDoorCaps(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ name, body, line, warn string }{
		{"unix", "[milter]\nlisten = [\"unix:milter\"]\n",
			"refuse caps enforced by: anvil (at connect) and the milter (at CONNECT); a Postfix session both see holds one slot", ""},
		{"inet", "[milter]\nlisten = [\"inet:127.0.0.1:8891\"]\n",
			"refuse caps enforced by: anvil (at connect) and the milter", "warning: inet:127.0.0.1:8891 is not a unix socket"},
		{"switch", "[anvil]\nclass_caps = false\n[milter]\nlisten = [\"inet:127.0.0.1:8891\"]\n",
			"refuse caps enforced by: the milter (at CONNECT); anvil keeps only its counts and rates (anvil.class_caps = false)", ""},
		{"anvil", "[milter]\nenabled = false\n", "refuse caps enforced by: anvil (at connect)\n", ""},
	} {
		path := filepath.Join(dir, c.name+".toml")
		body := "state_dir = \"" + dir + "\"\n" + c.body
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		code, out, errs := run("check", "-c", path)
		if code != 0 || !strings.Contains(out, c.line) {
			t.Errorf("%s: exit %d, output lacks %q:\n%s%s", c.name, code, c.line, out, errs)
		}
		if (c.warn == "") != !strings.Contains(errs, "warning:") || !strings.Contains(errs, c.warn) {
			t.Errorf("%s: stderr %q, want the warning %q", c.name, errs, c.warn)
		}
	}
}
