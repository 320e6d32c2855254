package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sluice/internal/testutil/peer"
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
		{"switch", "[anvil]\nclass_caps = false\n[milter]\nlisten = [\"inet:127.0.0.1:8891\"]\nallow_users = [\"root\"]\n",
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

// TestCheckComparesMainCF: check -postconf (a directory or its main.cf),
// or anvil.postfix_config_dir, compares [anvil.smtpd] with main.cf through
// postconf and warns of the drift; -q keeps the warning (stderr).
func TestCheckComparesMainCF(t *testing.T) {
	if _, err := os.Stat("/usr/sbin/postconf"); err != nil {
		peer.Missing(t, "Postfix's postconf", err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.cf"), []byte("smtpd_client_connection_count_limit = 30\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "sluice.toml")
	if err := os.WriteFile(path, []byte("state_dir = \""+dir+"\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	want := "warning: anvil.smtpd.client_connection_count_limit is 50 but " + dir + "/main.cf has smtpd_client_connection_count_limit = 30"
	for _, args := range [][]string{{"-postconf", dir}, {"-postconf", filepath.Join(dir, "main.cf")}} {
		code, _, errs := run(append([]string{"check", "-q", "-c", path}, args...)...)
		if code != 0 || !strings.Contains(errs, want) {
			t.Errorf("%v: exit %d, stderr %q", args, code, errs)
		}
	}
	if code, _, errs := run("check", "-q", "-c", path); code != 0 || errs != "" {
		t.Errorf("without -postconf or the key: exit %d, %q", code, errs)
	}
	if err := os.WriteFile(path, []byte("state_dir = \""+dir+"\"\n[anvil]\npostfix_config_dir = \""+dir+"\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := run("check", "-q", "-c", path); code != 0 || !strings.Contains(errs, want) {
		t.Errorf("anvil.postfix_config_dir: exit %d, %q", code, errs)
	}
}

// TestCheckPrintsFairShare: with a capacity, check says past how many
// sessions the classes without a reservation are held to fair shares:
// 4/5 of what nobody reserved.
func TestCheckPrintsFairShare(t *testing.T) {
	dir := t.TempDir()
	classes := "[[class]]\nname = \"partners\"\nmatch = [\"192.0.2.0/24\"]\nreserve = 10\n[[class]]\nname = \"rest\"\nmatch = [\"*\"]\n"
	for _, c := range []struct{ name, body, line string }{
		{"plain", "[mta]\nsessions = 50\n", "fair share: past 40 sessions of the classes without a reservation"},
		{"reserve", "[mta]\nsessions = 50\n" + classes, "fair share: past 32 sessions of the classes without a reservation"},
	} {
		path := filepath.Join(dir, c.name+".toml")
		if err := os.WriteFile(path, []byte("state_dir = \""+dir+"\"\n"+c.body), 0o600); err != nil {
			t.Fatal(err)
		}
		code, out, errs := run("check", "-c", path)
		if code != 0 || !strings.Contains(out, c.line) {
			t.Errorf("%s: exit %d, output lacks %q:\n%s%s", c.name, code, c.line, out, errs)
		}
	}
}
