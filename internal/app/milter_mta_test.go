package app

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sluice/internal/testutil/peer"
	"sluice/internal/testutil/recipe"
	"strings"
	"testing"
	"time"

	"sluice/internal/testutil/postfixtest"
	"sluice/internal/testutil/sendmailtest"
)

// The milter door against real MTAs: a private Postfix (smtpd_milters) and
// Sendmail's own binary (INPUT_MAIL_FILTER), each speaking SMTP to the test
// and the milter protocol to sluice. The in-process tests in milter_test.go
// drive the engine with miltest; these check what an SMTP client sees.

// mtaGuard bounds a test's waits; it only catches a hang.
const mtaGuard = 60 * time.Second

// milterMTAConfig is sluice with only the milter door, on the unix socket
// <state>/milter, and the class loopback (127.0.0.0/8) capped at 2
// sessions. milterKeys go into [milter], after its listen line; tables
// (e.g. [[policy.rule]]) come last.
func milterMTAConfig(state, milterKeys, tables string) string {
	return fmt.Sprintf(`state_dir = %q
[[class]]
name = "loopback"
match = ["127.0.0.0/8"]
refuse = 2
[[class]]
name = "rest"
match = ["*"]
[anvil]
enabled = false
[policy]
enabled = false
[throttle]
enabled = false
[milter]
listen = ["unix:milter"]
%s
%s`, state, milterKeys, tables)
}

// startMilterDaemon starts sluice with body (see milterMTAConfig) in a
// state directory that the postfix user can traverse (Sendmail wants it
// not group- or world-writable, which t.TempDir is not) and returns the
// daemon and its milter socket.
func startMilterDaemon(t *testing.T, state, body string) (*Daemon, string) {
	t.Helper()
	for _, dir := range []string{filepath.Dir(state), state} {
		fi, err := os.Stat(dir)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, fi.Mode().Perm()|0o011); err != nil {
			t.Fatal(err)
		}
	}
	d := startDaemonLog(t, writeConfig(t, state, body), testLogger(t))
	return d, filepath.Join(state, "milter")
}

