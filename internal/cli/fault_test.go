package cli

// Fault tests against the real binary under load: killed with SIGKILL and
// restarted (stale sockets must not block the restart, clients recover by
// themselves), and SIGTERM while clients are busy (the daemon drains and
// exits in bounded time, no client sees a torn reply). docs/reliability.md
// records the figures.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"sluice/internal/testutil/peer"

	"sluice/internal/anvil/anviltest"
)

// relLoad is a set of clients hammering a daemon's policy and anvil
// doors over persistent connections, reconnecting whenever a connection
// fails.
type relLoad struct {
	ok, errs, torn atomic.Int64
	lastOK         []atomic.Int64 // per client: when it last got an answer (UnixNano)
	cancel         context.CancelFunc
	wg             sync.WaitGroup
}

func startRelLoad(t *testing.T, dir string, policyClients, anvilClients int) *relLoad {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	l := &relLoad{cancel: cancel, lastOK: make([]atomic.Int64, policyClients+anvilClients)}
	for i := range policyClients {
		l.wg.Add(1)
		go func() { defer l.wg.Done(); l.policyClient(ctx, filepath.Join(dir, "policy"), i) }()
	}
	for i := range anvilClients {
		l.wg.Add(1)
		go func() { defer l.wg.Done(); l.anvilClient(ctx, filepath.Join(dir, "anvil"), policyClients+i) }()
	}
	t.Cleanup(l.stop)
	return l
}

func (l *relLoad) stop() { l.cancel(); l.wg.Wait() }

func (l *relLoad) failed(ctx context.Context) {
	l.errs.Add(1)
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Millisecond):
	}
}

// policyClient sends END-OF-MESSAGE requests one after another; a reply
// is the action line and the blank line after it, and a connection that
// ends between the two is a torn reply.
func (l *relLoad) policyClient(ctx context.Context, sock string, id int) {
	for n := 0; ctx.Err() == nil; {
		c, err := net.DialTimeout("unix", sock, time.Second)
		if err != nil {
			l.failed(ctx)
			continue
		}
		r := bufio.NewReader(c)
		for ctx.Err() == nil {
			n++
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			req := strings.Replace(policyRequest, "instance=123.456.7", fmt.Sprintf("instance=%d.%d", id, n), 1)
			if _, err := io.WriteString(c, req); err != nil {
				l.failed(ctx)
				break
			}
			line, err := r.ReadString('\n')
			if err != nil {
				l.failed(ctx)
				break
			}
			if blank, err := r.ReadString('\n'); err != nil || blank != "\n" || !strings.HasPrefix(line, "action=") {
				l.torn.Add(1)
				break
			}
			l.ok.Add(1)
			l.lastOK[id].Store(time.Now().UnixNano())
		}
		c.Close()
	}
}

// anvilClient connects and disconnects one ident after another.
func (l *relLoad) anvilClient(ctx context.Context, sock string, id int) {
	for ctx.Err() == nil {
		cl, err := anviltest.Dial("unix", sock, false)
		if err != nil {
			l.failed(ctx)
			continue
		}
		for i := 0; ctx.Err() == nil; i++ {
			ident := fmt.Sprintf("smtp:192.0.2.%d", i%250+1)
			if _, err := cl.Do("connect", ident); err != nil {
				l.failed(ctx)
				break
			}
			if _, err := cl.Do("disconnect", ident); err != nil {
				l.failed(ctx)
				break
			}
			l.ok.Add(1)
			l.lastOK[id].Store(time.Now().UnixNano())
		}
		cl.Close()
	}
}

// waitOK waits until the load has had n more answers.
func (l *relLoad) waitOK(t *testing.T, n int64) {
	t.Helper()
	want := l.ok.Load() + n
	waitUntil(t, fmt.Sprintf("%d answers", n), func() bool { return l.ok.Load() >= want },
		func() string { return fmt.Sprintf("%d answers, %d errors", l.ok.Load(), l.errs.Load()) })
}

