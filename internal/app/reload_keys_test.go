package app

import (
	"log/slog"
	"regexp"
	"strings"
	"testing"

	"sluice/internal/testutil/logbuf"
)

// reloadBase is a configuration with every door on, for
// TestReloadReportsChangedKeysOnly.
const reloadBase = `
state_dir = "DIR"
[log]
max_lines_per_second = 100
[anvil]
listen = ["unix:anvil"]
max_conns = 100
allow_users = ["root"]
[policy]
listen = ["unix:policy"]
max_conns_per_peer = 10
[throttle]
listen = ["unix:throttle"]
max_conns_unlisted = 7
report_groups = []
[[throttle.policy]]
name = "relay"
match = ["*"]
limit = "10/1m"
[milter]
listen = ["unix:milter"]
max_sessions = 64
refuse_text = "421 4.7.0 busy"
`

// reloadReports are the settings a reload's log lines name: those that
// need a restart, and the rules' settings that changed.
var reloadReports = regexp.MustCompile(`msg="reload: ([^"]*)".* (?:setting=|name=\S+ setting=)(\S+)`)

// TestReloadReportsChangedKeysOnly: a reload of an unchanged file names
// no setting, and a reload that changes one key names exactly that key,
// whether it needs a restart or is a rule's (issue 41: an unchanged
// throttle.listen was reported).
func TestReloadReportsChangedKeysOnly(t *testing.T) {
	for _, c := range []struct{ old, cur, want string }{
		{"", "", ""},
		{`listen = ["unix:throttle"]`, `listen = ["unix:throttle2"]`, "throttle.listen"},
		{`listen = ["unix:anvil"]`, `listen = ["unix:anvil", "inet:127.0.0.1:0"]`, "anvil.listen"},
		{"max_conns = 100", "max_conns = 101", "anvil.max_conns"},
		{`allow_users = ["root"]`, `allow_users = []`, "anvil.allow_users"},
		{"max_conns_per_peer = 10", "max_conns_per_peer = 11", "policy.max_conns_per_peer"},
		{"max_conns_unlisted = 7", "max_conns_unlisted = 8", "throttle.max_conns_unlisted"},
		{"report_groups = []", "report_groups = [\"root\"]", "throttle.report_groups"},
		{"max_sessions = 64", "max_sessions = 65", "milter.max_sessions"},
		{"max_lines_per_second = 100", "max_lines_per_second = 101", "log.max_lines_per_second"},
		{`limit = "10/1m"`, `limit = "11/1m"`, "limit"},
		{`refuse_text = "421 4.7.0 busy"`, `refuse_text = "421 4.7.0 full"`, ""}, // applied by the reload, in silence
	} {
		name := c.want
		if c.old == "" {
			name = "unchanged"
		}
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			base := strings.ReplaceAll(reloadBase, "DIR", dir)
			if !strings.Contains(base, c.old) {
				t.Fatalf("the base has no %q", c.old)
			}
			path := writeConfig(t, dir, base)
			logs := &logbuf.Buffer{}
			d := startDaemonLog(t, path, slog.New(slog.NewTextHandler(logs, nil)))
			if err := d.Reload(); err != nil {
				t.Fatal(err)
			}
			if got := reported(logs.String()); len(got) != 0 {
				t.Fatalf("a reload of the unchanged file reports %q:\n%s", got, logs)
			}
			if c.old == "" {
				return
			}
			before := len(logs.String())
			writeConfig(t, dir, strings.Replace(base, c.old, c.cur, 1))
			if err := d.Reload(); err != nil {
				t.Fatal(err)
			}
			got := reported(logs.String()[before:])
			want := []string{}
			if c.want != "" {
				want = []string{c.want}
			}
			if strings.Join(got, " ") != strings.Join(want, " ") {
				t.Fatalf("changing %s: the reload reports %q, want %q:\n%s", c.old, got, want, logs)
			}
		})
	}
}

func reported(log string) []string {
	out := []string{}
	for _, m := range reloadReports.FindAllStringSubmatch(log, -1) {
		out = append(out, m[2])
	}
	return out
}
