package cli

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"sluice/internal/testutil/peer"
)

// installBinary puts src at dst as an upgrade does: a copy beside it,
// renamed over it (the running daemon keeps its own file).
func installBinary(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	tmp := dst + ".new"
	if err := os.WriteFile(tmp, b, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		t.Fatal(err)
	}
}

// gone reports whether pid has exited (a zombie counts as gone).
func gone(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	_, rest, _ := bytes.Cut(b, []byte(") "))
	return len(rest) > 0 && rest[0] == 'Z'
}

// killStarted kills, when the test ends, every daemon whose start p's
// log names (those an upgrade started write to p's stderr too, and the
// test's wait for p's end is a wait for that output's end).
func killStarted(t *testing.T, p *relProc) {
	t.Cleanup(func() {
		for _, m := range regexp.MustCompile(`msg="sluice started" .* pid=(\d+)`).FindAllStringSubmatch(p.stderr.String(), -1) {
			if pid, err := strconv.Atoi(m[1]); err == nil && pid > 1 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
}

var servesRE = regexp.MustCompile(`upgrade: the new process serves; exiting" pid=(\d+)`)

// TestUpgradeUnderPostfixLoad upgrades `sluice serve`, started by root
// with user = "sluice" and no systemd, three times by SIGUSR2 to another
// binary installed over its own (a build with another version), while
// the Postfix of TestRestartUnderPostfixLoad takes mail from eight
// clients through the milter, the policy door and anvil. Before them, a
// binary that dies at once and a configuration the new process refuses:
// each leaves the old daemon serving and says why. The same promises as
// for the restarts hold at the SMTP clients, and each new daemon runs as
// sluice with no capability, its version the one installed.
func TestUpgradeUnderPostfixLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("Postfix under load and three upgrades")
	}
	peer.Root(t, "the daemon is started by root and switches to the user sluice")
	m := startMTADeployment(t, "user = \"sluice\"\n")
	binDir := filepath.Join(m.base, "bin")
	mkdirOwned(t, binDir, "root", "root", 0o755)
	other := filepath.Join(m.base, "sluice-upgraded")
	if out, err := exec.Command("go", "build", "-ldflags", "-X sluice/internal/cli.Version=upgraded", "-o", other, "sluice/cmd/sluice").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	live := filepath.Join(binDir, "sluice")
	installBinary(t, m.bin, live)
	p := startProc(t, live, []string{"serve", "-c", m.cfgPath}, nil)
	killStarted(t, p)
	waitUntil(t, "the daemon serves", func() bool { return strings.Contains(p.stderr.String(), "sluice started") },
		func() string { return p.stderr.String() })
	pid := p.pid()
	t.Cleanup(func() {
		_ = syscall.Kill(pid, syscall.SIGTERM)
		for deadline := time.Now().Add(30 * time.Second); !gone(pid) && time.Now().Before(deadline); {
			time.Sleep(20 * time.Millisecond)
		}
		_ = syscall.Kill(pid, syscall.SIGKILL)
	})
	load, stop := startLoad(m.ctx, m.smtpPort)
	load.waitSessions(t, loadClients)
	upgradeFails := func(why string) {
		t.Helper()
		before := strings.Count(p.stderr.String(), "upgrade failed: the new process did not take over; still serving")
		_ = syscall.Kill(pid, syscall.SIGUSR2)
		waitUntil(t, "the failed upgrade "+why, func() bool {
			return strings.Count(p.stderr.String(), "upgrade failed: the new process did not take over; still serving") > before
		}, func() string { return p.stderr.String() })
		if gone(pid) {
			t.Fatalf("the daemon exited after a failed upgrade (%s)", why)
		}
	}
	installBinary(t, "/bin/false", live)
	upgradeFails("to a binary that exits at once")
	cfg, err := os.ReadFile(m.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	installBinary(t, other, live)
	if err := os.WriteFile(m.cfgPath+".bad", append([]byte("bogus = 1\n"), cfg...), 0o644); err != nil {
		t.Fatal(err)
	}
	// The running daemon watches the file: a bad file is a failed reload
	// for it, and a refused configuration for the new process.
	if err := os.Rename(m.cfgPath+".bad", m.cfgPath); err != nil {
		t.Fatal(err)
	}
	upgradeFails("to a configuration with an error")
	if err := os.WriteFile(m.cfgPath+".good", cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(m.cfgPath+".good", m.cfgPath); err != nil {
		t.Fatal(err)
	}

	const upgrades = 3
	t0 := time.Now()
	for i := range upgrades {
		load.waitSessions(t, loadClients)
		bin, version := other, "upgraded"
		if i%2 == 1 {
			bin, version = m.bin, "(devel)"
		}
		installBinary(t, bin, live)
		_ = syscall.Kill(pid, syscall.SIGUSR2)
		waitUntil(t, fmt.Sprintf("upgrade %d", i+1), func() bool { return len(servesRE.FindAllStringSubmatch(p.stderr.String(), -1)) > i },
			func() string { return p.stderr.String() })
		next, _ := strconv.Atoi(servesRE.FindAllStringSubmatch(p.stderr.String(), -1)[i][1])
		waitUntil(t, "the old daemon to exit", func() bool { return gone(pid) }, func() string { return p.stderr.String() })
		pid = next
		assertUnprivileged(t, pid, "sluice")
		started := regexp.MustCompile(`msg="sluice started" version=("[^"]*"|\S+) .* pid=` + strconv.Itoa(pid) + `\b`).FindStringSubmatch(p.stderr.String())
		if started == nil || !strings.HasPrefix(strings.Trim(started[1], `"`), version) {
			t.Errorf("upgrade %d: the new daemon's start line %q, want version %q", i+1, started, version)
		}
	}
	load.waitSessions(t, loadClients)
	stop()
	t.Logf("%d upgrades in %v", upgrades, time.Since(t0).Round(time.Millisecond))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the daemons' log:\n%s", p.stderr.String())
		}
	})
	load.check(t)
}

