package cli

import (
	"context"
	"fmt"
	"io"
	"net/smtp"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"sluice/internal/testutil/logbuf"
	"sluice/internal/testutil/peer"
	"sluice/internal/testutil/postfixtest"
)

// TestMuxUpgradeUnderPostfixLoad is issue 27's test for `sluice mux`: a
// private Postfix whose milter is Debian's mimedefang (as defang), whose
// multiplexor is `sluice mux` daemonized as docs/mux.md deploys it (root
// starts it with -U defang, -p in a directory of root's, -o in the
// spool) with mimedefang.pl and the test filter. Six SMTP clients send
// one message per session without a pause while the multiplexor is
// upgraded by SIGUSR2 to a binary that exits at once (it fails, the old
// one serves on), then three times to another build and back: every
// message is accepted (no 4xx: milter_default_action is tempfail, so a
// refused or failed multiplexor request would show), the pid file names
// the live multiplexor at every look and the lock is held, each new
// multiplexor runs as defang and the version installed.
func TestMuxUpgradeUnderPostfixLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("Postfix under load and three upgrades")
	}
	needReal(t, perlWorker, milterBinary)
	if err := postfixtest.Available(); err != nil {
		peer.Missing(t, "a private Postfix instance", err)
	}
	peer.Root(t, "the multiplexor is started by root with -U defang, as Debian's init script starts it")
	bin, _ := muxBinaries(t)
	other := upgradedBinary(t)
	r := newMuxUpgradeRig(t, bin)
	_, u := asUser(t)
	logs := newSyslogSink(t, filepath.Join(r.base, "log"))
	filter, _ := writeFilter(t, r.spool)
	// Started by the name Debian's init script uses, a link to sluice
	// (docs/mux.md, "Drop-in on Debian"): the new multiplexor must be
	// started by that name too, or it would not be `sluice mux`.
	asRef := filepath.Join(filepath.Dir(r.live), ReferenceName)
	if err := os.Symlink("sluice", asRef); err != nil {
		t.Fatal(err)
	}
	start := exec.Command(asRef, append([]string{"-F", filter, "-m", "2", "-x", "8", "-w", "1"}, r.args(t)...)...)
	start.Env = append(os.Environ(), muxSyslogEnv+"="+filepath.Join(r.base, "log"))
	if out, err := start.CombinedOutput(); err != nil {
		t.Fatalf("sluice mux: %v\n%s", err, out)
	}
	pid := r.pid(t)
	logText := func() string { return strings.Join(logs.with("mimedefang-multiplexor"), "\n") }
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the multiplexors' log:\n%s", logText())
		}
	})

	milterSpool := filepath.Join(r.base, "md")
	if err := os.Mkdir(milterSpool, 0o755); err != nil {
		t.Fatal(err)
	}
	chownTo(t, u, milterSpool)
	milterSock := filepath.Join(milterSpool, "md.sock")
	milter := exec.Command(milterBinary, "-D", "-U", u.Username, "-m", r.sock, "-p", "unix:"+milterSock, "-z", milterSpool, "-r", "-s", "-t")
	milterOut := &logbuf.Buffer{}
	milter.Stdout, milter.Stderr = milterOut, milterOut
	if err := milter.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopCmd(t, "mimedefang milter", milter, milterOut) })
	waitUntil(t, "the milter's socket", func() bool {
		fi, err := os.Stat(milterSock)
		return err == nil && fi.Mode()&os.ModeSocket != 0
	}, milterOut.String)
	if err := os.Chmod(milterSock, 0o666); err != nil { // smtpd runs as postfix
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	port, err := postfixtest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	postfixtest.StartTest(t, ctx, postfixtest.Options{
		Dir: t.TempDir(), SMTPPort: port, OwnAnvil: true, Logf: t.Logf,
		MainCF: map[string]string{
			"smtpd_milters":         "unix:" + milterSock,
			"milter_default_action": "tempfail",
			"milter_protocol":       "6",
		},
	})
	load := startMuxLoad(ctx, "127.0.0.1:"+strconv.Itoa(port), 6)
	waitUntil(t, "mail flowing", func() bool { return load.accepted.Load() >= 20 }, load.report)

	// The pid file names a live multiplexor at every look, and the lock
	// is held, from here to the end.
	watchCtx, stopWatch := context.WithCancel(ctx)
	var watchErr atomic.Value
	var watched sync.WaitGroup
	watched.Go(func() {
		readPid := func() (int, []byte, error) {
			b, err := os.ReadFile(r.pidFile)
			p, _ := strconv.Atoi(strings.TrimSpace(string(b)))
			return p, b, err
		}
		for watchCtx.Err() == nil {
			p, b, err := readPid()
			if err != nil || !alive(p) {
				// Between the read and the look at the process the file
				// may have changed hands: the new multiplexor writes it
				// before the old one exits, so a read after the look
				// names the live one. A file still naming a dead process
				// is the failure.
				if p2, b2, err2 := readPid(); err2 != nil || p2 == p || !alive(p2) {
					watchErr.Store(fmt.Sprintf("the pid file holds %q (%v), then %q (%v), not a live process", b, err, b2, err2))
					return
				}
			}
			if !r.lockHeld(t) {
				watchErr.Store("the lock file is not locked")
				return
			}
			time.Sleep(time.Millisecond)
		}
	})

	installBinary(t, "/bin/false", r.live)
	_ = syscall.Kill(pid, syscall.SIGUSR2)
	waitUntil(t, "the failed upgrade", func() bool { return strings.Contains(logText(), "upgrade failed: the new multiplexor") }, logText)
	if !alive(pid) {
		t.Fatal("the multiplexor exited after a failed upgrade")
	}
	const upgrades = 3
	t0 := time.Now()
	served := regexp.MustCompile(`upgrade: serving version=("[^"]*"|\S+) pid=(\d+)`)
	for i := range upgrades {
		before := load.accepted.Load()
		waitUntil(t, "mail between upgrades", func() bool { return load.accepted.Load() >= before+10 }, load.report)
		src, version := other, "upgraded"
		if i%2 == 1 {
			src, version = bin, "(devel)"
		}
		installBinary(t, src, r.live)
		load.upgrading.Store(true)
		_ = syscall.Kill(pid, syscall.SIGUSR2)
		waitUntil(t, fmt.Sprintf("upgrade %d", i+1), func() bool { return len(served.FindAllStringSubmatch(logText(), -1)) > i }, logText)
		m := served.FindAllStringSubmatch(logText(), -1)[i]
		next, _ := strconv.Atoi(m[2])
		waitGone(t, "the old multiplexor", pid)
		load.upgrading.Store(false)
		if !strings.HasPrefix(strings.Trim(m[1], `"`), version) {
			t.Errorf("upgrade %d: the new multiplexor runs version %q, want %q", i+1, m[1], version)
		}
		if got := r.pid(t); got != next {
			t.Errorf("upgrade %d: the pid file names %d, want the new multiplexor %d", i+1, got, next)
		}
		if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", next)); err != nil || !strings.Contains(string(st), "\nUid:\t"+u.Uid+"\t"+u.Uid+"\t"+u.Uid+"\t"+u.Uid+"\n") {
			t.Errorf("upgrade %d: the new multiplexor does not run as defang (%v)", i+1, err)
		}
		pid = next
	}
	elapsed := time.Since(t0)
	before := load.accepted.Load()
	waitUntil(t, "mail after the upgrades", func() bool { return load.accepted.Load() >= before+10 }, load.report)
	load.stop()
	stopWatch()
	watched.Wait()
	if e := watchErr.Load(); e != nil {
		t.Error(e)
	}
	t.Logf("%d upgrades in %v; %s", upgrades, elapsed.Round(time.Millisecond), load.report())
	load.check(t)
	_ = syscall.Kill(pid, syscall.SIGTERM)
	waitGone(t, "the last multiplexor", pid)
}

