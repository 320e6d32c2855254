package rules_test

import (
	"strings"
	"testing"

	"sluice/internal/rules"
)

func TestParseLimit(t *testing.T) {
	good := map[string]string{
		"10/60s exact":           "10/60s exact",
		"10/60":                  "10/60s exact",
		"100/1h smooth burst=20": "100/1h smooth burst=20",
		"10/60s smooth burst=10": "10/60s smooth",
		"50/60s anvil":           "50/60s anvil",
		"5/1500ms smooth":        "5/1.5s smooth",
		"5/20m":                  "5/20m exact",
		"500/1d smooth":          "500/1d smooth",
		"500/48h":                "500/2d exact",
		"9/1440m":                "9/1d exact",
	}
	for in, want := range good {
		l, err := rules.ParseLimit(in)
		if err != nil || l.String() != want {
			t.Errorf("ParseLimit(%q) = %v, %v; want %s", in, l, err, want)
		}
	}
	bad := map[string]string{
		"":                      "empty limit",
		"10":                    "want N/PERIOD",
		"x/60s":                 `"x" is not a number`,
		"10/soon":               "is not a duration",
		"10/d":                  "is not a duration",
		"10/99999999999d":       "is not a duration",
		"10/60s fast":           `unknown algorithm "fast"`,
		"10/60s exact burst=3":  "burst applies to smooth limits only",
		"0/60s":                 "count must be between 1",
		"10/1500ms anvil":       "anvil windows are whole seconds",
		"2000000/60s exact":     "exact limits hold at most 1000000 events",
		"10/60s smooth burst=x": "burst \"x\" is not a number",
	}
	for in, want := range bad {
		if _, err := rules.ParseLimit(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseLimit(%q) error %v, want %q", in, err, want)
		}
	}
}

func TestParseCountedAndStage(t *testing.T) {
	good := []struct{ count, stage, want string }{
		{"messages", "", "END-OF-MESSAGE"},
		{"messages", "rcpt", "RCPT"},
		{"recipients", "DATA", "DATA"},
		{"bytes", "", "END-OF-MESSAGE"},
		{"bytes", "end-of-message", "END-OF-MESSAGE"},
		{"connections", "", ""},
	}
	for _, c := range good {
		n, err := rules.ParseCounted(c.count)
		if err != nil || n.String() != c.count {
			t.Errorf("ParseCounted(%q) = %v, %v", c.count, n, err)
			continue
		}
		if got, err := rules.ParseStage(n, c.stage); err != nil || got != c.want {
			t.Errorf("ParseStage(%s, %q) = %q, %v; want %q", n, c.stage, got, err, c.want)
		}
	}
	badCount := map[string]string{"": "say what the rule counts", "mails": `"mails" is not one of`, "Messages": "is not one of"}
	for in, want := range badCount {
		if _, err := rules.ParseCounted(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseCounted(%q) error %v, want %q", in, err, want)
		}
	}
	badStage := []struct {
		count rules.Counted
		stage string
		want  string
	}{
		{rules.CountMessages, "CONNECT", "are counted at RCPT, DATA or END-OF-MESSAGE"},
		{rules.CountRecipients, "eom", "are counted at RCPT"},
		{rules.CountBytes, "RCPT", "bytes are counted at END-OF-MESSAGE"},
		{rules.CountConnections, "RCPT", "stage does not apply"},
	}
	for _, c := range badStage {
		if _, err := rules.ParseStage(c.count, c.stage); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseStage(%s, %q) error %v, want %q", c.count, c.stage, err, c.want)
		}
	}
}

func TestParseMode(t *testing.T) {
	for in, want := range map[string]rules.Mode{"": rules.Leaky, "leaky": rules.Leaky, "strict": rules.Strict} {
		if m, err := rules.ParseMode(in); err != nil || m != want {
			t.Errorf("ParseMode(%q) = %v, %v; want %v", in, m, err, want)
		}
	}
	for _, in := range []string{"Strict", "lazy", " leaky"} {
		if _, err := rules.ParseMode(in); err == nil {
			t.Errorf("ParseMode(%q) accepted", in)
		}
	}
}

// FuzzParseLimit checks that a parsed limit is valid and reads back as
// itself.
func FuzzParseLimit(f *testing.F) {
	for _, s := range []string{"10/60s exact", "100/1h smooth burst=20", "50/60s anvil", "500/1d", "", "x/y z", "1/1ns smooth", "10/1 smooth burst=10"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := rules.ParseLimit(s)
		if err != nil {
			return
		}
		if err := l.Validate(); err != nil {
			t.Fatalf("ParseLimit(%q) = %v, which is invalid: %v", s, l, err)
		}
		back, err := rules.ParseLimit(l.String())
		if err != nil || back != l {
			t.Fatalf("ParseLimit(%q) = %v; its text %q reads back as %v, %v", s, l, l.String(), back, err)
		}
	})
}

// FuzzParseStage checks that an accepted stage is one a count is taken at.
func FuzzParseStage(f *testing.F) {
	for _, s := range []string{"messages", "bytes", "connections", "recipients", ""} {
		f.Add(s, "rcpt")
	}
	f.Fuzz(func(t *testing.T, count, stage string) {
		c, err := rules.ParseCounted(count)
		if err != nil {
			return
		}
		got, err := rules.ParseStage(c, stage)
		if err != nil {
			return
		}
		switch got {
		case rules.StateRcpt, rules.StateData, rules.StateEOM:
		case "":
			if c != rules.CountConnections {
				t.Fatalf("ParseStage(%s, %q) = no stage", c, stage)
			}
		default:
			t.Fatalf("ParseStage(%s, %q) = %q", c, stage, got)
		}
	})
}
