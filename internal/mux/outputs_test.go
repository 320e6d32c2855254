package mux_test

import (
	"bufio"
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"sluice/internal/testutil/logbuf"
	"sluice/internal/testutil/peer"

	"sluice/internal/mux"
	"sluice/internal/pool"
)

func startNotifier(t *testing.T) (*mux.Notifier, string) {
	t.Helper()
	n := mux.NewNotifier(slog.New(slog.NewTextHandler(&logbuf.Buffer{}, nil)), 10*time.Second)
	return n, serveNotifier(t, n)
}

// serveNotifier serves n on a fresh socket, closed at the test's end, and
// returns the socket's path.
func serveNotifier(t *testing.T, n *mux.Notifier) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- n.Serve(ln) }()
	t.Cleanup(func() {
		n.Close()
		<-done
	})
	return path
}

type client struct {
	c net.Conn
	r *bufio.Reader
}

func dialNotifier(t *testing.T, path string) *client {
	t.Helper()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &client{c, bufio.NewReader(c)}
}

func (c *client) line(t *testing.T) string {
	t.Helper()
	_ = c.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	l, err := c.r.ReadString('\n')
	if err != nil {
		t.Fatalf("read: %v (got %q)", err, l)
	}
	return l
}

// notifyUntil sends msg until the listener's subscription is in effect
// (the "?" line is read asynchronously) and returns the first line seen.
func notifyUntil(t *testing.T, n *mux.Notifier, c *client, msg string) string {
	t.Helper()
	lines := make(chan string, 1)
	go func() {
		_ = c.c.SetReadDeadline(time.Now().Add(10 * time.Second))
		l, _ := c.r.ReadString('\n')
		lines <- l
	}()
	for {
		n.Notify(msg)
		select {
		case l := <-lines:
			return l
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// docs/protocols/mimedefang-multiplexor.md, "Notifications": "*OK" banner, nothing before a "?" line, the "?" letters (or '*')
// select types and each "?" line replaces the last, at most five
// listeners and "*ERR No free listening slots" for a sixth.
func TestNotifierListenersAndSubscriptions(t *testing.T) {
	n, path := startNotifier(t)
	a := dialNotifier(t, path)
	if l := a.line(t); l != "*OK\n" {
		t.Fatalf("banner %q", l)
	}
	n.Notify("F 3") // not subscribed: dropped
	_, _ = a.c.Write([]byte("?FZ\n"))
	if l := notifyUntil(t, n, a, "Z"); l != "Z\n" {
		t.Fatalf("got %q", l)
	}
	n.Notify("R")
	n.Notify("S 0 StateChange Idle -> Busy")
	n.Notify("F 2")
	if l := a.line(t); l != "Z\n" && l != "F 2\n" {
		t.Fatalf("got %q, want F 2 (or a late Z)", l)
	}
	_, _ = a.c.Write([]byte("?*\n"))
	if l := notifyUntil(t, n, a, "R"); l != "R\n" && l != "Z\n" && l != "F 2\n" {
		t.Fatalf("got %q", l)
	}
	// Four more listeners fit; the sixth is refused.
	for range 4 {
		if l := dialNotifier(t, path).line(t); l != "*OK\n" {
			t.Fatalf("banner %q", l)
		}
	}
	sixth := dialNotifier(t, path)
	if l := sixth.line(t); l != "*ERR No free listening slots\n" {
		t.Fatalf("sixth: %q", l)
	}
	if _, err := sixth.r.ReadString('\n'); err == nil {
		t.Fatal("the sixth listener was not closed")
	}
	// A listener that leaves frees its slot.
	a.c.Close()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		c := dialNotifier(t, path)
		if c.line(t) == "*OK\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("slot never freed")
		}
	}
}

// A listener that never reads does not hold up Notify (the pool's owner
// goroutine calls it): messages are batched, then dropped.
func TestNotifierSlowListener(t *testing.T) {
	n, path := startNotifier(t)
	c := dialNotifier(t, path)
	c.line(t)
	_, _ = c.c.Write([]byte("?S\n"))
	notifyUntil(t, n, c, "S 0 x")
	done := make(chan struct{})
	go func() {
		defer close(done)
		big := "S 0 " + strings.Repeat("x", 200)
		for range 100000 {
			n.Notify(big)
		}
	}()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("Notify blocked on a listener that does not read")
	}
}

// docs/protocols/mimedefang-multiplexor.md, "Stats file": the line format (day/month/year, epoch.ms, counts after the event,
// the reason with its newline kept).
func TestStatsLineFormat(t *testing.T) {
	loc := time.UTC
	at := time.Date(2026, 11, 21, 22, 38, 26, 135_900_000, loc)
	got := mux.FormatStatsLine(pool.StatsEvent{Time: at, Event: "StartFilter", Worker: 1, Running: 2, Busy: 1}, loc)
	if want := "21/11/2026:22:38:26 1795300706.135 StartFilter worker=1 nworkers=2 nbusy=1"; got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	got = mux.FormatStatsLine(pool.StatsEvent{Time: at, Event: "StartWorker", Worker: 0, Running: 1,
		Extra: `reason="About to execute command 'hello` + "\n" + `'"`}, loc)
	if want := "21/11/2026:22:38:26 1795300706.135 StartWorker worker=0 nworkers=1 nbusy=0 reason=\"About to execute command 'hello\n'\""; got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	long := mux.FormatStatsLine(pool.StatsEvent{Time: at, Event: "KillWorker", Extra: strings.Repeat("r", 2000)}, loc)
	if len(long) != 1023 {
		t.Errorf("a long line is %d bytes, want 1023", len(long))
	}
}

