package daemons

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"sluice/bench/internal/procstat"
	"time"
)

func TestMain(m *testing.M) {
	RunWatchdogIfAsked() // the watchdog New starts is this test binary
	os.Exit(m.Run())
}

// TestStopAndClose: a daemon that ends on SIGTERM is stopped, one that
// ignores it is killed, and Close removes the directory.
func TestStopAndClose(t *testing.T) {
	s, err := New("daemons-test.", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.Start("sleep", exec.Command("sleep", "60"))
	if err != nil {
		t.Fatal(err)
	}
	trapped := filepath.Join(t.TempDir(), "trapped")
	stubborn, err := s.Start("stubborn", exec.Command("sh", "-c", "trap '' TERM; : >\"$1\"; while :; do sleep 0.05; done", "sh", trapped))
	if err != nil {
		t.Fatal(err)
	}
	if !p.Alive() || !stubborn.Alive() {
		t.Fatal("not alive after Start")
	}
	if !p.Stop(5 * time.Second) {
		t.Error("sleep needed SIGKILL")
	}
	if p.Alive() {
		t.Error("alive after Stop")
	}
	waitFile(t, trapped) // the shell has set its trap
	if stubborn.Stop(300 * time.Millisecond) {
		t.Error("a daemon ignoring SIGTERM stopped by itself")
	}
	b, err := os.ReadFile(filepath.Join(s.Dir, "daemons"))
	if err != nil || len(b) == 0 {
		t.Errorf("the watchdog's list: %q, %v", b, err)
	}
	s.Close(time.Second)
	if _, err := os.Stat(s.Dir); !os.IsNotExist(err) {
		t.Errorf("the directory is still there: %v", err)
	}
}

// TestWatchdog: once the driver is gone (its end of the liveness pipe
// closed), the watchdog stops the daemons listed and removes the
// directory.
func TestWatchdog(t *testing.T) {
	s, err := New("daemons-test.", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.Start("sleep", exec.Command("sleep", "60"))
	if err != nil {
		t.Fatal(err)
	}
	s.alive.Close() // as if the driver had died
	select {
	case <-p.Done():
	case <-time.After(20 * time.Second):
		p.Stop(time.Second)
		t.Fatal("the watchdog did not stop the daemon")
	}
	if err := s.watch.Wait(); err != nil {
		t.Errorf("watchdog: %v", err)
	}
	if _, err := os.Stat(s.Dir); !os.IsNotExist(err) {
		t.Errorf("the directory is still there: %v", err)
	}
}

func TestStopListedSession(t *testing.T) {
	cmd := exec.Command("setsid", "sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Skip("no setsid:", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	f := filepath.Join(t.TempDir(), "daemons")
	// setsid execs sleep in place when it is not a group leader: the
	// session id is the child's pid. Malformed lines are skipped.
	list := "sid " + strconv.Itoa(cmd.Process.Pid) + "\npid x\nbogus\npid 1\n\n"
	if err := os.WriteFile(f, []byte(list), 0o600); err != nil {
		t.Fatal(err)
	}
	waitSession(t, cmd.Process.Pid) // setsid has made its session
	stopListed(f, 5*time.Second)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("the session's process survived")
	}
}

func TestWaits(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	file := filepath.Join(dir, "out")
	if err := os.WriteFile(file, []byte("starting\nready maillog=/x/maillog\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if line, err := WaitLine(ctx, file, "ready ", time.Second, nil); err != nil || line != "ready maillog=/x/maillog" {
		t.Errorf("WaitLine = %q, %v", line, err)
	}
	if _, err := WaitLine(ctx, file, "never", 200*time.Millisecond, nil); err == nil {
		t.Error("WaitLine found a line that is not there")
	}
	sock := filepath.Join(dir, "s")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := WaitSocket(ctx, sock, time.Second, nil); err != nil {
		t.Error(err)
	}
	if err := WaitSocket(ctx, file, 200*time.Millisecond, nil); err == nil {
		t.Error("a regular file taken for a socket")
	}
	// A process that exits ends the wait at once.
	s, err := New("daemons-test.", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(time.Second)
	p, err := s.Start("true", exec.Command("true"))
	if err != nil {
		t.Fatal(err)
	}
	if err := WaitSocket(ctx, filepath.Join(dir, "none"), time.Minute, p); !errors.Is(err, ErrExited) {
		t.Errorf("WaitSocket on an exited process: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := WaitSocket(cctx, filepath.Join(dir, "none"), time.Minute, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("WaitSocket after cancel: %v", err)
	}
}

func TestPorts(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if !Listening(l.Addr().String()) {
		t.Error("a listener not seen")
	}
	if err := WaitTCP(context.Background(), l.Addr().String(), time.Second, nil); err != nil {
		t.Error(err)
	}
	var got []int
	for range 20 {
		p, err := FreeTCPPort(got...)
		if err != nil {
			t.Fatal(err)
		}
		if p < 10000 || slices.Contains(got, p) {
			t.Fatalf("FreeTCPPort = %d (used %v)", p, got)
		}
		got = append(got, p)
	}
}

// waitFile waits up to 10 s for path to exist.
func waitFile(t *testing.T, path string) {
	t.Helper()
	waitCond(t, "no "+path, func() bool { _, err := os.Stat(path); return err == nil })
}

// waitSession waits up to 10 s for pid to lead a session of its own.
func waitSession(t *testing.T, pid int) {
	t.Helper()
	waitCond(t, fmt.Sprintf("process %d leads no session", pid), func() bool {
		st, err := procstat.ReadStat(pid)
		return err == nil && st.Session == pid
	})
}

// waitCond polls cond for up to 10 s, failing with what.
func waitCond(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s after 10 s", what)
		}
	}
}