// muxLoad is n SMTP clients, each sending one message per session
// without a pause.
type muxLoad struct {
	accepted, failed atomic.Int64
	longest          atomic.Int64 // the longest session, ns
	// upgrading is set from a SIGUSR2 to the old multiplexor's exit;
	// longestUp is the longest session that overlapped such a window, ns.
	upgrading atomic.Bool
	longestUp atomic.Int64
	mu        sync.Mutex
	failures  []string
	cancel    context.CancelFunc
	wg        sync.WaitGroup
}

func startMuxLoad(ctx context.Context, addr string, n int) *muxLoad {
	l := &muxLoad{}
	ctx, l.cancel = context.WithCancel(ctx)
	for c := range n {
		l.wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				t0, during := time.Now(), l.upgrading.Load()
				err := sendOne(addr, fmt.Sprintf("c%d-%d@example.com", c, i))
				d := int64(time.Since(t0))
				raise(&l.longest, d)
				if during || l.upgrading.Load() {
					raise(&l.longestUp, d)
				}
				if err != nil {
					if ctx.Err() != nil {
						return
					}
					l.failed.Add(1)
					l.mu.Lock()
					l.failures = append(l.failures, err.Error())
					l.mu.Unlock()
					continue
				}
				l.accepted.Add(1)
			}
		})
	}
	return l
}

// raise makes m at least d.
func raise(m *atomic.Int64, d int64) {
	for old := m.Load(); d > old && !m.CompareAndSwap(old, d); old = m.Load() {
	}
}

func (l *muxLoad) stop() { l.cancel(); l.wg.Wait() }

func (l *muxLoad) report() string {
	return fmt.Sprintf("%d messages accepted, %d refused or failed, longest session %v (during an upgrade %v)",
		l.accepted.Load(), l.failed.Load(), time.Duration(l.longest.Load()).Round(time.Millisecond),
		time.Duration(l.longestUp.Load()).Round(time.Millisecond))
}

func (l *muxLoad) check(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, f := range l.failures {
		t.Errorf("a message not accepted: %s", f)
	}
}

// sendOne sends one ordinary message in a session of its own.
func sendOne(addr, from string) error {
	c, err := smtp.Dial(addr)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.Hello("tester.example"); err != nil {
		return fmt.Errorf("HELO: %w", err)
	}
	if err := c.Mail(from); err != nil {
		return fmt.Errorf("MAIL: %w", err)
	}
	if err := c.Rcpt("bob@example.net"); err != nil {
		return fmt.Errorf("RCPT: %w", err)
	}
	w, err := c.Data()
	if err != nil {
		return fmt.Errorf("DATA: %w", err)
	}
	if _, err := io.WriteString(w, "From: <"+from+">\r\nTo: <bob@example.net>\r\nSubject: ordinary\r\n\r\nbody\r\n"); err != nil {
		return err
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("end of DATA: %w", err)
	}
	return c.Quit()
}
