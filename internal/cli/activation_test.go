package cli

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"sluice/internal/testutil/logbuf"
	"sluice/internal/testutil/peer"

	"sluice/internal/anvil/anviltest"
)

// socketActivate starts `sluice serve -c cfg` under systemd's own
// socket-activation helper, systemd-socket-activate(1), which binds
// listen (unix paths or host:port) as socket units would, names them
// fdname, and execs sluice at the first connection. It returns once the
// sockets are bound, before sluice runs.
func socketActivate(t *testing.T, cfg, fdname string, listen ...string) *relProc {
	t.Helper()
	bin, _ := muxBinaries(t)
	return activate(t, fdname, listen, bin, "serve", "-c", cfg)
}

// activate runs argv under systemd-socket-activate(1), which binds listen
// as socket units would, names them fdname, and execs argv at the first
// connection. It returns once the sockets are bound, before argv runs.
func activate(t *testing.T, fdname string, listen []string, argv ...string) *relProc {
	t.Helper()
	sa := peer.Binary(t, "systemd", "systemd-socket-activate")
	args := []string{"--fdname=" + fdname}
	for _, l := range listen {
		args = append(args, "-l", l)
	}
	args = append(args, argv...)
	p := &relProc{cmd: exec.Command(sa, args...), stderr: &logbuf.Buffer{}, done: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), "NOTIFY_SOCKET=", "WATCHDOG_USEC=")
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	// "Listening on ADDR as FD." per socket, then it waits.
	r := bufio.NewReader(stderr)
	for range listen {
		line, err := r.ReadString('\n')
		if err != nil || !strings.HasPrefix(line, "Listening on ") {
			t.Fatalf("systemd-socket-activate: %q %v", line, err)
		}
	}
	go func() {
		_, _ = io.Copy(p.stderr, r)
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	return p
}

// TestSocketActivation: under systemd-socket-activate, sluice serves the
// sockets systemd bound (a unix socket for anvil, a loopback TCP port for
// policy) instead of binding its own, and answers the request that was
// sent before it even ran; the milter socket, which systemd did not pass,
// it binds itself. The unix socket keeps systemd's inode and mode, and
// stays when sluice exits, for the next start.
func TestSocketActivation(t *testing.T) {
	dir := t.TempDir()
	anvilSock := filepath.Join(dir, "anvil")
	port := freePort(t)
	cfg := filepath.Join(dir, "sluice.toml")
	writeFile(t, cfg, fmt.Sprintf(`state_dir = %q
[anvil]
listen = ["unix:anvil"]
[policy]
listen = ["inet:127.0.0.1:%d"]
[throttle]
enabled = false
[milter]
listen = ["unix:milter"]
`, dir, port))
	p := socketActivate(t, cfg, "sluice.socket", anvilSock, fmt.Sprintf("127.0.0.1:%d", port))
	before, err := os.Stat(anvilSock)
	if err != nil {
		t.Fatal(err)
	}

	// The first request reaches the socket before sluice runs: it waits
	// in the backlog while systemd-socket-activate execs sluice.
	cl, err := anviltest.Dial("unix", anvilSock, false)
	if err != nil {
		t.Fatal(err)
	}
	got, err := cl.Do("connect", "smtp:192.0.2.1")
	cl.Close()
	if err != nil || got["status"] != 0 || got["count"] != 1 {
		t.Fatalf("anvil connect through the activated socket: %v %v\n%s", got, err, p.stderr.String())
	}
	c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(c, policyRequest); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	c.Close()
	if err != nil || !strings.HasPrefix(line, "action=") {
		t.Fatalf("policy through the activated port: %q %v", line, err)
	}
	p.waitSockets(t, filepath.Join(dir, "milter"))
	askMilter(t, filepath.Join(dir, "milter"))

	after, err := os.Stat(anvilSock)
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(before, after) || after.Mode() != before.Mode() {
		t.Errorf("the anvil socket was replaced or changed (%v -> %v): sluice bound its own instead of systemd's", before.Mode(), after.Mode())
	}
	for _, want := range []string{`msg="anvil service listening" listen=unix:anvil`, `msg="policy service listening"`} {
		if !logHas(p.stderr.String(), want, "from_systemd=true") {
			t.Errorf("no log line with %s and from_systemd=true:\n%s", want, p.stderr.String())
		}
	}
	if !logHas(p.stderr.String(), `msg="milter service listening"`, "from_systemd=false") {
		t.Errorf("the milter socket should be sluice's own:\n%s", p.stderr.String())
	}

	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if err := p.wait(t, 60*time.Second); err != nil {
		t.Fatalf("exit: %v\n%s", err, p.stderr.String())
	}
	if _, err := os.Stat(anvilSock); err != nil {
		t.Errorf("systemd's socket is gone after sluice exited: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "milter")); err == nil {
		t.Errorf("sluice's own milter socket is left behind after exit")
	}
}

// TestSocketActivationUnclaimed: a socket systemd passes that no listen
// address names would take connections no one answers; sluice refuses to
// start and says which.
func TestSocketActivationUnclaimed(t *testing.T) {
	dir := t.TempDir()
	stray := filepath.Join(dir, "stray")
	cfg := filepath.Join(dir, "sluice.toml")
	writeFile(t, cfg, fmt.Sprintf(`state_dir = %q
[anvil]
listen = ["unix:anvil"]
[policy]
enabled = false
[throttle]
enabled = false
[milter]
enabled = false
`, dir))
	p := socketActivate(t, cfg, "stray.socket", stray)
	c, err := net.Dial("unix", stray) // starts sluice
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	err = p.wait(t, 60*time.Second)
	var ee *exec.ExitError
	if err == nil || !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("sluice with a stray socket: exit %v, want status 1\n%s", err, p.stderr.String())
	}
	if want := "no listen address in the configuration names: stray.socket (" + stray + ")"; !strings.Contains(p.stderr.String(), want) {
		t.Fatalf("stderr does not say %q:\n%s", want, p.stderr.String())
	}
}

// logHas reports whether one line of log holds every part.
func logHas(log string, parts ...string) bool {
	for _, line := range strings.Split(log, "\n") {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			return true
		}
	}
	return false
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}
