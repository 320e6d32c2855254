package cli

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"sluice/internal/testutil/peer"
)

// asSluice runs argv as user sluice (the attacker: a compromised daemon
// user, or anyone who has its uid) and fails the test if it fails.
func asSluice(t *testing.T, argv ...string) {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = credential(t, "sluice")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("as sluice: %v: %v\n%s", argv, err, out)
	}
}

// rootFile is a root-only file outside sluice's directories; the
// returned check fails the test if anything about it changed.
func rootFile(t *testing.T, dir string) (string, func()) {
	t.Helper()
	path := filepath.Join(dir, "root-only")
	const body = "root's own file\n"
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, func() {
		t.Helper()
		var st syscall.Stat_t
		if err := syscall.Lstat(path, &st); err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(path)
		if st.Mode&0o7777 != 0o600 || st.Uid != 0 || string(b) != body {
			t.Errorf("root's file changed: mode %04o owner %d content %q", st.Mode&0o7777, st.Uid, b)
		}
	}
}

// vmRSS is a process's resident memory in kB.
func vmRSS(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			n, _ := strconv.Atoi(f[1])
			return n
		}
	}
	t.Fatalf("no VmRSS in /proc/%d/status", pid)
	return 0
}

// TestRootStartHostileStateFiles: sluice started by root with user =
// "sluice", as docs/operations.md has it, while whoever has the sluice
// uid planted something in its state directory before the start: a link
// from the snapshot to /dev/zero or to a root-only file, a FIFO, a 1 GiB
// sparse file, a link where the booking journal's temporary file goes.
// Every time the daemon serves (the policy socket answers), says what it
// refused in one ERROR line where there is something to refuse, stays
// small (the file is not read whole), and root's file is unchanged after
// a stop that writes the snapshot again. Before the root phase, the
// journal's link made root truncate that file and the FIFO hung the
// start for ever.
func TestRootStartHostileStateFiles(t *testing.T) {
	peer.Root(t, "the attack is on a root start")
	bin := buildSluice(t)
	cases := []struct {
		name   string
		plant  func(t *testing.T, state, victim string)
		errors int // ERROR lines expected
	}{
		{"snapshot->/dev/zero", func(t *testing.T, s, _ string) {
			asSluice(t, "ln", "-s", "/dev/zero", filepath.Join(s, "store.snapshot"))
		}, 1},
		{"snapshot->root file", func(t *testing.T, s, v string) { asSluice(t, "ln", "-s", v, filepath.Join(s, "store.snapshot")) }, 1},
		{"snapshot FIFO", func(t *testing.T, s, _ string) { asSluice(t, "mkfifo", filepath.Join(s, "store.snapshot")) }, 1},
		{"snapshot 1 GiB sparse", func(t *testing.T, s, _ string) {
			asSluice(t, "truncate", "-s", "1G", filepath.Join(s, "store.snapshot"))
		}, 1},
		// The old journal's name, next to no base of its version: not
		// read, and the link removed at the first write.
		{"journal->root file", func(t *testing.T, s, v string) {
			asSluice(t, "ln", "-s", v, filepath.Join(s, "store.snapshot.bookings"))
		}, 0},
		{"journal temp->root file", func(t *testing.T, s, v string) {
			asSluice(t, "ln", "-s", v, filepath.Join(s, "store.snapshot.bookings.tmp"))
		}, 0},
		{"nothing planted", func(*testing.T, string, string) {}, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			base := deployDir(t)
			victim, unchanged := rootFile(t, base)
			state := filepath.Join(base, "state")
			if err := os.Mkdir(state, 0o750); err != nil {
				t.Fatal(err)
			}
			chownNames(t, state, "sluice", "sluice") // as an earlier start left it
			uid, _ := strconv.Atoi(peer.User(t, "sluice").Uid)
			c.plant(t, state, victim)
			run := filepath.Join(base, "run")
			cfg := filepath.Join(base, "sluice.toml")
			body := fmt.Sprintf("user = \"sluice\"\nstate_dir = %q\nruntime_dir = %q\n", state, run)
			if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
			p := relStart(t, bin, []string{"serve", "-c", cfg}, filepath.Join(run, "policy"))
			// The socket accepts from the root phase on; the daemon serves
			// (and reads SIGTERM as a stop) once it says so.
			p.stderr.WaitFor(t, "sluice started")
			assertUnprivileged(t, p.pid(), "sluice")
			// Every state file is opened by the daemon's user, not by root
			// before the switch (which made the journal root's, and wrote
			// through a link planted at its name).
			for _, name := range []string{"store.snapshot", "store.snapshot.bookings"} {
				var st syscall.Stat_t
				if err := syscall.Lstat(filepath.Join(state, name), &st); err == nil && st.Mode&syscall.S_IFMT == syscall.S_IFREG && int(st.Uid) != uid {
					t.Errorf("%s is owned by uid %d, want sluice (%d)", name, st.Uid, uid)
				}
			}
			if rss := vmRSS(t, p.pid()); rss > 30<<10 {
				t.Errorf("RSS %d kB after the start: the planted file was read", rss)
			}
			if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if err := p.wait(t, 30*time.Second); err != nil {
				t.Errorf("stop: %v", err)
			}
			logs := p.stderr.String()
			if n := strings.Count(logs, "level=ERROR"); n != c.errors {
				t.Errorf("%d ERROR lines, want %d:\n%s", n, c.errors, logs)
			}
			unchanged()
		})
	}
}

// TestStopWhileStarting: a SIGTERM while the start waits (here on a
// Redis server that accepts and never answers, with a 60 s dial
// timeout) ends sluice at once, started as root through its root phase
// or as its own user alike: no step of a start keeps a stop waiting.
func TestStopWhileStarting(t *testing.T) {
	bin := buildSluice(t)
	for _, asRoot := range []bool{false, true} {
		t.Run(fmt.Sprintf("root=%v", asRoot), func(t *testing.T) {
			if asRoot {
				peer.Root(t, "the root phase runs as root")
			}
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			accepted := make(chan net.Conn, 1)
			go func() {
				if c, err := l.Accept(); err == nil {
					accepted <- c
				}
			}()
			base := deployDir(t)
			user := ""
			if asRoot {
				user = "user = \"sluice\"\n"
			}
			body := fmt.Sprintf("%sstate_dir = %q\n[store]\nkind = \"redis\"\n[store.redis]\naddrs = [%q]\ndial_timeout = \"60s\"\n",
				user, filepath.Join(base, "state"), l.Addr().String())
			cfg := filepath.Join(base, "sluice.toml")
			if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
			p := startProc(t, bin, []string{"serve", "-c", cfg}, nil)
			var c net.Conn
			select {
			case c = <-accepted:
				defer c.Close()
			case <-p.done:
				t.Fatalf("sluice ended before it reached Redis: %v\n%s", p.err, p.stderr.String())
			case <-time.After(60 * time.Second):
				t.Fatalf("sluice never connected to Redis:\n%s", p.stderr.String())
			}
			if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			// Far below the dial timeout the start would otherwise wait out.
			err = p.wait(t, 20*time.Second)
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(p.stderr.String(), "stopping while starting") {
				t.Errorf("exit %v, want 1 after \"stopping while starting\":\n%s", err, p.stderr.String())
			}
		})
	}
}
