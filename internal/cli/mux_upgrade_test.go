package cli

// Tests of `sluice mux`'s upgrade in place (docs/mux.md, "Upgrade in
// place: SIGUSR2"): what a failed new binary leaves, and the three
// upgrades under a real Postfix -> mimedefang milter load
// (mux_upgrade_mta_test.go).

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"sluice/internal/mux"
	"sluice/internal/status"
)

// muxUpgradeRig is a `sluice mux` started from a binary of the test's own
// (live, in a directory only root can write when the test runs as root),
// with a pid file and a lock file; its log is the stderr of the process
// that started it (the foreground case) or a syslog sink (daemonized).
type muxUpgradeRig struct {
	base, live, spool, sock, pidFile, lockFile string
}

// newMuxUpgradeRig makes the directories and installs bin as live.
func newMuxUpgradeRig(t *testing.T, bin string) *muxUpgradeRig {
	t.Helper()
	_, u := asUser(t)
	base, err := os.MkdirTemp("", "sluice-mxup")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	r := &muxUpgradeRig{base: base, live: filepath.Join(base, "bin", "sluice"), spool: filepath.Join(base, "mx")}
	for _, d := range []string{filepath.Join(base, "bin"), filepath.Join(base, "run"), r.spool} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	chownTo(t, u, r.spool)
	r.sock = filepath.Join(r.spool, "mx.sock")
	r.pidFile = filepath.Join(base, "run", "mx.pid") // a directory of root's, as docs/mux.md has it
	r.lockFile = filepath.Join(r.spool, "mx.lock")
	installBinary(t, bin, r.live)
	t.Cleanup(func() { killMuxesIn(t, r.spool) })
	return r
}

// args is the multiplexor's command line after "mux".
func (r *muxUpgradeRig) args(t *testing.T, extra ...string) []string {
	uarg, _ := asUser(t)
	args := []string{"-z", r.spool, "-s", r.sock, "-p", r.pidFile, "-o", r.lockFile}
	return append(append(args, uarg...), extra...)
}

// pid is the pid the pid file names.
func (r *muxUpgradeRig) pid(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile(r.pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("pid file %q: %v", b, err)
	}
	return pid
}

// lockHeld reports whether the lock file is locked by some process (an
// attempt of our own to lock it is refused).
func (r *muxUpgradeRig) lockHeld(t *testing.T) bool {
	t.Helper()
	f, err := os.OpenFile(r.lockFile, os.O_RDWR, 0)
	if err != nil {
		t.Fatalf("the lock file: %v", err)
	}
	defer f.Close()
	return syscall.FcntlFlock(f.Fd(), syscall.F_SETLK, &syscall.Flock_t{Type: syscall.F_WRLCK}) != nil
}

