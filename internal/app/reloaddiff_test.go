package app

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sluice/internal/config"
	"sluice/internal/testutil/logbuf"
)

func TestRuleChanges(t *testing.T) {
	dir := t.TempDir()
	old := mustLoad(t, dir, `
[[class]]
name = "local"
match = ["127.0.0.0/8"]
refuse = 4
[class.anvil]
client_connection_count_limit = 10
[[class]]
name = "gone"
match = ["192.0.2.0/24"]
[[class]]
name = "rest"
match = ["*"]
[[policy.rule]]
name = "sender-rate"
count = "messages"
key = ["sender"]
limit = ["10/60s exact"]
`)
	cur := mustLoad(t, dir, `
[[class]]
name = "local"
match = ["127.0.0.0/8", "::1"]
refuse = 8
[class.anvil]
client_connection_count_limit = 20
[[class]]
name = "new"
match = ["198.51.100.0/24"]
[[class]]
name = "rest"
match = ["*"]
[[policy.rule]]
name = "sender-rate"
count = "messages"
key = ["sender"]
limit = ["20/60s exact"]
`)
	var got []string
	for _, c := range ruleChanges(old, cur) {
		got = append(got, fmt.Sprintf("%s %s %s: %s -> %s", c.table, c.name, c.setting, c.old, c.cur))
	}
	want := []string{
		`class local match: ["127.0.0.0/8"] -> ["127.0.0.0/8", "::1"]`,
		`class local refuse: 4 -> 8`,
		`class local anvil.client_connection_count_limit: 10 -> 20`,
		`class new :  -> `,
		`class gone : removed -> `,
		`policy.rule sender-rate limit: ["10/60s exact"] -> ["20/60s exact"]`,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("changes:\n%q\nwant\n%q", got, want)
	}
	if n := len(ruleChanges(cur, cur)); n != 0 {
		t.Errorf("%d changes between a configuration and itself", n)
	}
}

func mustLoad(t *testing.T, dir, text string) *config.Config {
	t.Helper()
	path := writeConfig(t, dir, fmt.Sprintf("state_dir = %q\n", dir)+text)
	c, errs := config.Load(path)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	return c
}

