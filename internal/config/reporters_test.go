package config

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestReporters: report_groups absent takes the throttle socket's group;
// report_groups = [] trusts no group; report_users are kept. A policy
// that reads results with nobody to report them draws a warning, which
// report_users, report_groups or a socket group silence.
func TestReporters(t *testing.T) {
	const policy = `
[[throttle.policy]]
name = "relay"
match = ["*"]
limit = "10/1s"
ban_signs = ["too many"]
`
	cases := []struct {
		name, throttle string
		users, groups  []string
		warn           bool
	}{
		{"nothing", "", nil, nil, true},
		{"socket group", "[throttle.socket]\ngroup = \"nogroup\"\n", nil, []string{"nogroup"}, false},
		{"report_groups over the socket's", "report_groups = [\"root\"]\n[throttle.socket]\ngroup = \"nogroup\"\n", nil, []string{"root"}, false},
		{"report_groups empty", "report_groups = []\n[throttle.socket]\ngroup = \"nogroup\"\n", nil, []string{}, false},
		{"report_users", "report_users = [\"nobody\"]\n", []string{"nobody"}, nil, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := writeTree(t, map[string]string{"sluice.toml": "[throttle]\nenabled = true\n" + c.throttle + policy})
			cfg, errs := Load(filepath.Join(dir, "sluice.toml"))
			if len(errs) > 0 {
				t.Fatal(errs)
			}
			users, groups := cfg.Throttle.Reporters()
			if !slices.Equal(users, c.users) || !slices.Equal(groups, c.groups) || (c.groups != nil && groups == nil) {
				t.Errorf("reporters %q %q, want %q %q", users, groups, c.users, c.groups)
			}
			w := cfg.ReportWarning()
			if (w != "") != c.warn || c.warn && !strings.Contains(w, `throttle.policy "relay" reads send results`) {
				t.Errorf("warning %q, want one: %v", w, c.warn)
			}
		})
	}
}