// TestServeKilledMidLoadRestarts: `sluice serve` killed with SIGKILL in
// the middle of load leaves its socket files behind; started again with
// the same configuration it replaces them, and every client, reconnecting
// by itself, is answered again.
func TestServeKilledMidLoadRestarts(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the daemon twice under load")
	}
	bin, _ := muxBinaries(t)
	dir := t.TempDir()
	cfg := serveAllDoors(t, dir, "", "", "", "")
	socks := []string{filepath.Join(dir, "anvil"), filepath.Join(dir, "policy"), filepath.Join(dir, "throttle"), filepath.Join(dir, "milter")}
	args := []string{"serve", "-c", cfg}
	p1 := relStart(t, bin, args, socks...)
	const policyClients, anvilClients = 8, 4
	load := startRelLoad(t, dir, policyClients, anvilClients)
	load.waitOK(t, 500)
	if err := p1.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	_ = p1.wait(t, 60*time.Second)
	okAtKill, errsAtKill := load.ok.Load(), load.errs.Load()
	for _, s := range socks {
		if fi, err := os.Stat(s); err != nil || fi.Mode()&os.ModeSocket == 0 {
			t.Fatalf("after SIGKILL %s should be left behind as a stale socket: %v", s, err)
		}
	}
	// Every client fails against the stale sockets before the restart:
	// at least one failed attempt each.
	waitUntil(t, "the clients failing against the stale sockets", func() bool {
		return load.errs.Load()-errsAtKill >= policyClients+anvilClients
	}, func() string { return fmt.Sprintf("%d failed attempts since the kill", load.errs.Load()-errsAtKill) })
	p2 := relStart(t, bin, args, socks...)
	restarted := time.Now()
	waitUntil(t, "every client answered after the restart", func() bool {
		for i := range load.lastOK {
			if load.lastOK[i].Load() < restarted.UnixNano() {
				return false
			}
		}
		return true
	}, func() string { return fmt.Sprintf("%d answers, %d errors", load.ok.Load(), load.errs.Load()) })
	recovered := time.Since(restarted)
	load.waitOK(t, 500)
	load.stop()
	t.Logf("%d clients: %d answers before the SIGKILL; daemon up again %v after it (stale sockets replaced); every client answered %v after that; %d failed attempts while it was down; %d answers in all, %d torn replies",
		policyClients+anvilClients, okAtKill, restarted.Sub(killed).Round(time.Millisecond), recovered.Round(time.Millisecond), load.errs.Load()-errsAtKill, load.ok.Load(), load.torn.Load())
	if load.torn.Load() > 0 {
		t.Errorf("%d policy replies were torn", load.torn.Load())
	}
	if !strings.Contains(p2.stderr.String(), "sluice started") {
		t.Errorf("restart log:\n%s", p2.stderr.String())
	}
	if err := p2.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p2.wait(t, 60*time.Second); err != nil {
		t.Fatalf("exit after SIGTERM: %v\n%s", err, p2.stderr.String())
	}
}