// TestReloadTable: a reload reads a rule's table again although the
// config file is unchanged, logs one line with how many entries changed,
// and puts the new entries in force; a table with a bad line keeps the
// running rules (and their table) and names the file and line.
func TestReloadTable(t *testing.T) {
	dir := t.TempDir()
	table := filepath.Join(dir, "senders.limits")
	writeTable := func(text string) {
		t.Helper()
		if err := os.WriteFile(table, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeTable("a@example.com 20/60s\nb@example.com exempt\nc@example.com 5/60s\n")
	path := writeConfig(t, dir, fmt.Sprintf(`state_dir = %q
[anvil]
enabled = false
[[policy.rule]]
name = "sender-rate"
count = "messages"
key = ["sender"]
limit = ["10/60s exact"]
table = "senders.limits"
`, dir))
	logs := &logbuf.Buffer{}
	d := startDaemonLog(t, path, slog.New(slog.NewTextHandler(logs, nil)))
	limitOf := func(sender string) string {
		g := d.gov.Load()
		eff := g.EffectiveLimits(&g.Policy().Rules[0], "sender="+sender)
		return fmt.Sprintf("%v%v %s", eff.Limits, eff.Exempt, eff.Source)
	}
	if got := limitOf("a@example.com"); got != "[20/60s exact]false "+table+":1" {
		t.Fatalf("before: %s", got)
	}
	writeTable("a@example.com 30/60s\nc@example.com 5/60s\nd@example.com exempt\n")
	if err := d.Reload(); err != nil {
		t.Fatal(err)
	}
	want := `msg="reload: policy.rule table changed" name=sender-rate table=` + table + ` entries=3 entries_changed=3 added=1 removed=1 changed=1`
	if !strings.Contains(logs.String(), want) {
		t.Errorf("log:\n%s\nwant a line with %s", logs.String(), want)
	}
	if strings.Contains(logs.String(), "reload: policy.rule changed") {
		t.Errorf("a table change was logged as a change of the rule's settings:\n%s", logs.String())
	}
	if got := limitOf("a@example.com"); got != "[30/60s exact]false "+table+":1" {
		t.Errorf("after the reload: %s", got)
	}
	writeTable("a@example.com 40/60s\nd@example.com forever\n")
	err := d.Reload()
	if err == nil || !strings.Contains(err.Error(), "policy.rule[1].table: "+table+`:2: limit "forever"`) {
		t.Fatalf("reload of a bad table: %v", err)
	}
	if got := limitOf("a@example.com"); got != "[30/60s exact]false "+table+":1" {
		t.Errorf("after a failed reload: %s, want the running table's", got)
	}
}

// TestWatchReloadsTable: a rule's table next to the config file is
// watched as the config file is: writing it reloads, and the new entry is
// in force.
func TestWatchReloadsTable(t *testing.T) {
	dir := t.TempDir()
	table := filepath.Join(dir, "senders.limits")
	if err := os.WriteFile(table, []byte("a@example.com 20/60s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	path := writeConfig(t, dir, fmt.Sprintf("state_dir = %q\n[anvil]\nenabled = false\n[[policy.rule]]\nname = \"r\"\ncount = \"messages\"\nkey = [\"sender\"]\nlimit = [\"10/60s\"]\ntable = \"senders.limits\"\n", dir))
	d := startDaemon(t, path)
	ctx, cancel := context.WithCancel(context.Background())
	reloaded := make(chan struct{}, 16)
	done := make(chan error, 1)
	go func() {
		done <- d.Watch(ctx, time.Millisecond, func() {
			if err := d.Reload(); err != nil {
				t.Error(err)
			}
			reloaded <- struct{}{}
		})
	}()
	defer func() { cancel(); <-done }()
	// Until the watch is armed a write goes unseen: write until a reload
	// comes (each write is the same, so any reload reads the new table).
	for i := 0; ; i++ {
		if err := os.WriteFile(table, []byte("a@example.com 30/60s\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		timer := time.NewTimer(100 * time.Millisecond)
		select {
		case <-reloaded:
			timer.Stop()
		case <-timer.C:
			if i > 100 {
				t.Fatal("writing the table never reloaded")
			}
			continue
		}
		break
	}
	g := d.gov.Load()
	if eff := g.EffectiveLimits(&g.Policy().Rules[0], "sender=a@example.com"); fmt.Sprint(eff.Limits) != "[30/60s exact]" {
		t.Errorf("after the watch's reload: %v", eff.Limits)
	}
}

// TestWatchReloadsIncludeDir: a file of include_dir, added, written or
// removed, reloads as the main file does, and so does a rule's table in
// a directory of its own.
func TestWatchReloadsIncludeDir(t *testing.T) {
	dir := t.TempDir()
	for _, sub := range []string{"conf.d", "tables"} {
		if err := os.Mkdir(filepath.Join(dir, sub), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	table := filepath.Join(dir, "tables", "senders.limits")
	if err := os.WriteFile(table, []byte("a@example.com 20/60s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	path := writeConfig(t, dir, fmt.Sprintf("state_dir = %q\ninclude_dir = \"conf.d\"\n[[class]]\nname = \"everyone\"\nmatch = [\"*\"]\n[anvil]\nenabled = false\n[[policy.rule]]\nname = \"r\"\ncount = \"messages\"\nkey = [\"sender\"]\nlimit = [\"10/60s\"]\ntable = \"tables/senders.limits\"\n", dir))
	d := startDaemon(t, path)
	ctx, cancel := context.WithCancel(context.Background())
	reloaded := make(chan struct{}, 16)
	done := make(chan error, 1)
	go func() {
		done <- d.Watch(ctx, time.Millisecond, func() {
			if err := d.Reload(); err != nil {
				t.Log(err)
			}
			reloaded <- struct{}{}
		})
	}()
	defer func() { cancel(); <-done }()
	// change repeats an edit until a reload comes and cond holds (until
	// the watch is armed an edit goes unseen).
	change := func(what string, edit func(), cond func() bool) {
		t.Helper()
		for i := 0; ; i++ {
			edit()
			timer := time.NewTimer(100 * time.Millisecond)
			select {
			case <-reloaded:
				timer.Stop()
				if cond() {
					return
				}
			case <-timer.C:
			}
			if i > 100 {
				t.Fatalf("%s never reloaded", what)
			}
		}
	}
	hasClass := func(name string) bool {
		for _, c := range d.gov.Load().Classes().All() {
			if c.Name == name {
				return true
			}
		}
		return false
	}
	added := filepath.Join(dir, "conf.d", "10-partner.toml")
	change("a new conf.d file", func() {
		if err := os.WriteFile(added, []byte("[[class]]\nname = \"partner\"\nmatch = [\"192.0.2.0/24\"]\nrefuse = 5\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}, func() bool { return hasClass("partner") })
	change("removing the conf.d file", func() {
		if err := os.Remove(added); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}, func() bool { return !hasClass("partner") })
	change("the table in its own directory", func() {
		if err := os.WriteFile(table, []byte("a@example.com 30/60s\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}, func() bool {
		g := d.gov.Load()
		return fmt.Sprint(g.EffectiveLimits(&g.Policy().Rules[0], "sender=a@example.com").Limits) == "[30/60s exact]"
	})
}
