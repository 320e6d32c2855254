package cli

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"sluice/internal/mux"
	"sluice/internal/testutil/muxref"
	"sluice/internal/testutil/peer"
)

// pidFileCase is one state a pid (or lock) path can be in when the mux
// starts: plant makes it and returns the paths whose state must survive.
type pidFileCase struct {
	name   string
	lock   bool // the planted path is the -o lock file, not the -p pid file
	daemon bool // daemon mode (no -D)
	plant  func(t *testing.T, path string, u uids) []string
	reason string // the refusal's reason (regexp), "" if the mux must start
	sub    string // a directory in the spool the pid file is in ("" for none)
}

// uids are the users a case plants files as.
type uids struct{ user, other int }

// fileState is what the test compares before and after a start: type,
// mode, owner, links, link target, contents and modification time.
type fileState struct {
	mode       os.FileMode
	uid, gid   uint32
	nlink      uint64
	target     string
	body       string
	modTimeNsc int64
}

func statFile(t *testing.T, path string) fileState {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	s := fileState{mode: fi.Mode(), uid: st.Uid, gid: st.Gid, nlink: uint64(st.Nlink), modTimeNsc: fi.ModTime().UnixNano()}
	switch {
	case fi.Mode()&os.ModeSymlink != 0:
		if s.target, err = os.Readlink(path); err != nil {
			t.Fatal(err)
		}
	case fi.Mode().IsRegular():
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		s.body = string(b)
	}
	return s
}

