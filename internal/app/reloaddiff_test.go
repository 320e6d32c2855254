package app

import (
	"fmt"
	"testing"

	"sluice/internal/config"
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
