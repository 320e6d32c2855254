package app

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"sluice/internal/milter"
	"sluice/internal/testutil/peer"
	"sluice/internal/testutil/postfixtest"
	"sluice/internal/testutil/recipe"
	"sluice/internal/testutil/sendmailtest"
)

// Why the class-caps milter answers CONTINUE at CONNECT, not ACCEPT.
// ACCEPT would spare the END-OF-MESSAGE round trip that Postfix and
// Sendmail send for every message even when every other step is
// negotiated off; but the class slot is a lease held while the milter
// connection is open, and both MTAs close that connection as soon as the
// milter accepts at CONNECT, long before the SMTP session ends. These
// tests pin that behaviour down against the real MTAs: should a later
// version keep the connection open, they fail, and ACCEPT becomes usable
// (docs/milter.md, "Why sluice answers CONTINUE at CONNECT").

// acceptMilter answers ACCEPT at CONNECT and reports each Close.
type acceptMilter struct{ closed chan struct{} }

func (h acceptMilter) Connect(*milter.Session, string, milter.Family, uint16, string) milter.Response {
	return milter.Accept
}

func (h acceptMilter) Close(*milter.Session) { h.closed <- struct{}{} }

// startAcceptMilter serves acceptMilter on a unix socket any local user
// (postfix) may use, in a directory Sendmail accepts.
func startAcceptMilter(t *testing.T) (string, chan struct{}) {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	sock := filepath.Join(dir, "milter")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(sock, 0o666); err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{}, 16)
	srv := milter.NewServer(milter.Options{Handler: acceptMilter{closed}, Logger: testLogger(t)})
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-done; err != nil && !errors.Is(err, milter.ErrServerClosed) {
			t.Errorf("milter serve: %v", err)
		}
	})
	return sock, closed
}

// waitClosed waits for the milter session to end while the SMTP session
// that opened it is still open.
func waitClosed(t *testing.T, mta string, closed chan struct{}) {
	t.Helper()
	select {
	case <-closed:
		t.Logf("%s closed the milter connection after ACCEPT at CONNECT, with the SMTP session still open", mta)
	case <-time.After(mtaGuard):
		t.Fatalf("%s kept the milter connection open after ACCEPT at CONNECT: the class-caps milter "+
			"could answer ACCEPT and spare the END-OF-MESSAGE round trip (docs/milter.md)", mta)
	}
}

// TestPostfixClosesMilterOnConnectAccept: Postfix ends the milter
// session as soon as the milter accepts the connection.
func TestPostfixClosesMilterOnConnectAccept(t *testing.T) {
	if err := postfixtest.Available(); err != nil {
		peer.Missing(t, "a private Postfix instance", err)
	}
	sock, closed := startAcceptMilter(t)
	_, port := startPostfix(t, true, map[string]string{"smtpd_milters": "unix:" + sock, "milter_default_action": "tempfail"})
	c, r := dialSMTP(t, port)
	defer c.Close()
	if r.Code != 220 {
		t.Fatalf("greeting %v, want 220", r)
	}
	if r, err := c.Cmd("EHLO client.example"); err != nil || r.Code != 250 {
		t.Fatalf("EHLO: %v %v", r, err)
	}
	waitClosed(t, "Postfix", closed)
	if r, err := c.Cmd("NOOP"); err != nil || r.Code != 250 {
		t.Fatalf("NOOP after the milter session ended: %v %v", r, err)
	}
}

// TestSendmailClosesMilterOnConnectAccept: so does Sendmail.
func TestSendmailClosesMilterOnConnectAccept(t *testing.T) {
	if err := sendmailtest.Available(); err != nil {
		peer.Missing(t, "a private Sendmail instance", err)
	}
	sock, closed := startAcceptMilter(t)
	mc := recipe.Get(t, "docs/milter.md", "sendmail-mc")
	m := regexp.MustCompile("INPUT_MAIL_FILTER\\(`sluice', `S=unix:/run/sluice/milter, F=([^,]*), T=([^']*)'\\)").FindStringSubmatch(mc)
	if m == nil {
		t.Fatalf("docs/milter.md's sendmail.mc recipe has no INPUT_MAIL_FILTER line of the expected shape:\n%s", mc)
	}
	ctx, cancel := context.WithTimeout(context.Background(), mtaGuard)
	defer cancel()
	inst, err := sendmailtest.Prepare(ctx, sendmailtest.Options{
		Dir: t.TempDir(), MilterSocket: sock, MilterFlags: m[1], MilterTimeouts: m[2], Logf: t.Logf,
	})
	if err != nil {
		t.Fatalf("prepare sendmail: %v", err)
	}
	t.Cleanup(func() {
		if err := inst.Stop(); err != nil {
			t.Errorf("stop sendmail: %v", err)
		}
	})
	s, g := smtpSession(t, inst, "127.0.0.1")
	if g.Code != 220 {
		t.Fatalf("greeting %v, want 220", g)
	}
	smCmd(t, s, "EHLO client.example", 250)
	waitClosed(t, "Sendmail", closed)
	smCmd(t, s, "NOOP", 250)
}