// TestServeSIGTERMUnderLoadDrains: SIGTERM while 16 clients send policy
// and anvil requests as fast as they can, 200 more sit idle and (in one
// run) two throttled senders hold their slots: the daemon stops
// accepting, lets every request in progress finish (no client sees a torn
// reply), closes connections that are between requests at once (idle
// ones, and the senders', which are past their request), and exits 0,
// within the grace period (-grace 3s) at the latest. The only bound
// asserted is that it did not hang for 60 s; the time it took is
// reported.
func TestServeSIGTERMUnderLoadDrains(t *testing.T) {
	if testing.Short() {
		t.Skip("load")
	}
	bin, _ := muxBinaries(t)
	for _, holders := range []int{0, 2} {
		t.Run(fmt.Sprintf("throttle_holders=%d", holders), func(t *testing.T) {
			dir := t.TempDir()
			cfg := serveAllDoors(t, dir, "", "", "", "")
			p := relStart(t, bin, []string{"serve", "-c", cfg, "-grace", "3s"}, filepath.Join(dir, "anvil"), filepath.Join(dir, "policy"), filepath.Join(dir, "throttle"))
			idle := dialMany(t, filepath.Join(dir, "anvil"), 200)
			held := make(chan error, holders)
			for range holders {
				c, err := net.Dial("unix", filepath.Join(dir, "throttle"))
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				if _, err := io.WriteString(c, "ACQUIRE relay.example\n"); err != nil {
					t.Fatal(err)
				}
				if line, err := bufio.NewReader(c).ReadString('\n'); err != nil || !strings.HasPrefix(line, "OK ") {
					t.Fatalf("throttle: %q %v", line, err)
				}
				go func() { // the sender "sends" until the daemon closes on it
					_, err := io.Copy(io.Discard, c)
					held <- err
				}()
			}
			load := startRelLoad(t, dir, 12, 4)
			load.waitOK(t, 1000)
			start := time.Now()
			if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			err := p.wait(t, 60*time.Second)
			took := time.Since(start)
			load.stop()
			for range holders {
				<-held
			}
			open := 0
			for _, c := range idle {
				_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
				b := make([]byte, 64)
				for {
					if _, err := c.Read(b); err != nil {
						if ne, ok := err.(net.Error); ok && ne.Timeout() {
							open++
						}
						break
					}
				}
			}
			t.Logf("SIGTERM with 16 busy clients, 200 idle and %d throttled senders holding slots: exited after %v (grace 3s); %d answers, %d torn replies, %d idle connections left open",
				holders, took.Round(time.Millisecond), load.ok.Load(), load.torn.Load(), open)
			if err != nil {
				t.Errorf("exit: %v\n%s", err, p.stderr.String())
			}
			if load.torn.Load() > 0 {
				t.Errorf("%d policy replies were torn by the shutdown", load.torn.Load())
			}
			if open > 0 {
				t.Errorf("%d idle connections still open after the daemon exited", open)
			}
			if !strings.Contains(p.stderr.String(), "sluice stopped") {
				t.Errorf("log:\n%s", p.stderr.String())
			}
		})
	}
}

// TestMuxStatsDiskFullKeepsServing: `sluice mux -t /dev/full -u` (a
// statistics file on a full disk: every write fails with ENOSPC) goes on
// answering every request; the failure is logged once per run of
// failures, not once per line. (internal/mux TestStatsDiskFull holds the
// stats writer itself to the same.)
func TestMuxStatsDiskFullKeepsServing(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		peer.Missing(t, "/dev/full", err)
	}
	bin, worker := muxBinaries(t)
	uarg, u := asUser(t)
	spool := spoolDir(t, u)
	sock := filepath.Join(spool, "mx.sock")
	// No syslog to reach: the log goes to stderr, where the test reads it.
	t.Setenv(muxSyslogEnv, filepath.Join(spool, "no-syslog"))
	args := append([]string{"mux", "-D", "-z", spool, "-s", "unix:" + sock, "-f", worker, "-m", "1", "-x", "2", "-t", "/dev/full", "-u", "-r", "5", "-q", "50", "-Q", "30"}, uarg...)
	p := relStart(t, bin, args, sock)
	for i := range 40 {
		if got := muxQuery(t, sock, "relayok 192.0.2.9 host 25 127.0.0.1 25 NOQUEUE\n"); got != "ok 1 ok 250 2.1.0 0\n" {
			t.Fatalf("request %d with the stats disk full: %q\n%s", i, got, p.stderr.String())
		}
	}
	select {
	case <-p.done:
		t.Fatalf("sluice mux exited: %v\n%s", p.err, p.stderr.String())
	default:
	}
	n := strings.Count(p.stderr.String(), "no space left on device") + strings.Count(p.stderr.String(), "No space left on device")
	t.Logf("40 requests (8 worker recycles) with every stats write failing: all answered; %d log lines about it", n)
	if n < 1 || n > 3 {
		t.Errorf("%d log lines about the full disk, want 1 (once per run of failures):\n%s", n, p.stderr.String())
	}
}
