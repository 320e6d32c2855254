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

	"sluice/internal/anvil/anviltest"
	"sluice/internal/testutil/postfixtest"
)

// postfixWithSluice starts a private Postfix instance whose anvil is
// sluice: master.cf has no anvil service, and sluice binds
// <queue>/private/anvil owned by postfix, as the README's recipe says.
func postfixWithSluice(t *testing.T, mainCF map[string]string, sluiceExtra string) (*postfixtest.Instance, int, *Daemon) {
	t.Helper()
	inst, port := startPostfix(t, false, mainCF)
	state := t.TempDir()
	body := fmt.Sprintf(`state_dir = %q
%s
[anvil]
listen = ["unix:%s"]
[anvil.socket]
owner = "postfix"
mode = "0600"
[anvil.smtpd]
client_connection_count_limit = %s
client_connection_rate_limit = %s
`, state, sluiceExtra, inst.AnvilSocketPath(), orDefault(mainCF["smtpd_client_connection_count_limit"], "50"), orDefault(mainCF["smtpd_client_connection_rate_limit"], "0"))
	path := filepath.Join(state, "sluice.toml")
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return inst, port, startDaemonLog(t, path, testLogger(t))
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// testLogger logs at debug level through t.Logf.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Logf("sluice: %s", strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func dialSMTP(t *testing.T, port int) (*postfixtest.SMTPConn, postfixtest.Reply) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, r, err := postfixtest.DialSMTP(ctx, port)
	if err != nil {
		// smtpd closes after a 421; the greeting is still read.
		t.Fatalf("dial smtp: %v", err)
	}
	return c, r
}

// waitGreeting retries until a new session is greeted with code want
// (smtpd learns of a closed session asynchronously).
func waitGreeting(t *testing.T, port, want int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, r := dialSMTP(t, port)
		c.Cmd("QUIT")
		c.Close()
		if r.Code == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %d greeting within 20s; last %v", want, r)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func lookup(t *testing.T, inst *postfixtest.Instance, ident string) map[string]int64 {
	t.Helper()
	cl, err := anviltest.Dial("unix", inst.AnvilSocketPath(), false)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	got, err := cl.Do("lookup", ident)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TestPostfixConnectionCount: with smtpd_client_connection_count_limit = 2
// the third concurrent session from one address gets Postfix's 421 while
// the first two work, and closing one lets a new one in.
func TestPostfixConnectionCount(t *testing.T) {
	inst, port, _ := postfixWithSluice(t, map[string]string{"smtpd_client_connection_count_limit": "2"}, "")
	a, ra := dialSMTP(t, port)
	defer a.Close()
	b, rb := dialSMTP(t, port)
	defer b.Close()
	if ra.Code != 220 || rb.Code != 220 {
		t.Fatalf("first two sessions: %v / %v", ra, rb)
	}
	if r, err := a.Cmd("EHLO client.example"); err != nil || r.Code != 250 {
		t.Fatalf("EHLO on a held session: %v %v", r, err)
	}
	c, rc := dialSMTP(t, port)
	c.Close()
	if rc.Code != 421 || !strings.Contains(rc.Text, "too many connections") {
		t.Fatalf("third session: %v, want 421 too many connections", rc)
	}
	// The ident is "<master.cf service name>:<client>", and the service
	// here is named after its address.
	ident := fmt.Sprintf("127.0.0.1:%d:127.0.0.1", port)
	if got := lookup(t, inst, ident); got["count"] < 2 {
		t.Fatalf("sluice counts %v", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := inst.WaitLog(ctx, "Connection concurrency limit exceeded: 3 from"); err != nil {
		t.Fatalf("maillog: %v", err)
	}
	a.Cmd("QUIT")
	a.Close()
	waitGreeting(t, port, 220)
	if r, err := b.Cmd("NOOP"); err != nil || r.Code != 250 {
		t.Fatalf("second session broken: %v %v", r, err)
	}
}

// TestPostfixConnectionRate: with smtpd_client_connection_rate_limit = 3
// the fourth connection within the time unit gets 421.
func TestPostfixConnectionRate(t *testing.T) {
	inst, port, _ := postfixWithSluice(t, map[string]string{"smtpd_client_connection_rate_limit": "3"}, "")
	for i := 1; i <= 3; i++ {
		c, r := dialSMTP(t, port)
		if r.Code != 220 {
			t.Fatalf("connection %d: %v", i, r)
		}
		if r, err := c.Cmd("QUIT"); err != nil || r.Code != 221 {
			t.Fatalf("QUIT: %v %v", r, err)
		}
		c.Close()
	}
	c, r := dialSMTP(t, port)
	c.Close()
	if r.Code != 421 || !strings.Contains(r.Text, "too many connections") {
		t.Fatalf("fourth connection: %v, want 421", r)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := inst.WaitLog(ctx, "Connection rate limit exceeded: 4 from"); err != nil {
		t.Fatalf("maillog: %v", err)
	}
	if got := lookup(t, inst, fmt.Sprintf("127.0.0.1:%d:127.0.0.1", port)); got["rate"] != 4 {
		t.Fatalf("sluice rate %v, want 4", got)
	}
}

// TestPostfixClassLimit: smtpd keeps its default limit of 50, but the
// loopback class allows one session: sluice's scaled reply makes smtpd
// refuse the second, and a full class (refuse cap) refuses too.
func TestPostfixClassLimit(t *testing.T) {
	_, port, d := postfixWithSluice(t, nil, `
[[class]]
name = "loopback"
match = ["127.0.0.0/8"]
refuse = 3
[class.anvil]
client_connection_count_limit = 1

[[class]]
name = "rest"
match = ["*"]
`)
	a, ra := dialSMTP(t, port)
	defer a.Close()
	if ra.Code != 220 {
		t.Fatalf("first session: %v", ra)
	}
	b, rb := dialSMTP(t, port)
	b.Close()
	if rb.Code != 421 {
		t.Fatalf("second session in a class limited to 1: %v, want 421", rb)
	}
	a.Cmd("QUIT")
	a.Close()
	waitGreeting(t, port, 220)
	if held, _ := d.lim.Held(context.Background(), "class\x00loopback"); held > 1 {
		t.Fatalf("class holds %d sessions after all closed", held)
	}
}
