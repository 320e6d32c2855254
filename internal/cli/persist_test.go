package cli

// Restart tests against the real binary: counts and throttle bookings
// outlive a SIGTERM restart (the store's snapshot) and a kill -9 (the
// booking journal, and the restart guard for exact limits), judged by
// what a recording relay saw, not by the daemon's own figures.
// docs/reliability.md records the results.

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// persistConfig writes a config that logs at debug level, snapshots the
// store every interval, with the restart guard on or off, and serves
// doors; anvil, milter and the doors in off are disabled.
func persistConfig(t *testing.T, dir, interval string, guard bool, doors string, off ...string) string {
	t.Helper()
	body := fmt.Sprintf(`[log]
level = "debug"
[store.snapshot]
interval = %q
restart_guard = %v
%s`, interval, guard, doors)
	return writeServeConfig(t, dir, body, append([]string{"anvil", "milter"}, off...)...)
}

// restartCase is how a restart test stops its first daemon: SIGTERM
// (the final snapshot; a periodic one every 5 s) or kill -9 (no periodic
// snapshot since the start: every hour; the restart guard on).
type restartCase struct {
	name     string
	sig      syscall.Signal
	interval string
	guard    bool
}

var restartCases = []restartCase{
	{"SIGTERM", syscall.SIGTERM, "5s", false},
	{"SIGKILL guarded", syscall.SIGKILL, "1h", true},
}

// restart stops p with c's signal, waits for it to exit and until pause
// has passed since the signal, and starts the daemon again with cfg; it
// returns the new daemon and when it started. After SIGTERM the old one
// must have written its final snapshot.
func (c restartCase) restart(t *testing.T, p *relProc, pause time.Duration, bin, cfg, sock string) (*relProc, time.Time) {
	t.Helper()
	if err := p.cmd.Process.Signal(c.sig); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	p.wait(t, 60*time.Second)
	if c.sig == syscall.SIGTERM && !strings.Contains(p.stderr.String(), "store snapshot written") {
		t.Fatalf("no final snapshot:\n%s", p.stderr.String())
	}
	time.Sleep(time.Until(stopped.Add(pause)))
	return relStart(t, bin, []string{"serve", "-c", cfg}, sock), time.Now()
}

// wrappers runs n `sluice throttle -qmail-remote` senders at once, in the
// background, and returns a function that waits for them all and checks
// each reported a delivery.
func wrappers(t *testing.T, bin, sock, fake string, first, n int) func() {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]string, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command(bin, "throttle", "-qmail-remote", "-s", sock, "--", fake, "relay.example", "sender@example.net", strconv.Itoa(first+i))
			var out, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &stderr
			if err := cmd.Run(); err != nil || out.String() != "r127.0.0.1 accepted message.\x00Kok\x00" {
				errs[i] = fmt.Sprintf("sender %d: %v, output %q, %s", first+i, err, out.String(), stderr.String())
			}
		}()
	}
	return func() {
		t.Helper()
		wg.Wait()
		for _, e := range errs {
			if e != "" {
				t.Error(e)
			}
		}
	}
}

// relaySends reads the fake relay's log: one time per send, as the relay
// saw it.
func relaySends(t *testing.T, path string) []time.Time {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []time.Time
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		at, err := parseEpochRealtime(strings.Fields(line)[0])
		if err != nil {
			t.Fatalf("send log line %q: %v", line, err)
		}
		out = append(out, at)
	}
	return out
}

// TestThrottleRestartKeepsWindow: `[[throttle.policy]] limit = "5/2s"`,
// 10 senders book slots (5 send at once, 5 wait for the next window), the
// daemon is stopped and started again 0.5 s later, and 5 new senders
// come: no 2-second window at the relay holds more than 5 sends. With
// SIGTERM the final snapshot holds the bookings; with kill -9 (and no
// periodic snapshot at all: interval 1h) the book records appended to
// the file as the slots were booked do, and the restart guard is on.
func TestThrottleRestartKeepsWindow(t *testing.T) {
	if testing.Short() {
		t.Skip("two daemons, 15 senders, three windows")
	}
	bin := buildSluice(t)
	for _, c := range restartCases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			// The margin absorbs the fake relay's start-up (a shell and
			// date) on a loaded machine; the window is still 2 s.
			cfg := persistConfig(t, dir, c.interval, c.guard, `[throttle]
listen = ["unix:throttle"]
[[throttle.policy]]
name = "relay"
match = ["*"]
limit = "5/2s"
margin = "750ms"
max_wait = "30s"
shared = true
`, "policy")
			sock := filepath.Join(dir, "throttle")
			fake, sendLog := fakeQmailRemote(t, dir)
			p1 := relStart(t, bin, []string{"serve", "-c", cfg}, sock)
			first := wrappers(t, bin, sock, fake, 0, 10)
			waitUntil(t, "10 slots booked", func() bool { return strings.Count(p1.stderr.String(), "throttle grant") == 10 },
				func() string { return p1.stderr.String() })
			p2, _ := c.restart(t, p1, 500*time.Millisecond, bin, cfg, sock)
			second := wrappers(t, bin, sock, fake, 10, 5)
			first()
			second()
			sends := relaySends(t, sendLog)
			grants1, grants2 := grantTimes(t, p1.stderr.String()), grantTimes(t, p2.stderr.String())
			t.Logf("%s restart: %d sends; grants before %v, after %v; the relay saw at most %d in a 2 s window",
				c.name, len(sends), relTimes(grants1), relTimes(grants2), maxInWindow(sends, 2*time.Second))
			if len(sends) != 15 {
				t.Fatalf("%d sends, want 15", len(sends))
			}
			if m := maxInWindow(sends, 2*time.Second); m > 5 {
				t.Errorf("a 2 s window at the relay holds %d sends, limit 5\n%s", m, p2.stderr.String())
			}
			want := "store snapshot restored"
			if c.sig == syscall.SIGKILL {
				want = "store snapshot: throttle slots booked after the last write restored"
			}
			if l := p2.stderr.String(); !strings.Contains(l, want) {
				t.Errorf("restart log lacks %q:\n%s", want, l)
			}
		})
	}
}