// shellWorker writes a worker that answers every line with "ok <cmd>",
// and exits at once, without reading, while the file broken exists.
func shellWorker(t *testing.T, dir string) (worker, broken string) {
	t.Helper()
	worker, broken = filepath.Join(dir, "worker.sh"), filepath.Join(dir, "broken")
	script := "#!/bin/sh\n[ -e " + broken + " ] && { echo 'worker: broken on purpose' >&2; exit 1; }\nwhile read -r cmd rest; do echo \"ok $cmd\"; done\n"
	if err := os.WriteFile(worker, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return worker, broken
}

// TestMuxUpgradeFailsLeavesOldServing: a new binary that exits at once,
// one whose workers cannot start (the worker program fails for the new
// pool only: the old pool's worker is up already), and one that says
// take and dies once the old one has stopped accepting, each leave the
// old multiplexor serving the same socket, naming itself in the pid file and
// holding the lock, with the reason logged; then an upgrade to a working
// binary in the foreground (-D) hands over, and the new one serves, is
// named in the pid file, holds the lock, and runs the version installed.
func TestMuxUpgradeFailsLeavesOldServing(t *testing.T) {
	bin, _ := muxBinaries(t)
	r := newMuxUpgradeRig(t, bin)
	worker, broken := shellWorker(t, r.base)
	port := freePort(t)
	restricted := "inet:" + strconv.Itoa(port)
	webSock := filepath.Join(r.spool, "web.sock")
	cmd := exec.Command(r.live, append([]string{"mux", "-D", "-f", worker, "-m", "1", "-x", "2", "-a", restricted}, r.args(t)...)...)
	// A file, not a pipe: the new multiplexor writes to it too, and the
	// wait for the old one must not wait for the new one's end.
	out := logFile(filepath.Join(r.base, "out.log"))
	f, err := os.Create(string(out))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), muxSyslogEnv+"="+filepath.Join(r.base, "no-syslog"), muxWebEnv+"=unix:"+webSock)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		killMuxesIn(t, r.spool)
		if t.Failed() {
			t.Logf("the multiplexors' output:\n%s", out.String())
		}
	})
	old := cmd.Process.Pid
	waitUntil(t, "the multiplexor serves", func() bool { return muxAnswers(r.sock) == "ok relayok\n" }, out.String)
	if v := webVersion(t, webSock); strings.HasPrefix(v, "upgraded") {
		t.Fatalf("the first multiplexor's status page shows version %q", v)
	}
	if r.pid(t) != old || !r.lockHeld(t) {
		t.Fatalf("pid file names %d, want %d; lock held %v", r.pid(t), old, r.lockHeld(t))
	}
	fails := func(why, want string) {
		t.Helper()
		before := strings.Count(out.String(), "upgrade failed: the new multiplexor")
		_ = syscall.Kill(old, syscall.SIGUSR2)
		waitUntil(t, "the failed upgrade "+why, func() bool {
			return strings.Count(out.String(), "upgrade failed: the new multiplexor") > before
		}, out.String)
		if !alive(old) || muxAnswers(r.sock) != "ok relayok\n" || r.pid(t) != old || !r.lockHeld(t) {
			t.Fatalf("after the failed upgrade %s: alive %v, answer %q, pid file %d (want %d), lock held %v",
				why, alive(old), muxAnswers(r.sock), r.pid(t), old, r.lockHeld(t))
		}
		if !strings.Contains(out.String(), want) {
			t.Errorf("the failed upgrade %s: no %q in the log", why, want)
		}
	}
	installBinary(t, "/bin/false", r.live)
	fails("to a binary that exits at once", `exit="exit status 1"`)
	other := upgradedBinary(t)
	installBinary(t, other, r.live)
	if err := os.WriteFile(broken, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	fails("to workers that cannot start", "upgrade: the new multiplexor's workers do not answer; exiting: ping:")
	if err := os.Remove(broken); err != nil {
		t.Fatal(err)
	}
	// A new process that says take, then dies once the old one has
	// stopped accepting: the old one serves its sockets again.
	late := filepath.Join(r.base, "late.sh")
	script := "#!/bin/bash\nfd=$SLUICE_UPGRADE_FD\necho take >&$fd\nread -r line <&$fd\necho \"late.sh: got $line; exiting\" >&2\nexit 3\n"
	if err := os.WriteFile(late, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	installBinary(t, late, r.live)
	_ = syscall.Kill(old, syscall.SIGUSR2)
	waitUntil(t, "the old multiplexor to serve again", func() bool {
		return strings.Contains(out.String(), "upgrade failed after this multiplexor stopped; serving again on the same sockets") &&
			strings.Contains(out.String(), `exit="exit status 3"`)
	}, out.String)
	if !alive(old) || muxAnswers(r.sock) != "ok relayok\n" || r.pid(t) != old || !r.lockHeld(t) {
		t.Fatalf("after the late failure: alive %v, answer %q, pid file %d (want %d), lock held %v",
			alive(old), muxAnswers(r.sock), r.pid(t), old, r.lockHeld(t))
	}
	installBinary(t, other, r.live)

	_ = syscall.Kill(old, syscall.SIGUSR2)
	waitUntil(t, "the old multiplexor to exit", func() bool {
		select {
		case <-done:
			return true
		default:
			return false
		}
	}, out.String)
	next := r.pid(t)
	if next == old || !alive(next) || !r.lockHeld(t) || muxAnswers(r.sock) != "ok relayok\n" {
		t.Fatalf("after the upgrade: pid file %d (old %d), alive %v, lock held %v, answer %q", next, old, alive(next), r.lockHeld(t), muxAnswers(r.sock))
	}
	if !regexp.MustCompile(`upgrade: serving version="?upgraded[^ ]* pid=` + strconv.Itoa(next) + `\b`).MatchString(out.String()) {
		t.Errorf("the new multiplexor did not say it serves as version upgraded, pid %d", next)
	}
	// The -a socket (inet) and the status page were handed over too: the
	// new multiplexor answers on them.
	if got := restrictedAnswers(port); got != mux.ReplyPrivileged {
		t.Errorf("the -a socket after the upgrade: %q", got)
	}
	if v := webVersion(t, webSock); !strings.HasPrefix(v, "upgraded") {
		t.Errorf("the status page after the upgrade shows version %q, want upgraded", v)
	}
	_ = syscall.Kill(next, syscall.SIGTERM)
	waitGone(t, "the new multiplexor", next)
	// (The pid file is in a directory of root's: defang cannot remove it.)
	for _, f := range []string{r.lockFile, r.sock, webSock} {
		if _, err := os.Lstat(f); err == nil {
			t.Errorf("%s is left after the new multiplexor's SIGTERM", f)
		}
	}
}

// logFile is a log file the test reads whole.
type logFile string

func (l logFile) String() string {
	b, _ := os.ReadFile(string(l))
	return string(b)
}

// upgradedBinary builds sluice once more with the version "upgraded".
func upgradedBinary(t *testing.T) string {
	t.Helper()
	bin, _ := muxBinaries(t)
	other := filepath.Join(filepath.Dir(bin), "sluice-upgraded")
	upgradedOnce.Do(func() {
		out, err := exec.Command("go", "build", "-ldflags", "-X sluice/internal/cli.Version=upgraded", "-o", other, "sluice/cmd/sluice").CombinedOutput()
		if err != nil {
			upgradedErr = err.Error() + "\n" + string(out)
		}
	})
	if upgradedErr != "" {
		t.Fatalf("go build: %s", upgradedErr)
	}
	return other
}

// muxAnswers is the main socket's reply to a relayok, or the error.
func muxAnswers(sock string) string {
	c, err := dialTimeout(sock)
	if err != nil {
		return err.Error()
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := c.Write([]byte("relayok 192.0.2.1 host 25 192.0.2.2 25 Q1\n")); err != nil {
		return err.Error()
	}
	b := make([]byte, 256)
	n, err := c.Read(b)
	if n == 0 {
		return "no reply: " + errString(err)
	}
	return string(b[:n])
}

var (
	upgradedOnce sync.Once
	upgradedErr  string
)

func dialTimeout(sock string) (net.Conn, error) {
	return net.DialTimeout("unix", sock, 20*time.Second)
}

func errString(err error) string {
	if err == nil {
		return "EOF"
	}
	return err.Error()
}

// restrictedAnswers is the -a socket's reply (on 127.0.0.1:port) to a
// relayok, or the error.
func restrictedAnswers(port int) string {
	c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), 20*time.Second)
	if err != nil {
		return err.Error()
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := c.Write([]byte("relayok 192.0.2.1 host 25 192.0.2.2 25 Q1\n")); err != nil {
		return err.Error()
	}
	b, err := io.ReadAll(c)
	if len(b) == 0 {
		return "no reply: " + errString(err)
	}
	return string(b)
}

// webVersion is the version /status.json on the unix socket sock shows.
func webVersion(t *testing.T, sock string) string {
	t.Helper()
	client := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
	resp, err := client.Get("http://mux/status.json")
	if err != nil {
		t.Fatalf("GET /status.json: %v", err)
	}
	defer resp.Body.Close()
	var st status.Status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatalf("/status.json: %v", err)
	}
	return st.Version
}