// A full disk (/dev/full: every write fails with ENOSPC) is logged once,
// never blocks or crashes, and -T still gets every line.
func TestStatsDiskFull(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		peer.Missing(t, "/dev/full", err)
	}
	var logs logbuf.Buffer
	var mu sync.Mutex
	var syslogged []string
	s := mux.OpenStats(mux.StatsOptions{Path: "/dev/full", Flush: true,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		Syslog: func(m string) { mu.Lock(); syslogged = append(syslogged, m); mu.Unlock() }})
	for i := range 50 {
		s.Event(pool.StatsEvent{Time: time.Now(), Event: "EndFilter", Worker: i, Extra: "numRequests=1"})
	}
	s.Reopen()
	s.Event(pool.StatsEvent{Time: time.Now(), Event: "ReapWorker"})
	s.Close()
	if n := strings.Count(logs.String(), "No space left on device"); n != 2 {
		// Once before the reopen, once after it (a new run of failures
		// needs a success in between: the first failure after reopening
		// is still the same run, so it is 1 or 2 depending on flushing).
		if n != 1 {
			t.Errorf("%d error lines:\n%s", n, logs.String())
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(syslogged) != 51 || !regexp.MustCompile(`^stats \d+\.\d{3} EndFilter worker=0 nworkers=0 nbusy=0 numRequests=1$`).MatchString(syslogged[0]) {
		t.Errorf("syslog got %d lines, first %q", len(syslogged), syslogged[0])
	}
}

// TestStatsSyslogInEventOrder: with -T the stats line reaches syslog
// before Event returns, on the caller (the pool's owner), so that it
// comes in the order of the pool's own log lines, as the reference
// writes them (EndFilter before the next command's Scheduling line:
// TestMuxSyslogVsReference), not whenever the file's writer gets to it.
func TestStatsSyslogInEventOrder(t *testing.T) {
	var syslogged []string
	s := mux.OpenStats(mux.StatsOptions{Path: filepath.Join(t.TempDir(), "stats"),
		Syslog: func(m string) { syslogged = append(syslogged, m) }})
	defer s.Close()
	for i := range 3 {
		s.Event(pool.StatsEvent{Time: time.Now(), Event: "EndFilter", Worker: i})
		if len(syslogged) != i+1 {
			t.Fatalf("after event %d, %d syslog lines, want %d", i, len(syslogged), i+1)
		}
	}
}

// `autoscale` is the multiplexor's own command with or without -k, in
// 3.7.1's format (md-mx-ctrl(8), "autoscale"): the fake worker, which
// echoes what it is sent, never sees it.
func TestAutoscaleCommand(t *testing.T) {
	for _, on := range []bool{true, false} {
		p, err := pool.New(pool.Config{
			Program: fakeWorker, Args: []string{"-server"}, Dir: t.TempDir(),
			MinWorkers: 1, MaxWorkers: 1, IdleTime: time.Hour, BusyTimeout: 10 * time.Second,
			CmdTimeout: 10 * time.Second, SlewTime: time.Second, QueueTimeout: time.Second,
			Autoscale: on,
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- p.Run(ctx) }()
		srv := mux.New(mux.Options{Pool: p})
		got := srv.Handle(ctx, "autoscale", true)
		want := "enabled=0 interval=15 ema_busy=0.0000 scale_out=0.80 scale_in=0.30 out_cool=5 in_cool=30 ema_alpha=0.2500\n"
		if on {
			want = "enabled=1 interval=15 ema_busy=0.0000 scale_out=0.80 scale_in=0.30 out_cool=5 in_cool=30 ema_alpha=0.2500\n"
		}
		if got != want {
			t.Errorf("-k %v: %q, want %q", on, got, want)
		}
		if got := srv.Handle(ctx, "autoscale", false); got != mux.ReplyPrivileged {
			t.Errorf("restricted: %q", got)
		}
		srv.Close()
		cancel()
		<-done
	}
}

// -d: every event the pool's loop handles is one "SSS.mmm <event>" line.
func TestEventLog(t *testing.T) {
	var b logbuf.Buffer
	p, err := pool.New(pool.Config{
		Program: fakeWorker, Args: []string{"-server"}, Dir: t.TempDir(),
		MinWorkers: 1, MaxWorkers: 1, IdleTime: time.Hour, BusyTimeout: 10 * time.Second,
		CmdTimeout: 10 * time.Second, SlewTime: time.Second, QueueTimeout: time.Second,
		EventLog: slog.New(mux.NewEventLogHandler(&b)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	if r := p.Do(ctx, pool.Request{Line: "hello"}); string(r.Reply) != "echo \"hello\"\n" {
		t.Errorf("reply %q %v", r.Reply, r.Err)
	}
	cancel()
	<-done
	re := regexp.MustCompile(`^\d{3}\.\d{3} `)
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	for _, l := range lines {
		if !re.MatchString(l) {
			t.Errorf("line %q", l)
		}
	}
	for _, want := range []string{"worker=0 Stopped -> Idle", `dispatch worker=0 pid=`, "reply worker=0 bytes=13"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("no %q in:\n%s", want, b.String())
		}
	}
}