func relTimes(ts []time.Time) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.Format("05.000"))
	}
	return out
}

// policyOnce sends one END-OF-MESSAGE request and returns the action.
func policyOnce(t *testing.T, sock, sender string) string {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "request=smtpd_access_policy\nprotocol_state=END-OF-MESSAGE\nclient_address=192.0.2.7\nsender=%s\nrecipient_count=1\n\n", sender)
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimPrefix(strings.TrimSpace(line), "action=")
}

// TestPolicyDeferredAcrossRestart: a sender deferred at 10 of 10 per 3 s
// (the 10 per 60 s, shortened) is still deferred right after a
// SIGTERM restart, until its window has truly passed, and admitted then.
// After a kill -9 with no periodic snapshot since the 10 (interval 1h),
// the restart guard defers it for one period from the restart.
func TestPolicyDeferredAcrossRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("two daemons")
	}
	bin := buildSluice(t)
	for _, c := range restartCases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := persistConfig(t, dir, c.interval, c.guard, senderPolicy("unix:policy", "10/3s exact"), "throttle")
			sock := filepath.Join(dir, "policy")
			p1 := relStart(t, bin, []string{"serve", "-c", cfg}, sock)
			begin := time.Now() // every counted event is at or after this
			for i := range 10 {
				if a := policyOnce(t, sock, "s@example.org"); a != "DUNNO" {
					t.Fatalf("request %d: %s", i+1, a)
				}
			}
			end := time.Now()
			if a := policyOnce(t, sock, "s@example.org"); !strings.HasPrefix(a, "DEFER_IF_PERMIT") {
				t.Fatalf("11th request: %s", a)
			}
			p2, restarted := c.restart(t, p1, 0, bin, cfg, sock)
			if a := policyOnce(t, sock, "s@example.org"); !strings.HasPrefix(a, "DEFER_IF_PERMIT") {
				t.Fatalf("right after the restart (%v after the 10th): %s, want still deferred", restarted.Sub(end).Round(time.Millisecond), a)
			}
			// Still deferred up to the end of the window of the first event.
			if d := time.Until(begin.Add(3*time.Second - 300*time.Millisecond)); d > 0 {
				time.Sleep(d)
				// Only an answer that came back before the window can have
				// ended proves anything (a loaded machine may answer late).
				a := policyOnce(t, sock, "s@example.org")
				answered := time.Now()
				switch {
				case strings.HasPrefix(a, "DEFER_IF_PERMIT"):
				case answered.Before(begin.Add(3 * time.Second)):
					t.Fatalf("%v into the window: %s, want deferred", answered.Sub(begin).Round(time.Millisecond), a)
				default:
					t.Logf("the answer 2.7 s into the window came %v after the window's start: too late to prove anything", answered.Sub(begin).Round(time.Millisecond))
				}
			}
			open := end.Add(3*time.Second + 100*time.Millisecond)
			if c.guard {
				open = restarted.Add(3*time.Second + 100*time.Millisecond)
			}
			time.Sleep(time.Until(open))
			if a := policyOnce(t, sock, "s@example.org"); a != "DUNNO" {
				t.Fatalf("after the window: %s, want admitted", a)
			}
			want := "store snapshot restored"
			if c.guard {
				want = "restart guard"
			}
			if !strings.Contains(p2.stderr.String(), want) {
				t.Errorf("log lacks %q:\n%s", want, p2.stderr.String())
			}
			t.Logf("%s: 10 admitted in %v; restarted %v after the 10th; deferred until the window passed, admitted %v after the first",
				c.name, end.Sub(begin).Round(time.Millisecond), restarted.Sub(end).Round(time.Millisecond), time.Since(begin).Round(time.Millisecond))
		})
	}
}
