package app

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestStatusShowsReloadedLimits: after a reload raises a rule's limit,
// or gives the key a limit of its own in the rule's table, the status
// page shows the new limit for a key at once, with its count kept; a key whose limit's window changed is no longer shown with the
// old one.
func TestStatusShowsReloadedLimits(t *testing.T) {
	dir := t.TempDir()
	conf := func(limits string) string {
		return fmt.Sprintf(`state_dir = %q
[anvil]
enabled = false
[throttle]
enabled = false
[milter]
enabled = false
[policy]
listen = ["unix:policy"]
[[policy.rule]]
name = "r"
count = "messages"
key = ["sender"]
limit = [%s]
[web]
listen = ["inet:127.0.0.1:0"]
status_on_inet = true
`, dir, limits)
	}
	path := writeConfig(t, dir, conf(`"5/60s exact"`))
	d := startDaemon(t, path)
	base := webURL(t, d)
	if verbs := drivePolicy(t, filepath.Join(dir, "policy"), "busy@example.org", 3); verbs["DUNNO"] != 3 {
		t.Fatalf("answers %v", verbs)
	}
	talker := func() string {
		st := getStatus(t, base)
		var out []string
		for _, tk := range st.Talkers {
			out = append(out, fmt.Sprintf("%s %s %d/%d per %s", tk.Rule, tk.Key, tk.Count, tk.Limit, tk.Period))
		}
		return strings.Join(out, "; ")
	}
	// The web server samples the daemon once a second: wait for a sample.
	shows := func(what, want string) {
		t.Helper()
		eventually(t, what, func() (bool, string) { got := talker(); return got == want, got })
	}
	shows("the talker before the reload", "r sender=busy@example.org 3/5 per 60s")
	if err := os.WriteFile(path, []byte(conf(`"20/60s exact"`)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := d.Reload(); err != nil {
		t.Fatal(err)
	}
	shows("the raised limit", "r sender=busy@example.org 3/20 per 60s")
	// A per-key table's entry for the key is its limit from the reload on.
	if err := os.WriteFile(filepath.Join(dir, "senders.limits"), []byte("busy@example.org 50/60s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(conf(`"20/60s exact"`), "[web]", "table = \"senders.limits\"\n[web]", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := d.Reload(); err != nil {
		t.Fatal(err)
	}
	shows("the table's limit for the key", "r sender=busy@example.org 3/50 per 60s")
	if err := os.WriteFile(path, []byte(conf(`"20/1h exact"`)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := d.Reload(); err != nil {
		t.Fatal(err)
	}
	shows("no talker once the window changed (until the key is counted again)", "")
}