// waitMaillog polls log until one line contains every part, and returns
// that line.
func waitMaillog(t *testing.T, what string, log func() (string, error), parts ...string) string {
	t.Helper()
	deadline := time.Now().Add(mtaGuard)
	for {
		text, err := log()
		if err != nil {
			t.Fatal(err)
		}
	lines:
		for line := range strings.Lines(text) {
			for _, p := range parts {
				if !strings.Contains(line, p) {
					continue lines
				}
			}
			return strings.TrimRight(line, "\n")
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no line with %q", what, parts)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// postfixWithMilter starts sluice (see milterMTAConfig, with the socket
// owned by postfix) and a private Postfix whose smtpd asks it at every
// SMTP session, tempfailing if it cannot.
func postfixWithMilter(t *testing.T) (*postfixtest.Instance, int, *Daemon) {
	t.Helper()
	if err := postfixtest.Available(); err != nil {
		peer.Missing(t, "a private Postfix instance", err)
	}
	state := t.TempDir()
	d, sock := startMilterDaemon(t, state, milterMTAConfig(state, "[milter.socket]\nowner = \"postfix\"\nmode = \"0600\"", ""))
	inst, port := startPostfix(t, true, map[string]string{
		"smtpd_milters":         "unix:" + sock,
		"milter_default_action": "tempfail",
	})
	return inst, port, d
}

// TestPostfixMilterClassCap: with the loopback class capped at 2, two
// held SMTP sessions get through Postfix, the third gets Postfix's 421
// greeting and sluice's text reaches Postfix's log; when one session ends
// its slot is free for a new one.
func TestPostfixMilterClassCap(t *testing.T) {
	inst, port, d := postfixWithMilter(t)
	var held []*postfixtest.SMTPConn
	for i := range 2 {
		c, r := dialSMTP(t, port)
		defer c.Close()
		if r.Code != 220 {
			t.Fatalf("session %d: greeting %v, want 220", i+1, r)
		}
		if r, err := c.Cmd("EHLO client.example"); err != nil || r.Code != 250 {
			t.Fatalf("session %d: EHLO %v %v", i+1, r, err)
		}
		held = append(held, c)
	}
	waitHeld(t, d, "loopback", 2)

	c, r := dialSMTP(t, port)
	c.Close()
	if r.Code != 421 || r.Text != "sluice-test.localdomain Service unavailable - try again later" {
		t.Fatalf("third session: greeting %v, want 421 sluice-test.localdomain Service unavailable - try again later", r)
	}
	line := waitMaillog(t, "postfix maillog", inst.Log, "milter-reject: CONNECT from ",
		"[127.0.0.1]: 421 4.7.0 Too many sessions from class loopback (2/2)")
	t.Logf("postfix: %s", line)

	// The held sessions still work.
	if r, err := held[1].Cmd("NOOP"); err != nil || r.Code != 250 {
		t.Fatalf("NOOP on a held session: %v %v", r, err)
	}
	// The refused session took no slot, and a session that ends frees its
	// own: a new one gets in.
	if r, err := held[0].Cmd("QUIT"); err != nil || r.Code != 221 {
		t.Fatalf("QUIT: %v %v", r, err)
	}
	held[0].Close()
	waitHeld(t, d, "loopback", 1)
	waitGreeting(t, port, 220)
	if r, err := held[1].Cmd("NOOP"); err != nil || r.Code != 250 {
		t.Fatalf("NOOP on the other session: %v %v", r, err)
	}
	held[1].Close()
	waitHeld(t, d, "loopback", 0)
}

// TestPostfixMilterMessages: two messages in one SMTP session through
// Postfix with sluice as its milter are both delivered, and the session
// holds one class slot throughout (Postfix reuses the milter connection
// for each message), none after it.
func TestPostfixMilterMessages(t *testing.T) {
	inst, port, d := postfixWithMilter(t)
	c, r := dialSMTP(t, port)
	defer c.Close()
	if r.Code != 220 {
		t.Fatalf("greeting %v", r)
	}
	if r, err := c.Cmd("EHLO client.example"); err != nil || r.Code != 250 {
		t.Fatalf("EHLO: %v %v", r, err)
	}
	for i := range 2 {
		if err := c.SendMessage("sender@example.org", fmt.Sprintf("rcpt%d@example.net", i+1)); err != nil {
			t.Fatalf("message %d: %v", i+1, err)
		}
		waitHeld(t, d, "loopback", 1)
	}
	if r, err := c.Cmd("QUIT"); err != nil || r.Code != 221 {
		t.Fatalf("QUIT: %v %v", r, err)
	}
	c.Close()
	waitHeld(t, d, "loopback", 0)
	for i := range 2 {
		waitMaillog(t, "postfix maillog", inst.Log, "postfix/discard[",
			fmt.Sprintf("to=<rcpt%d@example.net>", i+1), "status=sent")
	}
}

// sendmailWithMilter starts sluice with body and prepares a private
// Sendmail whose milter is sluice's socket.
func sendmailWithMilter(t *testing.T, milterKeys, tables string) (*sendmailtest.Instance, *Daemon) {
	t.Helper()
	if err := sendmailtest.Available(); err != nil {
		peer.Missing(t, "a private Sendmail instance", err)
	}
	state := t.TempDir()
	d, sock := startMilterDaemon(t, state, milterMTAConfig(state, milterKeys, tables))
	ctx, cancel := context.WithTimeout(context.Background(), mtaGuard)
	defer cancel()
	// The flags and timeouts of docs/milter.md's sendmail.mc line; the
	// socket is the test's.
	mc := recipe.Get(t, "docs/milter.md", "sendmail-mc")
	m := regexp.MustCompile("INPUT_MAIL_FILTER\\(`sluice', `S=unix:/run/sluice/milter, F=([^,]*), T=([^']*)'\\)").FindStringSubmatch(mc)
	if m == nil {
		t.Fatalf("docs/milter.md's sendmail.mc recipe has no INPUT_MAIL_FILTER line of the expected shape:\n%s", mc)
	}
	inst, err := sendmailtest.Prepare(ctx, sendmailtest.Options{
		Dir:            t.TempDir(),
		MilterSocket:   sock,
		MilterFlags:    m[1],
		MilterTimeouts: m[2],
		Hosts:          map[string]string{"127.0.0.2": "client2.example"},
		Logf:           t.Logf,
	})
	if err != nil {
		t.Fatalf("prepare sendmail: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, f := range []struct {
				name string
				get  func() (string, error)
			}{{"maillog", inst.Log}, {"smtp trace", inst.Trace}, {"milter debug", inst.MilterDebug}} {
				text, _ := f.get()
				t.Logf("sendmail %s:\n%s", f.name, text)
			}
		}
		if err := inst.Stop(); err != nil {
			t.Errorf("stop sendmail: %v", err)
		}
	})
	return inst, d
}

// smtpSession starts one Sendmail SMTP session from client and reads its
// greeting.
func smtpSession(t *testing.T, inst *sendmailtest.Instance, client string) (*sendmailtest.Session, sendmailtest.Reply) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), mtaGuard)
	t.Cleanup(cancel)
	s, err := inst.SMTPSession(ctx, client)
	if err != nil {
		t.Fatalf("sendmail session from %s: %v", client, err)
	}
	t.Cleanup(func() { s.Close() })
	g, err := s.Greeting()
	if err != nil {
		t.Fatalf("sendmail session from %s: %v (stderr: %s)", client, err, s.Stderr())
	}
	return s, g
}

