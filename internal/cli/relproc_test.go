package cli

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sluice/internal/testutil/logbuf"
	"strings"
	"testing"
	"time"
)

// relProc is a sluice process (serve or mux) started by a test and killed
// at its end if still running.
type relProc struct {
	cmd    *exec.Cmd
	stderr *logbuf.Buffer
	done   chan struct{}
	err    error // after done
}

// startProc starts bin with args, without systemd's notification and
// watchdog variables and with env added, files from fd 3 on; it kills the
// process when the test ends if it still runs.
func startProc(t *testing.T, bin string, args []string, files []*os.File, env ...string) *relProc {
	t.Helper()
	p := &relProc{cmd: exec.Command(bin, args...), stderr: &logbuf.Buffer{}, done: make(chan struct{})}
	p.cmd.Stderr = p.stderr
	p.cmd.ExtraFiles = files
	p.cmd.Env = append(append(os.Environ(), "NOTIFY_SOCKET=", "WATCHDOG_USEC="), env...)
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// relStart starts bin with args and waits until every unix socket in
// socks accepts a connection.
func relStart(t *testing.T, bin string, args []string, socks ...string) *relProc {
	t.Helper()
	p := startProc(t, bin, args, nil)
	p.waitSockets(t, socks...)
	return p
}

// servePassedSocket starts bin with args and the listening socket lf as
// systemd passes it (fd 3, named name).
func servePassedSocket(t *testing.T, bin string, lf *os.File, name string, args ...string) *relProc {
	t.Helper()
	return startProc(t, bin, args, []*os.File{lf}, "LISTEN_FDS=1", "LISTEN_FDNAMES="+name)
}

// serveFromSystemd is servePassedSocket that waits until the daemon says
// it serves the socket it was given.
func serveFromSystemd(t *testing.T, bin string, lf *os.File, name string, args ...string) *relProc {
	t.Helper()
	p := servePassedSocket(t, bin, lf, name, args...)
	waitUntil(t, "the daemon serves the passed socket", func() bool { return strings.Contains(p.stderr.String(), "from_systemd=true") },
		func() string { return p.stderr.String() })
	return p
}

func (p *relProc) waitSockets(t *testing.T, socks ...string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for _, s := range socks {
		for {
			c, err := net.DialTimeout("unix", s, time.Second)
			if err == nil {
				c.Close()
				break
			}
			select {
			case <-p.done:
				t.Fatalf("%s exited (%v) before %s answered:\n%s", p.cmd.Path, p.err, s, p.stderr.String())
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s never answered: %v\n%s", s, err, p.stderr.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

func (p *relProc) pid() int { return p.cmd.Process.Pid }

// wait waits up to limit for the process to exit and returns its error.
func (p *relProc) wait(t *testing.T, limit time.Duration) error {
	t.Helper()
	select {
	case <-p.done:
		return p.err
	case <-time.After(limit):
		t.Fatalf("%s still runs after %v:\n%s", p.cmd.Path, limit, p.stderr.String())
		return nil
	}
}

// writeServeConfig writes dir/sluice.toml for `sluice serve`: state_dir is
// dir, the doors named in off are disabled, body follows. It returns the
// file's path.
func writeServeConfig(t *testing.T, dir, body string, off ...string) string {
	t.Helper()
	text := fmt.Sprintf("state_dir = %q\n", dir)
	for _, door := range off {
		text += fmt.Sprintf("[%s]\nenabled = false\n", door)
	}
	path := filepath.Join(dir, "sluice.toml")
	if err := os.WriteFile(path, []byte(text+body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// senderPolicy is a policy door on listen with one rule: limit messages
// per sender.
func senderPolicy(listen, limit string) string {
	return fmt.Sprintf(`[policy]
listen = [%q]
[[policy.rule]]
name = "sender"
count = "messages"
key = ["sender"]
limit = [%q]
`, listen, limit)
}
