package cli

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"sluice/internal/testutil/peer"
	"sluice/internal/testutil/postfixtest"
)

// restartLoad is what the SMTP clients of TestRestartUnderPostfixLoad saw.
type restartLoad struct {
	delivered, counted, policyDeferred, capRefused atomic.Int64
	open, maxOpen                                  atomic.Int64 // sessions greeted with 220 and not yet closed
	maxGreet                                       atomic.Int64 // longest wait for a greeting, ns
	mu                                             sync.Mutex
	failures                                       []string      // replies no limit explains
	finished                                       int           // sessions ended, whatever their outcome
	moved                                          chan struct{} // closed (and replaced) when a session ends
}

// ended records the end of one session and wakes whoever waits for it.
func (l *restartLoad) ended() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.finished++
	close(l.moved)
	l.moved = make(chan struct{})
}

// waitSessions blocks until n more sessions have ended: the load has
// gone on (through a restart or an upgrade, say) however slow the
// machine. Two minutes without them fail the test.
func (l *restartLoad) waitSessions(t *testing.T, n int) {
	t.Helper()
	l.mu.Lock()
	target := l.finished + n
	l.mu.Unlock()
	deadline := time.After(2 * time.Minute)
	for {
		l.mu.Lock()
		done, moved := l.finished >= target, l.moved
		l.mu.Unlock()
		if done {
			return
		}
		select {
		case <-moved:
		case <-deadline:
			t.Fatalf("the load stalled: fewer than %d sessions ended in two minutes", n)
		}
	}
}

func (l *restartLoad) fail(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.failures) < 20 {
		l.failures = append(l.failures, fmt.Sprintf(format, args...))
	}
}

// capRefusal reports whether a greeting is smtpd's refusal for a class
// cap: anvil's count over the limit, or the milter's refusal at CONNECT.
func capRefusal(r postfixtest.Reply) bool {
	s := r.String()
	return r.Code == 421 && (strings.Contains(s, "too many connections") || strings.Contains(s, "Service unavailable"))
}

// session runs one SMTP session with one message and records it.
func (l *restartLoad) session(ctx context.Context, port int, sender string) {
	defer l.ended()
	t0 := time.Now()
	c, g, err := postfixtest.DialSMTP(ctx, port)
	if err != nil {
		if ctx.Err() == nil {
			l.fail("dial: %v", err)
		}
		return
	}
	defer c.Close()
	if d := int64(time.Since(t0)); d > l.maxGreet.Load() {
		l.maxGreet.Store(d) // one writer at a time is not guaranteed; a lost maximum only lowers a logged figure
	}
	if capRefusal(g) {
		l.capRefused.Add(1)
		time.Sleep(10 * time.Millisecond) // a client tries again later
		return
	}
	if g.Code != 220 {
		l.fail("greeting %s", g)
		return
	}
	n := l.open.Add(1)
	defer l.open.Add(-1)
	for m := l.maxOpen.Load(); n > m && !l.maxOpen.CompareAndSwap(m, n); m = l.maxOpen.Load() {
	}
	if r, err := c.Cmd("EHLO client.example"); err != nil || r.Code != 250 {
		l.fail("EHLO: %v %v", r, err)
		return
	}
	err = c.SendMessage(sender, "rcpt@example.net")
	switch {
	case err == nil:
		l.delivered.Add(1)
		if sender == "counted@example.org" {
			l.counted.Add(1)
		}
	case sender == "counted@example.org" && strings.Contains(err.Error(), "450 4.7.1") && strings.Contains(err.Error(), "Too much mail from"):
		l.policyDeferred.Add(1)
	default:
		l.fail("%s: %v", sender, err)
	}
}

// TestRestartUnderPostfixLoad restarts sluice ten times, as systemctl
// restart does under the shipped units (unitHost: the sockets of every
// door stay while the daemon is gone), while a private Postfix takes
// mail from eight SMTP clients at once through sluice's milter, policy
// and anvil, as docs/operations.md wires them. The configuration is the
// example's, with the milter on, a cap of 4 sessions on the loopback
// class and a policy rule of 20 messages per hour for one sender (every
// third message is from it). No message may get a reply that no limit
// explains (a restart that closed a listener would show as the milter's
// 451 or a policy timeout), the clients never hold more greeted sessions
// than the cap, and exactly 20 messages of the counted sender are
// accepted over the whole run: counts survive each restart.
func TestRestartUnderPostfixLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("Postfix under load and ten restarts")
	}
	m := startMTADeployment(t, "")
	moved, base, ctx, smtpPort := m.moved, m.base, m.ctx, m.smtpPort
	h := newUnitHost(t, moved, filepath.Join(base, "systemd"))
	h.start()

	load, stop := startLoad(ctx, smtpPort)
	const restarts = 10
	t0 := time.Now()
	for range restarts {
		load.waitSessions(t, loadClients)
		h.stop()
		h.start()
	}
	load.waitSessions(t, loadClients)
	stop()
	t.Logf("%d restarts in %v", restarts, time.Since(t0).Round(time.Millisecond))
	h.stop()
	load.check(t)
}

// loadClients is how many SMTP clients startLoad runs at once; the tests
// let as many sessions end between two restarts or upgrades.
const loadClients = 8