func smCmd(t *testing.T, s *sendmailtest.Session, line string, want int) sendmailtest.Reply {
	t.Helper()
	r, err := s.Cmd(line)
	if err != nil {
		t.Fatalf("%s: %v (stderr: %s)", line, err, s.Stderr())
	}
	if r.Code != want {
		t.Fatalf("%s: %v, want %d", line, r, want)
	}
	return r
}

// TestSendmailMilterClassCap: Sendmail admits two sessions from the
// loopback class and answers the third with its own 421 (sluice's text
// goes to its log); a message goes through an admitted session, and a
// session that ends frees its slot.
func TestSendmailMilterClassCap(t *testing.T) {
	inst, d := sendmailWithMilter(t, "", "")
	a, g := smtpSession(t, inst, "127.0.0.1")
	if g.Code != 220 {
		t.Fatalf("first session: greeting %v", g)
	}
	smCmd(t, a, "EHLO client.example", 250)
	b, g := smtpSession(t, inst, "127.0.0.2")
	if g.Code != 220 {
		t.Fatalf("second session: greeting %v", g)
	}
	smCmd(t, b, "EHLO client2.example", 250)
	waitHeld(t, d, "loopback", 2)

	c, g := smtpSession(t, inst, "127.0.0.3")
	if want := "421 4.7.0 " + sendmailtest.Hostname + " closing connection"; g.String() != want {
		t.Fatalf("third session: greeting %q, want %q", g, want)
	}
	c.Close()
	line := waitMaillog(t, "sendmail maillog", inst.Log, "milter=sluice, action=connect, reject=421 4.7.0 Too many sessions from class loopback (2/2)")
	t.Logf("sendmail: %s", line)

	// An admitted session delivers (to Sendmail's queue): sluice asked
	// for CONNECT alone, so the rest of the session costs it nothing.
	if err := b.SendMessage("sender@example.org", "rcpt@example.net"); err != nil {
		t.Fatal(err)
	}
	if entries, err := os.ReadDir(inst.QueueDir()); err != nil || len(entries) == 0 {
		t.Errorf("queue %s after an accepted message: %d entries, %v", inst.QueueDir(), len(entries), err)
	}
	waitMaillog(t, "sendmail maillog", inst.Log, "stat=queued")

	smCmd(t, a, "QUIT", 221)
	a.Close()
	waitHeld(t, d, "loopback", 1)
	e, g := smtpSession(t, inst, "127.0.0.4")
	if g.Code != 220 {
		t.Fatalf("after a session ended: greeting %v", g)
	}
	smCmd(t, e, "EHLO client4.example", 250)
	e.Close()
	b.Close()
	waitHeld(t, d, "loopback", 0)
}

// TestSendmailMilterPolicyRules: with milter.policy_rules a recipient rule
// applies at Sendmail's RCPT (Sendmail has no policy delegation): the
// third recipient from one client gets the rule's 4xx, the first two
// still get their message through.
func TestSendmailMilterPolicyRules(t *testing.T) {
	inst, _ := sendmailWithMilter(t, "policy_rules = true", `[[policy.rule]]
name = "rcpts"
count = "recipients"
stage = "RCPT"
key = ["client_address"]
limit = ["2/1h exact"]
action = "DEFER_IF_PERMIT 4.7.1 too many recipients"
`)
	s, g := smtpSession(t, inst, "127.0.0.2")
	if g.Code != 220 {
		t.Fatalf("greeting %v", g)
	}
	smCmd(t, s, "EHLO client2.example", 250)
	smCmd(t, s, "MAIL FROM:<sender@example.org>", 250)
	smCmd(t, s, "RCPT TO:<r1@example.net>", 250)
	smCmd(t, s, "RCPT TO:<r2@example.net>", 250)
	// Sendmail puts the recipient between the enhanced status code and
	// the milter's text.
	r := smCmd(t, s, "RCPT TO:<r3@example.net>", 450)
	if want := "4.7.1 <r3@example.net>... too many recipients"; r.Text != want {
		t.Errorf("third RCPT: %v, want 450 %s", r, want)
	}
	smCmd(t, s, "DATA", 354)
	for _, line := range []string{"Subject: two of three", "", "hello", "."} {
		if err := s.Send(line); err != nil {
			t.Fatal(err)
		}
	}
	if r, err := s.ReadReply(); err != nil || r.Code != 250 {
		t.Fatalf("end of DATA: %v %v", r, err)
	}
	waitMaillog(t, "sendmail maillog", inst.Log, "Milter: to=<r3@example.net>, reject=450 4.7.1 too many recipients")
	waitMaillog(t, "sendmail maillog", inst.Log, "to=<r2@example.net>,", "stat=queued")
	// The count is per client: the next transaction from the same client
	// is refused at its first recipient.
	smCmd(t, s, "MAIL FROM:<sender@example.org>", 250)
	smCmd(t, s, "RCPT TO:<r4@example.net>", 450)
	smCmd(t, s, "QUIT", 221)
}
