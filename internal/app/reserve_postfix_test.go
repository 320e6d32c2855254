package app

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sluice/internal/testutil/postfixtest"
)

// TestPostfixReservation: a private Postfix 3.7 with 4 smtpd processes
// (default_process_limit, read by sluice from master.cf through postconf)
// asks sluice as its anvil and its milter. The class "known" (127.0.0.2)
// reserves 2 sessions; bots from other loopback addresses hold idle
// sessions. The bots get 2 sessions and the third is refused with anvil's
// 421, so the known peer still opens its 2 while the bots hold theirs;
// each session holds one slot across both doors.
func TestPostfixReservation(t *testing.T) {
	state := t.TempDir()
	inst, port := startPostfix(t, false, map[string]string{
		"default_process_limit": "4",
		"smtpd_milters":         "unix:" + filepath.Join(state, "milter"),
		"milter_default_action": "tempfail",
	})
	body := fmt.Sprintf(`state_dir = %q
[[class]]
name = "known"
match = ["127.0.0.2"]
reserve = 2
[[class]]
name = "rest"
match = ["*"]
[anvil]
listen = ["unix:%s"]
postfix_config_dir = %q
[anvil.socket]
owner = "postfix"
mode = "0600"
[anvil.smtpd]
client_connection_count_limit = 50
[policy]
enabled = false
[throttle]
enabled = false
[milter]
listen = ["unix:milter"]
[milter.socket]
owner = "postfix"
mode = "0600"
`, state, inst.AnvilSocketPath(), inst.ConfigDir())
	d, _ := startMilterDaemon(t, state, body)
	if c := d.gov.Load().Capacity(); c.Sessions != 4 || !strings.Contains(c.From, "master.cf") {
		t.Fatalf("capacity %+v, want 4 from master.cf", c)
	}
	dial := func(from string) (*postfixtest.SMTPConn, postfixtest.Reply) {
		t.Helper()
		// A session the MTA has no process for waits unanswered: the
		// deadline fails the test instead.
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		c, r, err := postfixtest.DialSMTPFrom(ctx, port, from)
		if err != nil {
			t.Fatalf("session from %s: %v (no greeting: the MTA had no free process)", from, err)
		}
		t.Cleanup(func() { c.Close() })
		return c, r
	}
	hold := func(from string) {
		t.Helper()
		c, r := dial(from)
		if r.Code != 220 {
			t.Fatalf("session from %s: greeting %v, want 220", from, r)
		}
		if r, err := c.Cmd("EHLO client.example"); err != nil || r.Code != 250 {
			t.Fatalf("session from %s: EHLO %v %v", from, r, err)
		}
	}
	// The flood: two bots hold sessions, the third is refused.
	hold("127.0.0.10")
	hold("127.0.0.11")
	waitHeld(t, d, "rest", 2)
	c, r := dial("127.0.0.12")
	c.Close()
	if r.Code != 421 || !strings.Contains(r.Text, "too many connections") {
		t.Fatalf("third bot: greeting %v, want anvil's 421 too many connections (the other 2 sessions are reserved)", r)
	}
	waitHeld(t, d, "rest", 2)
	// The known peer opens its reservation while the bots hold theirs.
	hold("127.0.0.2")
	hold("127.0.0.2")
	waitHeld(t, d, "known", 2)
	waitHeld(t, d, "rest", 2)
	st := d.Status()
	if m := st.MTA; m == nil || m.Capacity != 4 || m.Open != 4 || m.Reserved != 2 || m.ReservedUnused != 0 || m.Free != 0 {
		t.Fatalf("status MTA %+v, want 4 open of 4, 2 reserved and used", st.MTA)
	}
	var found bool
	for _, rf := range st.Refusals {
		found = found || (rf.Rule == "reserve" && rf.Key == "rest" && rf.Door == "anvil")
	}
	if !found {
		t.Fatalf("no reserve refusal among the status's refusals: %+v", st.Refusals)
	}
}
