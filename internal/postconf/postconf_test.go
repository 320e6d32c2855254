package postconf

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sluice/internal/config"
	"sluice/internal/testutil/peer"
)

// TestParsePostconfMalformed: postconf's output is read line by line, and
// anything that is not "name = value" is an error naming its line.
func TestParsePostconfMalformed(t *testing.T) {
	for _, c := range []struct{ in, err string }{
		{"a = 1\nno equals\n", `line 2: "no equals" is not "name = value"`},
		{" = 3\n", "is not a parameter name"},
		{"two words = 3\n", "is not a parameter name"},
		{"a = " + strings.Repeat("9", 5000) + "\n", "token too long"},
		{strings.Repeat("p = 1\n", 2) + func() string {
			var b strings.Builder
			for i := range 70 {
				b.WriteString("p" + strings.Repeat("x", i) + " = 1\n")
			}
			return b.String()
		}(), "more parameters than asked for"},
	} {
		if _, err := parsePostconf([]byte(c.in)); err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%.40q: %v, want %q", c.in, err, c.err)
		}
	}
	m, err := parsePostconf([]byte("a = 1\nempty =\n\nb = x y\n"))
	if err != nil || m["a"] != "1" || m["empty"] != "" || m["b"] != "x y" {
		t.Fatalf("%v %v", m, err)
	}
	for in, want := range map[string]time.Duration{"60s": time.Minute, "2m": 2 * time.Minute, "90": 90 * time.Second, "1d": 24 * time.Hour, "1w": 7 * 24 * time.Hour} {
		if got, err := postfixTime(in); err != nil || got != want {
			t.Errorf("postfixTime(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "s", "-1s", "1x", "99999999999999999999w", "1.5m"} {
		if _, err := postfixTime(in); err == nil {
			t.Errorf("postfixTime(%q): no error", in)
		}
	}
	vals := map[string]string{rateUnitParam: "60s"}
	for _, n := range mainCFNames {
		vals[n.param] = "0"
	}
	vals[mainCFNames[0].param] = "fifty"
	if _, err := postfixDrift(config.Default(), vals, ""); err == nil || !strings.Contains(err.Error(), `"fifty" is not a limit`) {
		t.Errorf("a non-number: %v", err)
	}
	delete(vals, mainCFNames[0].param)
	if _, err := postfixDrift(config.Default(), vals, ""); err == nil || !strings.Contains(err.Error(), "did not report") {
		t.Errorf("a missing parameter: %v", err)
	}
}

// FuzzPostconf: no output of postconf panics the reader or the compare.
func FuzzPostconf(f *testing.F) {
	f.Add([]byte("anvil_rate_time_unit = 60s\nsmtpd_client_connection_count_limit = 50\n"))
	f.Add([]byte("smtpd_client_auth_rate_limit =\nx = 1w\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if m, err := parsePostconf(b); err == nil {
			postfixDrift(config.Default(), m, "")
		}
	})
}

// TestPostfixDriftFromPostconf: Debian's postconf reads a main.cf where
// smtpd_client_connection_count_limit is 30 and the message rate is
// $name-expanded; the default [anvil.smtpd] (50, 0) drifts on both, and
// the warnings name the key and the value to set.
func TestPostfixDriftFromPostconf(t *testing.T) {
	if _, err := os.Stat("/usr/sbin/postconf"); err != nil {
		peer.Missing(t, "Postfix's postconf", err)
	}
	dir := t.TempDir()
	main := "smtpd_client_connection_count_limit = 30\nlimit = 7\nsmtpd_client_message_rate_limit = $limit\n"
	if err := os.WriteFile(filepath.Join(dir, "main.cf"), []byte(main), 0o644); err != nil {
		t.Fatal(err)
	}
	warns, err := Drift(t.Context(), config.Default(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(warns) != 2 || !strings.Contains(warns[0], "anvil.smtpd.client_connection_count_limit is 50 but "+dir+"/main.cf has smtpd_client_connection_count_limit = 30") ||
		!strings.Contains(warns[0], "set anvil.smtpd.client_connection_count_limit = 30") ||
		!strings.Contains(warns[1], "client_message_rate_limit is 0 but") {
		t.Fatalf("warnings:\n%s", strings.Join(warns, "\n"))
	}
	cfg := config.Default()
	n30, n7 := int64(30), int64(7)
	cfg.Anvil.SMTPD.ConnectionCount, cfg.Anvil.SMTPD.MessageRate = &n30, &n7
	if warns, err := Drift(t.Context(), cfg, dir); err != nil || len(warns) != 0 {
		t.Fatalf("matching limits: %v %v", warns, err)
	}
	if _, err := Drift(t.Context(), cfg, filepath.Join(dir, "nowhere")); err == nil || !strings.Contains(err.Error(), "main.cf") {
		t.Fatalf("no main.cf: %v", err)
	}
}
