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

// floodPostfix is a private Postfix 3.7 with procs smtpd processes
// (default_process_limit, read by sluice from master.cf through postconf)
// asking sluice, with the given [[class]] tables, as its anvil and its
// milter.
type floodPostfix struct {
	t    *testing.T
	d    *Daemon
	port int
}

func startFloodPostfix(t *testing.T, procs int, classes string) *floodPostfix {
	t.Helper()
	state := t.TempDir()
	inst, port := startPostfix(t, false, map[string]string{
		"default_process_limit": fmt.Sprint(procs),
		"smtpd_milters":         "unix:" + filepath.Join(state, "milter"),
		"milter_default_action": "tempfail",
	})
	body := fmt.Sprintf(`state_dir = %q
%s
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
`, state, classes, inst.AnvilSocketPath(), inst.ConfigDir())
	d, _ := startMilterDaemon(t, state, body)
	if c := d.gov.Load().Capacity(); c.Sessions != int64(procs) || !strings.Contains(c.From, "master.cf") {
		t.Fatalf("capacity %+v, want %d from master.cf", c, procs)
	}
	return &floodPostfix{t: t, d: d, port: port}
}

// dial opens a session from the loopback address from and reads its
// greeting; the session ends with the test.
func (f *floodPostfix) dial(from string) (*postfixtest.SMTPConn, postfixtest.Reply) {
	f.t.Helper()
	// A session the MTA has no process for waits unanswered: the
	// deadline fails the test instead.
	ctx, cancel := context.WithTimeout(f.t.Context(), 20*time.Second)
	defer cancel()
	c, r, err := postfixtest.DialSMTPFrom(ctx, f.port, from)
	if err != nil {
		f.t.Fatalf("session from %s: %v (no greeting: the MTA had no free process)", from, err)
	}
	f.t.Cleanup(func() { c.Close() })
	return c, r
}

// hold opens a session from from that must be admitted, and keeps it.
func (f *floodPostfix) hold(from string) *postfixtest.SMTPConn {
	f.t.Helper()
	c, r := f.dial(from)
	if r.Code != 220 {
		f.t.Fatalf("session from %s: greeting %v, want 220", from, r)
	}
	if r, err := c.Cmd("EHLO client.example"); err != nil || r.Code != 250 {
		f.t.Fatalf("session from %s: EHLO %v %v", from, r, err)
	}
	return c
}

// refused opens a session from from that must get anvil's 421.
func (f *floodPostfix) refused(from, why string) {
	f.t.Helper()
	c, r := f.dial(from)
	c.Close()
	if r.Code != 421 || !strings.Contains(r.Text, "too many connections") {
		f.t.Fatalf("session from %s: greeting %v, want anvil's 421 too many connections (%s)", from, r, why)
	}
}

// refusedBy reports whether the status lists a refusal at anvil by rule
// for class.
func refusedBy(d *Daemon, rule, class string) bool {
	for _, rf := range d.Status().Refusals {
		if rf.Rule == rule && rf.Key == class && rf.Door == "anvil" {
			return true
		}
	}
	return false
}

// TestPostfixReservation: with 4 smtpd processes, the class "known"
// (127.0.0.2) reserves 2 sessions; bots from other loopback networks hold
// idle sessions. The bots get 2 sessions and the third is refused with
// anvil's 421, so the known peer still opens its 2 while the bots hold
// theirs; each session holds one slot across both doors.
func TestPostfixReservation(t *testing.T) {
	f := startFloodPostfix(t, 4, `[[class]]
name = "known"
match = ["127.0.0.2"]
reserve = 2
[[class]]
name = "rest"
match = ["*"]`)
	d := f.d
	// The flood: two bots hold sessions, the third is refused. Each is
	// from a /24 of its own, so that no fair share binds.
	f.hold("127.0.1.10")
	f.hold("127.0.2.11")
	waitHeld(t, d, "rest", 2)
	f.refused("127.0.3.12", "the other 2 sessions are reserved")
	waitHeld(t, d, "rest", 2)
	// The known peer opens its reservation while the bots hold theirs.
	f.hold("127.0.0.2")
	f.hold("127.0.0.2")
	waitHeld(t, d, "known", 2)
	waitHeld(t, d, "rest", 2)
	st := d.Status()
	if m := st.MTA; m == nil || m.Capacity != 4 || m.Open != 4 || m.Reserved != 2 || m.ReservedUnused != 0 || m.Free != 0 {
		t.Fatalf("status MTA %+v, want 4 open of 4, 2 reserved and used", st.MTA)
	}
	if !refusedBy(d, "reserve", "rest") {
		t.Fatalf("no reserve refusal among the status's refusals: %+v", st.Refusals)
	}
}

// TestPostfixShare: with 10 smtpd processes and no reservation, the
// budget before shedding is 8. Bots from 4 loopback /24s hold 2 sessions
// each; their third sessions are refused with anvil's 421 (the fair share
// is 2), and a single sender from a /24 of its own still gets in. When
// two of the networks' sessions end the share relaxes and a bot's third
// session is admitted.
func TestPostfixShare(t *testing.T) {
	f := startFloodPostfix(t, 10, "[[class]]\nname = \"rest\"\nmatch = [\"*\"]")
	d := f.d
	bot := func(n, i int) string { return fmt.Sprintf("127.0.%d.%d", n, 10+i) }
	var held [5][]*postfixtest.SMTPConn
	for i := range 2 {
		for n := 1; n <= 4; n++ {
			held[n] = append(held[n], f.hold(bot(n, i)))
		}
	}
	waitHeld(t, d, "rest", 8)
	for n := 1; n <= 4; n++ {
		f.refused(bot(n, 2), "each network's fair share is 2")
	}
	waitHeld(t, d, "rest", 8)
	f.hold("127.0.9.1")
	waitHeld(t, d, "rest", 9)
	m := d.Status().MTA
	if m == nil || m.Share == nil || m.Share.Budget != 8 || m.Share.Networks != 5 || m.Share.Sessions != 9 || m.Share.PerNet != 1 || m.Share.Largest != 2 {
		t.Fatalf("status MTA %+v share %+v, want 5 networks holding 9 of a budget of 8, shedding to 1", m, m.Share)
	}
	if !refusedBy(d, "share", "rest") {
		t.Fatalf("no share refusal among the status's refusals: %+v", d.Status().Refusals)
	}
	// Relaxing: networks 1 and 2 leave; network 3 may open a third.
	for n := 1; n <= 2; n++ {
		for _, c := range held[n] {
			c.Close()
		}
	}
	waitHeld(t, d, "rest", 5)
	f.hold(bot(3, 2))
	waitHeld(t, d, "rest", 6)
}