// rootSecret is a root-owned 0600 file outside the spool, in a directory
// only root can enter: what an attacker would like root to overwrite.
func rootSecret(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(p, []byte("root's secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func lchown(t *testing.T, path string, uid int) {
	t.Helper()
	if err := os.Lchown(path, uid, -1); err != nil {
		t.Fatal(err)
	}
}

var pidFileCases = []pidFileCase{
	{name: "symlink to a root file", plant: func(t *testing.T, path string, u uids) []string {
		secret := rootSecret(t)
		if err := os.Symlink(secret, path); err != nil {
			t.Fatal(err)
		}
		lchown(t, path, u.user) // planted by the -U user
		return []string{secret, path}
	}, reason: `it is a symbolic link, which sluice never follows`},
	{name: "symlink in daemon mode", daemon: true, plant: func(t *testing.T, path string, u uids) []string {
		secret := rootSecret(t)
		if err := os.Symlink(secret, path); err != nil {
			t.Fatal(err)
		}
		lchown(t, path, u.user)
		return []string{secret, path}
	}, reason: `it is a symbolic link, which sluice never follows`},
	{name: "dangling symlink", plant: func(t *testing.T, path string, u uids) []string {
		dir := t.TempDir()
		if err := os.Symlink(filepath.Join(dir, "created-by-root"), path); err != nil {
			t.Fatal(err)
		}
		lchown(t, path, u.user)
		return []string{dir, path}
	}, reason: `it is a symbolic link, which sluice never follows`},
	{name: "symlinked directory", plant: func(t *testing.T, path string, u uids) []string {
		// The pid path's directory is a link the -U user put in the
		// spool, to a root-only directory holding a root file of that name.
		secret := rootSecret(t)
		if err := os.Rename(secret, filepath.Join(filepath.Dir(secret), filepath.Base(path))); err != nil {
			t.Fatal(err)
		}
		secret = filepath.Join(filepath.Dir(secret), filepath.Base(path))
		link := filepath.Dir(path)
		if err := os.Symlink(filepath.Dir(secret), link); err != nil {
			t.Fatal(err)
		}
		lchown(t, link, u.user)
		return []string{secret, link}
	}, reason: `\S+: symbolic link not followed: .*`, sub: "run"},
	{name: "FIFO", plant: func(t *testing.T, path string, u uids) []string {
		if err := syscall.Mkfifo(path, 0o600); err != nil {
			t.Fatal(err)
		}
		lchown(t, path, u.user)
		return []string{path}
	}, reason: `it is a FIFO, not a regular file`},
	{name: "directory", plant: func(t *testing.T, path string, u uids) []string {
		if err := os.Mkdir(path, 0o700); err != nil {
			t.Fatal(err)
		}
		lchown(t, path, u.user)
		return []string{path}
	}, reason: `it is a directory, not a regular file`},
	{name: "character device", plant: func(t *testing.T, path string, u uids) []string {
		// The null device's numbers: opening it has no effect, so today's
		// code would start on it, not hang or damage anything.
		if err := syscall.Mknod(path, syscall.S_IFCHR|0o600, 1<<8|3); err != nil { // makedev(1, 3)
			t.Fatal(err)
		}
		lchown(t, path, u.user)
		return []string{path}
	}, reason: `it is a character device, not a regular file`},
	{name: "hard link to a root file", plant: func(t *testing.T, path string, u uids) []string {
		// fs.protected_hardlinks keeps the -U user from linking a file it
		// cannot write; root makes the link to stand for a kernel without
		// that protection.
		secret := rootSecret(t)
		if err := os.Link(secret, path); errors.Is(err, syscall.EXDEV) {
			t.Skipf("the temporary directories are on different file systems: %v", err)
		} else if err != nil {
			t.Fatal(err)
		}
		return []string{secret}
	}, reason: `it has 2 hard links; sluice writes only a file with one`},
	{name: "file of another user", plant: func(t *testing.T, path string, u uids) []string {
		if err := os.WriteFile(path, []byte("not root's, not the -U user's\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		lchown(t, path, u.other)
		return []string{path}
	}, reason: fmt.Sprintf(`it is owned by uid %d, neither root nor `, uidNobody) + "defang"},
	{name: "lock file symlink", lock: true, plant: func(t *testing.T, path string, u uids) []string {
		dir := deployDir(t) // the -U user reaches it
		target := filepath.Join(dir, "lock-target")
		if err := os.WriteFile(target, []byte("the -U user's file\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		lchown(t, target, u.user)
		lchown(t, dir, u.user)
		if err := os.Symlink(target, path); err != nil {
			t.Fatal(err)
		}
		lchown(t, path, u.user)
		return []string{target, path}
	}, reason: `it is a symbolic link, which sluice never follows`},
	// A stale pid file of an earlier run is taken over, whether root or
	// the -U user owns it.
	{name: "stale pid file of root", plant: func(t *testing.T, path string, u uids) []string {
		if err := os.WriteFile(path, []byte("99999999\nand more\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return nil
	}},
	{name: "stale pid file of the user", plant: func(t *testing.T, path string, u uids) []string {
		if err := os.WriteFile(path, []byte("99999999\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		lchown(t, path, u.user)
		return nil
	}},
}

// uidNobody owns the "file of another user" case's file.
const uidNobody = 65534

// TestMuxRefusesUnsafePidFile: as root with -U defang, `sluice mux` opens
// its pid file before the privilege drop, in a directory the -U user may
// own (docs/mux.md once put it in the spool). Whatever the -U user could
// have put at the pid path (a symbolic link to a root-only file, a
// dangling one, a FIFO, a directory, a hard link to a root-only file, a
// file of a third user) is refused as the reference refuses a pid file it
// cannot open: exit status 1 before anything is bound, with one line
// naming the file and the reason on stderr and in syslog. Every file
// planted or pointed at is unchanged afterwards, byte for byte and mode
// for mode. The lock file (opened after the drop) is held to the same
// rule. A stale regular pid file of root or of the -U user is taken over.
func TestMuxRefusesUnsafePidFile(t *testing.T) {
	peer.Root(t, "the pid file is opened before the privilege drop only when started as root")
	bin, worker := muxBinaries(t)
	uarg, u := asUser(t)
	uid, _ := strconv.Atoi(u.Uid)
	for _, c := range pidFileCases {
		t.Run(c.name, func(t *testing.T) {
			spool := spoolDir(t, u)
			t.Cleanup(func() { killMuxesIn(t, spool) })
			pidFile := filepath.Join(spool, c.sub, "mimedefang-multiplexor.pid")
			lockFile := filepath.Join(spool, "mimedefang-multiplexor.pid.lock")
			planted := pidFile
			if c.lock {
				planted = lockFile
			}
			kept := c.plant(t, planted, uids{user: uid, other: uidNobody})
			before := map[string]fileState{}
			for _, p := range kept {
				before[p] = statFile(t, p)
			}
			// The lock file is opened, and its refusal logged, as the -U user.
			logSock := filepath.Join(deployDir(t), "log")
			logs, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: logSock, Net: "unixgram"})
			if err != nil {
				t.Fatal(err)
			}
			defer logs.Close()
			if err := os.Chmod(logSock, 0o666); err != nil {
				t.Fatal(err)
			}
			sock := filepath.Join(spool, "mx.sock")
			args := []string{"mux", "-z", spool, "-s", "unix:" + sock, "-p", pidFile, "-o", lockFile, "-f", worker, "-m", "1"}
			if !c.daemon {
				args = append(args, "-D")
			}
			p := startProc(t, bin, append(args, uarg...), nil, muxSyslogEnv+"="+logSock)
			serving := exitedOrServing(t, p, sock)
			if c.reason == "" {
				if !serving {
					t.Fatalf("sluice mux exited (%v):\n%s", p.err, p.stderr.String())
				}
				b, err := os.ReadFile(pidFile)
				if want := fmt.Sprintf("%d\n", p.pid()); err != nil || string(b) != want {
					t.Errorf("pid file %q (%v), want %q", b, err, want)
				}
				if got := fileMode(t, pidFile); got != 0o644 {
					t.Errorf("pid file mode %o, want 644", got)
				}
				return
			}
			for path, was := range before {
				if now := statFile(t, path); now != was {
					t.Errorf("%s changed:\n before %+v\n after  %+v", path, was, now)
				}
			}
			if serving {
				t.Fatalf("sluice mux started with the planted %s; stderr:\n%s", planted, p.stderr.String())
			}
			what, prefix := "PID file", "sluice mux: "
			if c.lock {
				what, prefix = "lock file", ""
			}
			if c.daemon {
				prefix = "sluice mux: " // the parent refuses before it detaches
			}
			want := regexp.MustCompile("^" + regexp.QuoteMeta(prefix+"Could not open "+what+" "+planted+": ") + c.reason + "\n$")
			if code := exitCode(t, p.err); code != 1 || !want.MatchString(p.stderr.String()) {
				t.Errorf("exit %d, stderr %q; want 1 and %s", code, p.stderr.String(), want)
			}
			line := readDatagram(t, logs)
			if !regexp.MustCompile(regexp.QuoteMeta(ReferenceName+"[") + `\d+\]: ` + regexp.QuoteMeta("Could not open "+what+" "+planted+": ") + c.reason + "$").MatchString(line) {
				t.Errorf("syslog %q", line)
			}
			if _, err := os.Stat(sock); err == nil {
				t.Errorf("%s bound: the refusal came too late", sock)
			}
		})
	}
}

// TestMuxPidFileSymlinkReference is the other side of the deliberate
// difference pid-file-nofollow: Debian's mimedefang-multiplexor, given
// the same planted symbolic link, follows it as root, so the root-only
// file ends up holding the daemon's pid, mode 0644.
func TestMuxPidFileSymlinkReference(t *testing.T) {
	peer.Root(t, "the reference opens the pid file as root only when started as root")
	muxref.Mux(t)
	if _, ok := mux.LookupDifference("pid-file-nofollow"); !ok {
		t.Fatal("pid-file-nofollow is not in mux.Differences")
	}
	_, worker := muxBinaries(t)
	uarg, u := asUser(t)
	spool := spoolDir(t, u)
	t.Cleanup(func() { killMuxesIn(t, spool) })
	secret := rootSecret(t)
	pidFile := filepath.Join(spool, "mimedefang-multiplexor.pid")
	if err := os.Symlink(secret, pidFile); err != nil {
		t.Fatal(err)
	}
	lchown(t, pidFile, os.Getuid())
	// Daemon mode: the reference's parent exits 0 once its daemon serves.
	ref := muxref.Command(t, append([]string{referenceMux, "-z", spool, "-s", filepath.Join(spool, "mx.sock"), "-p", pidFile, "-f", worker, "-m", "1"}, uarg...)...)
	if out, err := ref.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", referenceMux, err, out)
	}
	b, err := os.ReadFile(secret)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSuffix(string(b), "\n"))
	if err != nil {
		t.Fatalf("the reference did not write its pid through the link: %s holds %q", secret, b)
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitGone(t, "the reference", pid)
	if got := fileMode(t, secret); got != 0o644 {
		t.Errorf("%s: mode %o after the reference, want 644 (it follows the link and chmods)", secret, got)
	}
}

// exitedOrServing waits until p exits (false) or its socket sock accepts
// a connection (true). In daemon mode the parent exits either way: the
// exit status says which.
func exitedOrServing(t *testing.T, p *relProc, sock string) bool {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second) // a guard against a hang, not a measure
	for {
		select {
		case <-p.done:
			return p.err == nil
		default:
		}
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			return true
		}
		if time.Now().After(deadline) {
			t.Fatalf("sluice mux neither exited nor served in 60 s:\n%s", p.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// readDatagram reads one syslog datagram.
func readDatagram(t *testing.T, pc *net.UnixConn) string {
	t.Helper()
	_ = pc.SetReadDeadline(time.Now().Add(20 * time.Second)) // a guard: the line is sent before the exit
	buf := make([]byte, 8192)
	n, err := pc.Read(buf)
	if err != nil {
		t.Errorf("no syslog datagram: %v", err)
		return ""
	}
	return string(buf[:n])
}

// killMuxesIn kills any process whose command line names spool: a daemon
// a test started that still runs.
func killMuxesIn(t *testing.T, spool string) {
	t.Helper()
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range procs {
		b, err := os.ReadFile(f)
		if err != nil || !bytes.Contains(b, []byte(spool)) {
			continue
		}
		pid, err := strconv.Atoi(strings.Split(f, "/")[2])
		if err == nil && pid != os.Getpid() {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Logf("killed pid %d (%q)", pid, bytes.ReplaceAll(b, []byte{0}, []byte{' '}))
		}
	}
}
