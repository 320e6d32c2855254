package postconf

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sluice/internal/config"
	"sluice/internal/testutil/peer"
)

// TestSmtpdCapacity reads postconf -F's answers: smtpd services add up,
// "-" is default_process_limit, postscreen's smtpd pass service counts
// and postscreen itself does not; malformed answers are refused.
func TestSmtpdCapacity(t *testing.T) {
	def := []byte("default_process_limit = 100\n")
	cases := []struct {
		name, fields string
		def          []byte
		want         int64
		err          string
	}{
		{"one smtp service at the default", "smtp/inet/command = smtpd\nsmtp/inet/process_limit = -\n", def, 100, ""},
		{"postscreen in front of smtpd", "smtp/inet/command = postscreen\nsmtp/inet/process_limit = 1\nsmtpd/pass/command = smtpd\nsmtpd/pass/process_limit = 50\n", def, 50, ""},
		{"smtp and submission", "smtp/inet/command = smtpd\nsmtp/inet/process_limit = 50\nsubmission/inet/command = smtpd -o syslog_name=postfix/submission\nsubmission/inet/process_limit = 20\n", def, 70, ""},
		{"no smtpd", "smtp/inet/command = postscreen\nsmtp/inet/process_limit = 1\n", def, 0, "no smtpd service"},
		{"unlimited smtpd", "smtp/inet/command = smtpd\nsmtp/inet/process_limit = 0\n", def, 0, "without a process limit"},
		{"not a number", "smtp/inet/command = smtpd\nsmtp/inet/process_limit = x\n", def, 0, "not a process limit"},
		{"negative", "smtp/inet/command = smtpd\nsmtp/inet/process_limit = -3\n", def, 0, "not a process limit"},
		{"huge", "smtp/inet/command = smtpd\nsmtp/inet/process_limit = 99999999999\n", def, 0, "not a process limit"},
		{"bad default", "smtp/inet/command = smtpd\nsmtp/inet/process_limit = -\n", []byte("default_process_limit = many\n"), 0, "default_process_limit"},
		{"no default", "smtp/inet/command = smtpd\nsmtp/inet/process_limit = -\n", []byte(""), 0, "default_process_limit"},
		{"a field without its pair", "smtp/inet/command = smtpd\n", def, 0, "lacks"},
		{"a field not asked for", "smtp/inet/chroot = n\n", def, 0, "not asked for"},
		{"no service/type", "command = smtpd\n", def, 0, "not service/type/field"},
		{"no type", "smtp/command = smtpd\n", def, 0, "not service/type/field"},
		{"not name = value", "smtp/inet/command smtpd\n", def, 0, "not \"name = value\""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := smtpdCapacity([]byte(c.fields), c.def, "/etc/postfix")
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err %v, want one with %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Sessions != c.want || !strings.HasPrefix(got.From, "/etc/postfix/master.cf") {
				t.Fatalf("capacity %+v, want %d from master.cf", got, c.want)
			}
		})
	}
}

// FuzzMasterFields: no answer of postconf -F panics the reader, and what
// it accepts has a command and a limit per service.
func FuzzMasterFields(f *testing.F) {
	f.Add([]byte("smtp/inet/command = smtpd\nsmtp/inet/process_limit = -\n"))
	f.Add([]byte("smtpd/pass/command = smtpd -o x=y\nsmtpd/pass/process_limit = 50\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		svcs, err := parseMasterFields(b)
		if err != nil {
			return
		}
		for name, s := range svcs {
			if s.command == "" || s.limit == "" {
				t.Fatalf("service %s accepted without its command or limit: %+v", name, s)
			}
		}
		smtpdCapacity(b, []byte("default_process_limit = 100\n"), "/x")
	})
}

// TestMTACapacityFromPostconf: Debian's postconf reads a master.cf with
// postscreen in front of an smtpd pass service of 40 processes and a
// submission service at default_process_limit (77); [mta] sessions, when
// set, wins.
func TestMTACapacityFromPostconf(t *testing.T) {
	if _, err := os.Stat("/usr/sbin/postconf"); err != nil {
		peer.Missing(t, "Postfix's postconf", err)
	}
	dir := t.TempDir()
	files := map[string]string{
		"main.cf": "default_process_limit = 77\n",
		"master.cf": "smtp inet n - y - 1 postscreen\nsmtpd pass - - y - 40 smtpd\n" +
			"submission inet n - y - - smtpd\n  -o syslog_name=postfix/submission\ncleanup unix n - n - 0 cleanup\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg := config.Default()
	cfg.Anvil.PostfixConfigDir = dir
	c, err := MTACapacity(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if c.Sessions != 117 || !strings.Contains(c.From, "smtpd/pass 40") || !strings.Contains(c.From, "submission/inet 77") {
		t.Fatalf("capacity %+v, want 117 = smtpd/pass 40 + submission/inet 77", c)
	}
	cfg.MTA.Sessions = 30
	if c, err := MTACapacity(t.Context(), cfg); err != nil || c.Sessions != 30 || c.From != "mta.sessions" {
		t.Fatalf("[mta] sessions = 30: %+v, %v", c, err)
	}
}