// startLoad runs loadClients SMTP clients, each one session after another
// with one message (every third from the counted sender), until stop
// (which first waits, up to two minutes, for 25 messages of the counted
// sender).
func startLoad(ctx context.Context, port int) (*restartLoad, func()) {
	load := &restartLoad{moved: make(chan struct{})}
	loadCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var seq atomic.Int64
	for range loadClients {
		wg.Go(func() {
			for loadCtx.Err() == nil {
				n := seq.Add(1)
				sender := fmt.Sprintf("s%d-%d@example.org", n, rand.IntN(1<<30))
				if n%3 == 0 {
					sender = "counted@example.org"
				}
				load.session(loadCtx, port, sender)
			}
		})
	}
	return load, func() {
		// Enough of the counted sender's messages to cross its limit of 20,
		// however slow the machine: the load goes on until there are.
		deadline := time.After(2 * time.Minute)
	wait:
		for load.counted.Load()+load.policyDeferred.Load() < 25 {
			load.mu.Lock()
			moved := load.moved
			load.mu.Unlock()
			select {
			case <-moved:
			case <-deadline:
				break wait // check then says the run proves nothing of the limit
			}
		}
		cancel()
		wg.Wait()
	}
}

// check asserts what the clients saw: no reply that no limit explains,
// exactly 20 messages of the counted sender, never more greeted sessions
// open than the cap of 4, and the cap reached.
func (l *restartLoad) check(t *testing.T) {
	t.Helper()
	t.Logf("%d messages accepted (%d of the counted sender, %d deferred by its rule), %d sessions refused for the class cap, at most %d sessions open, longest wait for a greeting %v",
		l.delivered.Load(), l.counted.Load(), l.policyDeferred.Load(), l.capRefused.Load(),
		l.maxOpen.Load(), time.Duration(l.maxGreet.Load()).Round(time.Millisecond))
	for _, f := range l.failures {
		t.Errorf("a reply no limit explains: %s", f)
	}
	if l.counted.Load()+l.policyDeferred.Load() <= 20 {
		t.Fatalf("the counted sender sent only %d messages; the run proves nothing of its limit", l.counted.Load()+l.policyDeferred.Load())
	}
	if l.counted.Load() != 20 {
		t.Errorf("%d messages of the counted sender accepted, want exactly 20", l.counted.Load())
	}
	if l.maxOpen.Load() > 4 {
		t.Errorf("%d sessions open at once, over the class cap of 4", l.maxOpen.Load())
	}
	if l.capRefused.Load() == 0 {
		t.Error("no session was refused for the class cap: the run proves nothing of the cap")
	}
}

// mtaDeployment is a private Postfix wired to sluice's milter, policy
// door and anvil as docs/operations.md wires them, and the example
// configuration for it (moved under base, the milter on, a cap of 4 on
// the loopback class, 20 messages per hour for the counted sender).
type mtaDeployment struct {
	ctx      context.Context
	bin      string
	base     string
	cfgPath  string
	smtpPort int
	moved    *strings.Replacer
}

// startMTADeployment starts the Postfix and writes the configuration,
// with head put in front of it.
func startMTADeployment(t *testing.T, head string) *mtaDeployment {
	t.Helper()
	peer.User(t, "sluice")
	if err := postfixtest.Available(); err != nil {
		peer.Missing(t, "a private Postfix instance", err)
	}
	bin, _ := muxBinaries(t)
	base := deployDir(t)
	smtpPort, err := postfixtest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	queue := filepath.Join(base, "postfix", "queue")
	mainCF := map[string]string{
		"smtpd_milters":                       "unix:" + filepath.Join(queue, "sluice", "milter"),
		"milter_default_action":               "tempfail",
		"milter_protocol":                     "6",
		"smtpd_end_of_data_restrictions":      "check_policy_service { unix:private/sluice-policy, timeout=10s, default_action=DUNNO }",
		"smtpd_client_event_limit_exceptions": "",
		"smtpd_client_connection_count_limit": "50",
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	t.Cleanup(cancel)
	inst := postfixtest.StartTest(t, ctx, postfixtest.Options{Dir: filepath.Join(base, "postfix"), SMTPPort: smtpPort, MainCF: mainCF, Logf: t.Logf})
	if inst.QueueDir() != queue {
		t.Fatalf("queue directory %s, want %s", inst.QueueDir(), queue)
	}
	moved := movedDeploymentAt(t, bin, base, queue, "sluice", "sluice")
	cfgPath := filepath.Join(base, "sluice.toml")
	writeMovedConfig(t, moved, cfgPath, true, `name = "local"
match = ["127.0.0.0/8", "::1"]`, `name = "local"
match = ["127.0.0.0/8", "::1"]
refuse = 4`)
	appendFile(t, cfgPath, `
[[policy.rule]]
name = "sender-rate"
count = "messages"
stage = "END-OF-MESSAGE"
key = ["sender"]
limit = ["20/1h exact"]
action = "DEFER_IF_PERMIT 4.7.1 Too much mail from {key}"
`)
	if head != "" {
		b, err := os.ReadFile(cfgPath)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(cfgPath, append([]byte(head), b...), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return &mtaDeployment{ctx: ctx, bin: bin, base: base, cfgPath: cfgPath, smtpPort: smtpPort, moved: moved}
}