// TestUpgradeTellsSystemd: under systemd (NOTIFY_SOCKET), the old daemon
// says it is stopping when the new one takes over, then names the new
// one the main process (MAINPID=, READY=1) before it exits, as systemd
// needs to keep the service running across the exit of the process it
// started; the new daemon then says READY=1 itself and serves the same
// socket.
func TestUpgradeTellsSystemd(t *testing.T) {
	bin, _ := muxBinaries(t)
	dir := t.TempDir()
	cfg := writeServeConfig(t, dir, senderPolicy("unix:policy", "100/60s exact"), "anvil", "milter", "throttle")
	notifyPath := filepath.Join(dir, "notify")
	n, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: notifyPath, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	read := func(want string) string {
		t.Helper()
		buf := make([]byte, 4096)
		_ = n.SetReadDeadline(time.Now().Add(30 * time.Second))
		for {
			k, err := n.Read(buf)
			if err != nil {
				t.Fatalf("waiting for %q: %v", want, err)
			}
			if msg := string(buf[:k]); strings.Contains(msg, want) {
				return msg
			}
		}
	}
	p := startProc(t, bin, []string{"serve", "-c", cfg}, nil, "NOTIFY_SOCKET="+notifyPath)
	killStarted(t, p)
	read("READY=1")
	sock := filepath.Join(dir, "policy")
	askPolicy(t, sock)
	if err := p.cmd.Process.Signal(syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	read("STOPPING=1")
	msg := read("MAINPID=")
	m := regexp.MustCompile(`MAINPID=(\d+)`).FindStringSubmatch(msg)
	next, _ := strconv.Atoi(m[1])
	if next == p.pid() || !strings.Contains(msg, "READY=1") {
		t.Fatalf("the old daemon told systemd %q", msg)
	}
	t.Cleanup(func() { _ = syscall.Kill(next, syscall.SIGKILL) })
	// Its stderr, which the test reads, is the new one's too: wait for the
	// process, not for the end of its output.
	waitUntil(t, "the old daemon to exit", func() bool { return gone(p.pid()) }, func() string { return p.stderr.String() })
	read("READY=1") // the new one, now the main process
	askPolicy(t, sock)
	if gone(next) {
		t.Fatal("the new daemon is gone")
	}
	_ = syscall.Kill(next, syscall.SIGTERM)
	for deadline := time.Now().Add(30 * time.Second); !gone(next) && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	if !gone(next) {
		t.Error("the new daemon does not stop on SIGTERM")
	}
}

// TestUpgradeFailsLateResumes: a new process that fails after the old
// daemon stopped for it (its configuration, changed on disk meanwhile,
// names a Redis no one serves: valid, but the start cannot connect) does
// not leave the listeners unserved: the old process starts serving again
// on the same sockets, with the configuration it was running.
func TestUpgradeFailsLateResumes(t *testing.T) {
	bin, _ := muxBinaries(t)
	dir := t.TempDir()
	cfg := writeServeConfig(t, dir, senderPolicy("unix:policy", "100/60s exact"), "anvil", "milter", "throttle")
	p := startProc(t, bin, []string{"serve", "-c", cfg}, nil)
	killStarted(t, p)
	waitUntil(t, "the daemon serves", func() bool { return strings.Contains(p.stderr.String(), "sluice started") },
		func() string { return p.stderr.String() })
	sock := filepath.Join(dir, "policy")
	askPolicy(t, sock)
	port := freePort(t) // nothing listens there
	appendFile(t, cfg, fmt.Sprintf("[store]\nkind = \"redis\"\n[store.redis]\naddrs = [\"127.0.0.1:%d\"]\ndial_timeout = \"1s\"\n", port))
	if err := p.cmd.Process.Signal(syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the old daemon to start again", func() bool {
		return strings.Count(p.stderr.String(), "sluice started") == 2 && strings.Contains(p.stderr.String(), "upgrade failed after this daemon stopped; serving again on the same sockets")
	}, func() string { return p.stderr.String() })
	if gone(p.pid()) {
		t.Fatal("the old daemon is gone")
	}
	askPolicy(t, sock) // the same socket, served again
	if !strings.Contains(p.stderr.String(), fmt.Sprintf("pid=%d", p.pid())) {
		t.Errorf("the second start is not the old process's:\n%s", p.stderr.String())
	}
}
