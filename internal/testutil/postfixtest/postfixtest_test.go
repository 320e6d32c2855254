package postfixtest

import (
	"bufio"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sluice/internal/testutil/peer"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// requirePostfix skips the test loudly unless a private instance can run.
func requirePostfix(t *testing.T) {
	t.Helper()
	if err := Available(); err != nil {
		peer.Missing(t, "a private Postfix instance", err)
	}
}

// startInstance starts an instance in a fresh temp dir and registers a
// cleanup that stops it and checks that nothing is left running.
func startInstance(t *testing.T, o Options) *Instance {
	t.Helper()
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	if o.Logf == nil {
		o.Logf = t.Logf
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	inst, err := Start(ctx, o)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := inst.Stop(); err != nil {
			t.Errorf("Stop: %v", err)
		}
		assertStopped(t, inst)
		if t.Failed() {
			if log, err := inst.Log(); err == nil {
				t.Logf("maillog of %s:\n%s", inst.dir, log)
			}
		}
	})
	return inst
}

// assertStopped checks, via /proc and ps(1), that no process of inst is
// left, not even a zombie: none in master's session, none with
// MAIL_CONFIG=<confdir> in its environment, none whose command line names
// the config dir.
func assertStopped(t *testing.T, inst *Instance) {
	t.Helper()
	left, err := inst.processes(true)
	if err != nil {
		t.Fatalf("list processes: %v", err)
	}
	if len(left) > 0 {
		t.Errorf("processes left after Stop: %v", left)
	}
	out, err := exec.Command("ps", "-eo", "pid,sid,stat,args").Output()
	if err != nil {
		t.Logf("ps not usable (%v); relying on /proc scan", err)
		return
	}
	sid := strconv.Itoa(inst.pid)
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if strings.Contains(line, inst.ConfigDir()) || len(f) > 1 && f[1] == sid {
			t.Errorf("ps shows a process of %s after Stop: %s", inst.ConfigDir(), line)
		}
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	p, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLayoutAndStop(t *testing.T) {
	requirePostfix(t)
	inst := startInstance(t, Options{OwnAnvil: false})

	fi, err := os.Stat(inst.PrivateDir())
	if err != nil {
		t.Fatal(err)
	}
	uid, _, err := PostfixUID()
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o700 {
		t.Errorf("private dir mode = %o, want 700", fi.Mode().Perm())
	}
	if owner := int(fi.Sys().(*syscall.Stat_t).Uid); owner != uid {
		t.Errorf("private dir owner = %d, want postfix (%d)", owner, uid)
	}
	if want := filepath.Join(inst.QueueDir(), "private", "anvil"); inst.AnvilSocketPath() != want {
		t.Errorf("AnvilSocketPath = %q, want %q", inst.AnvilSocketPath(), want)
	}
	// No own anvil: the service is not in master.cf and no socket exists.
	mcf, err := os.ReadFile(filepath.Join(inst.ConfigDir(), "master.cf"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(mcf), "anvil") {
		t.Errorf("master.cf mentions anvil with OwnAnvil=false:\n%s", mcf)
	}
	if _, err := os.Stat(inst.AnvilSocketPath()); err == nil {
		t.Errorf("%s exists although OwnAnvil=false", inst.AnvilSocketPath())
	}
	log, err := inst.Log()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log, "daemon started") {
		t.Errorf("maillog lacks master start line:\n%s", log)
	}
	// Postconf agrees about where things are.
	out, err := exec.Command("/usr/sbin/postconf", "-c", inst.ConfigDir(), "-h", "queue_directory").Output()
	if err != nil {
		t.Fatalf("postconf -c: %v", err)
	}
	if strings.TrimSpace(string(out)) != inst.QueueDir() {
		t.Errorf("postconf queue_directory = %q, want %q", out, inst.QueueDir())
	}

	if err := inst.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := inst.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	assertStopped(t, inst)
}

func TestConnectionCountLimit(t *testing.T) {
	requirePostfix(t)
	port := freePort(t)
	inst := startInstance(t, Options{
		SMTPPort: port,
		OwnAnvil: true,
		MainCF:   map[string]string{"smtpd_client_connection_count_limit": "2"},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	var open []*SMTPConn
	defer func() {
		for _, c := range open {
			_ = c.Close()
		}
	}()
	for n := 1; n <= 2; n++ {
		c, r, err := DialSMTP(ctx, port)
		if err != nil {
			t.Fatalf("session %d: %v", n, err)
		}
		open = append(open, c)
		if r.Code != 220 {
			t.Fatalf("session %d greeting = %v, want 220", n, r)
		}
		// A command round trip makes sure smtpd has registered the
		// connection with anvil before the next one arrives.
		if r, err := c.Cmd("EHLO client.example"); err != nil || r.Code != 250 {
			t.Fatalf("session %d EHLO = %v, %v", n, r, err)
		}
	}

	third, r, err := DialSMTP(ctx, port)
	if err != nil {
		t.Fatalf("session 3: %v", err)
	}
	_ = third.Close()
	if r.Code != 421 || !strings.Contains(r.Text, "too many connections") {
		t.Fatalf("session 3 greeting = %v, want 421 ... too many connections", r)
	}
	t.Logf("third session: %v", r)

	// Free a slot; the disconnect reaches anvil asynchronously, so retry.
	if err := open[0].Close(); err != nil {
		t.Fatal(err)
	}
	open = open[1:]
	var got Reply
	for {
		c, r, err := DialSMTP(ctx, port)
		if err != nil {
			t.Fatalf("session after close: %v", err)
		}
		got = r
		if r.Code == 220 {
			open = append(open, c)
			break
		}
		_ = c.Close()
		if ctx.Err() != nil {
			t.Fatalf("no 220 after closing a session; last greeting %v", got)
		}
		time.Sleep(100 * time.Millisecond)
	}

	logCtx, logCancel := context.WithTimeout(ctx, 10*time.Second)
	defer logCancel()
	if err := inst.WaitLog(logCtx, "Connection concurrency limit exceeded"); err != nil {
		t.Fatal(err)
	}
	log, _ := inst.Log()
	if !strings.Contains(log, "too many connections") && !strings.Contains(log, "Connection concurrency limit exceeded") {
		t.Errorf("maillog lacks the limit message")
	}
	for _, c := range open {
		_ = c.Close()
	}
	open = nil
	if err := inst.Stop(); err != nil {
		t.Fatal(err)
	}
	assertStopped(t, inst)
}

func TestSendMessage(t *testing.T) {
	requirePostfix(t)
	port := freePort(t)
	inst := startInstance(t, Options{SMTPPort: port, OwnAnvil: true})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	c, r, err := DialSMTP(ctx, port)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if r.Code != 220 {
		t.Fatalf("greeting = %v", r)
	}
	r, err = c.Cmd("EHLO client.example")
	if err != nil || r.Code != 250 {
		t.Fatalf("EHLO = %v, %v", r, err)
	}
	if !strings.Contains(r.Text, "\n") {
		t.Errorf("EHLO reply should be multi-line, got %q", r.Text)
	}
	if err := c.SendMessage("sender@example.com", "rcpt@example.net"); err != nil {
		t.Fatal(err)
	}
	if err := c.SendMessage("sender@example.com", "other@example.org"); err != nil {
		t.Fatalf("second message in the same session: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"to=<rcpt@example.net>", "to=<other@example.org>"} {
		if err := waitLogLine(ctx, inst, want, "relay=none", "status=sent"); err != nil {
			t.Fatal(err)
		}
	}
	if err := inst.WaitLog(ctx, "postfix/discard["); err != nil {
		t.Fatal(err)
	}

	// A rejected command is reported as an error.
	c2, _, err := DialSMTP(ctx, port)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if err := c2.SendMessage("bad address with spaces", "x@example.net"); err == nil {
		t.Error("SendMessage with a malformed sender succeeded")
	} else {
		t.Logf("malformed sender rejected as expected: %v", err)
	}
}

// waitLogLine waits until one maillog line contains all of parts.
func waitLogLine(ctx context.Context, inst *Instance, parts ...string) error {
	for {
		log, err := inst.Log()
		if err != nil {
			return err
		}
		for _, line := range strings.Split(log, "\n") {
			ok := true
			for _, p := range parts {
				ok = ok && strings.Contains(line, p)
			}
			if ok {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return &logWaitError{parts: parts, log: log}
		case <-time.After(50 * time.Millisecond):
		}
	}
}

type logWaitError struct {
	parts []string
	log   string
}

func (e *logWaitError) Error() string {
	return "no maillog line with " + strings.Join(e.parts, " + ") + "; log:\n" + e.log
}

func TestTwoInstances(t *testing.T) {
	requirePostfix(t)
	p1, p2 := freePort(t), freePort(t)
	for p2 == p1 {
		p2 = freePort(t)
	}
	a := startInstance(t, Options{SMTPPort: p1, OwnAnvil: true})
	b := startInstance(t, Options{SMTPPort: p2, OwnAnvil: true})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	for _, tc := range []struct {
		inst *Instance
		port int
	}{{a, p1}, {b, p2}} {
		c, r, err := DialSMTP(ctx, tc.port)
		if err != nil {
			t.Fatal(err)
		}
		if r.Code != 220 {
			t.Fatalf("port %d greeting = %v", tc.port, r)
		}
		if err := c.SendMessage("s@example.com", "r@example.net"); err != nil {
			t.Fatalf("port %d: %v", tc.port, err)
		}
		_ = c.Close()
		if err := tc.inst.WaitLog(ctx, "status=sent"); err != nil {
			t.Fatal(err)
		}
	}
	// Each instance logs only its own traffic.
	logA, _ := a.Log()
	logB, _ := b.Log()
	if strings.Contains(logA, b.ConfigDir()) || strings.Contains(logA, "127.0.0.1:"+strconv.Itoa(p2)) {
		t.Errorf("instance a's log mentions instance b:\n%s", logA)
	}
	if strings.Contains(logB, a.ConfigDir()) || strings.Contains(logB, "127.0.0.1:"+strconv.Itoa(p1)) {
		t.Errorf("instance b's log mentions instance a:\n%s", logB)
	}
	if a.AnvilSocketPath() == b.AnvilSocketPath() {
		t.Errorf("instances share the anvil socket %s", a.AnvilSocketPath())
	}

	if err := a.Stop(); err != nil {
		t.Fatal(err)
	}
	assertStopped(t, a)
	// b is unaffected by a's stop.
	c, r, err := DialSMTP(ctx, p2)
	if err != nil || r.Code != 220 {
		t.Fatalf("instance b after stopping a: %v, %v", r, err)
	}
	_ = c.Close()
	if err := b.Stop(); err != nil {
		t.Fatal(err)
	}
	assertStopped(t, b)
}

func TestStartFailureReportsLog(t *testing.T) {
	requirePostfix(t)
	// Occupy the port so master cannot bind it.
	port := freePort(t)
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	inst, err := Start(ctx, Options{Dir: dir, SMTPPort: port, Logf: t.Logf})
	if err == nil {
		_ = inst.Stop()
		t.Fatal("Start succeeded with the SMTP port taken")
	}
	t.Logf("Start error (expected):\n%v", err)
	if !strings.Contains(err.Error(), "start master") || !strings.Contains(err.Error(), "bind") {
		t.Errorf("error lacks context or the maillog tail: %v", err)
	}
	left, perr := findProcesses(0, "MAIL_CONFIG="+filepath.Join(dir, "etc"), false)
	if perr != nil {
		t.Fatal(perr)
	}
	if len(left) > 0 {
		t.Errorf("processes left after failed Start: %v", left)
	}
}

func TestRenderMainCFOverrides(t *testing.T) {
	b, err := renderMainCF("/d", "/d/etc", "/d/queue", "/d/data", "/d/maillog", map[string]string{
		"smtpd_client_event_limit_exceptions": "192.0.2.1",
		"anvil_rate_time_unit":                "10s",
	})
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	if strings.Count(s, "smtpd_client_event_limit_exceptions") != 1 || !strings.Contains(s, "smtpd_client_event_limit_exceptions = 192.0.2.1\n") {
		t.Errorf("override not applied in place:\n%s", s)
	}
	if !strings.Contains(s, "anvil_rate_time_unit = 10s\n") || !strings.Contains(s, "mydestination =\n") {
		t.Errorf("unexpected main.cf:\n%s", s)
	}
	if _, err := renderMainCF("/d", "/d/etc", "/d/queue", "/d/data", "/d/maillog", map[string]string{"x": "a\nb"}); err == nil {
		t.Error("newline in value accepted")
	}
}

func TestAvailableExplains(t *testing.T) {
	if err := Available(); err != nil {
		t.Logf("Available: %v", err)
		if !strings.Contains(err.Error(), "postfix not available") {
			t.Errorf("error does not say what is unavailable: %v", err)
		}
	}
}

// TestExternalAnvilSocket checks the OwnAnvil=false set-up: a server bound
// to AnvilSocketPath and chowned to postfix is what smtpd connects to. The
// fake server speaks just enough of the anvil protocol (attr_print_plain:
// "name=value\n" lines, an empty line ends a message; the server first
// announces "protocol=anvil_protocol") to let smtpd proceed, and records
// the requests.
func TestExternalAnvilSocket(t *testing.T) {
	requirePostfix(t)
	port := freePort(t)
	inst := startInstance(t, Options{SMTPPort: port, OwnAnvil: false})

	path := inst.AnvilSocketPath()
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatalf("listen %s: %v", path, err)
	}
	defer l.Close()
	uid, gid, err := PostfixUID()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(path, uid, gid); err != nil {
		t.Fatal(err)
	}
	requests := make(chan string, 100)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go fakeAnvil(c, requests)
		}
	}()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, r, err := DialSMTP(ctx, port)
	if err != nil {
		t.Fatal(err)
	}
	if r.Code != 220 {
		t.Fatalf("greeting = %v", r)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	var seen []string
	for _, want := range []string{"request=connect", "request=disconnect"} {
		for !strings.Contains(strings.Join(seen, "|"), want) {
			select {
			case req := <-requests:
				seen = append(seen, req)
			case <-ctx.Done():
				t.Fatalf("no %s from smtpd; got %q", want, seen)
			}
		}
	}
	t.Logf("anvil requests from smtpd: %q", seen)
	if !strings.Contains(seen[0], "ident=127.0.0.1:"+strconv.Itoa(port)+":127.0.0.1") {
		t.Errorf("ident is not <service>:<client address>: %q", seen[0])
	}
}

// fakeAnvil serves one anvil client connection: handshake, then one reply
// per request, always allowing.
func fakeAnvil(c net.Conn, requests chan<- string) {
	defer c.Close()
	if _, err := c.Write([]byte("protocol=anvil_protocol\n\n")); err != nil {
		return
	}
	br := bufio.NewReader(c)
	for {
		var lines []string
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			if line == "\n" {
				break
			}
			lines = append(lines, strings.TrimSuffix(line, "\n"))
		}
		req := strings.Join(lines, " ")
		requests <- req
		reply := "status=0\nrate=1\n\n"
		switch {
		case strings.Contains(req, "request=connect"):
			reply = "status=0\ncount=1\nrate=1\n\n"
		case strings.Contains(req, "request=disconnect"):
			reply = "status=0\n\n"
		}
		if _, err := c.Write([]byte(reply)); err != nil {
			return
		}
	}
}

// TestRestartSameDir checks that a Dir can be reused after Stop.
func TestRestartSameDir(t *testing.T) {
	requirePostfix(t)
	dir := t.TempDir()
	port := freePort(t)
	first := startInstance(t, Options{Dir: dir, SMTPPort: port, OwnAnvil: true})
	if err := first.Stop(); err != nil {
		t.Fatal(err)
	}
	second := startInstance(t, Options{Dir: dir, SMTPPort: port, OwnAnvil: true})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, r, err := DialSMTP(ctx, port)
	if err != nil || r.Code != 220 {
		t.Fatalf("after restart: %v, %v", r, err)
	}
	_ = c.Close()
	log, err := second.Log()
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(log, "daemon started"); n != 2 {
		t.Errorf("maillog has %d start lines, want 2", n)
	}
}
