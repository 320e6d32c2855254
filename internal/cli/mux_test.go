package cli

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"sluice/internal/testutil/logbuf"
	"sluice/internal/testutil/muxref"
	"sluice/internal/testutil/peer"

	"go.uber.org/goleak"

	"sluice/internal/pool/pooltest"
	"sluice/internal/socketmap"
)

// binDir holds the sluice binary and the fake worker, built once by
// muxBinaries; it is world-readable so that a -U user can run them.
var binDir string

// TestMain runs the tests with default directories of their own
// (privateDefaults), removes the binaries muxBinaries built, and checks
// that no goroutine is left behind.
func TestMain(m *testing.M) {
	remove, err := privateDefaults()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	remove()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	if code == 0 {
		if err := goleak.Find(goleak.IgnoreTopFunction("os/signal.signal_recv")); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

var (
	buildOnce          sync.Once
	sluiceBin, fakeBin string
	buildErr           error
)

func muxBinaries(t *testing.T) (sluice, worker string) {
	t.Helper()
	buildOnce.Do(func() {
		if binDir, buildErr = os.MkdirTemp("", "sluice-mux-bin"); buildErr != nil {
			return
		}
		if buildErr = os.Chmod(binDir, 0o755); buildErr != nil {
			return
		}
		sluiceBin = filepath.Join(binDir, "sluice")
		cmd := exec.Command("go", "build", "-o", sluiceBin, "sluice/cmd/sluice")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
			return
		}
		fakeBin, buildErr = pooltest.BuildFakeWorker(binDir)
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return sluiceBin, fakeBin
}

func TestMuxInvoked(t *testing.T) {
	for name, want := range map[string]string{
		"/usr/sbin/mimedefang-multiplexor": "mux",
		"mimedefang-multiplexor":           "mux",
		"sluice":                           "",
		"/usr/bin/sluice":                  "",
		"mimedefang-multiplexor.old":       "",
	} {
		if got := Invoked(name); got != want {
			t.Errorf("Invoked(%q) = %q, want %q", name, got, want)
		}
	}
}

func TestMuxFlags(t *testing.T) {
	def := func(f func(o *muxOptions)) *muxOptions {
		o := defaultMuxOptions()
		o.MinWorkers, o.Backlog = 1, 5
		o.Socket = "/var/spool/MIMEDefang/mimedefang-multiplexor.sock"
		f(o)
		return o
	}
	cases := []struct {
		args []string
		want *muxOptions
	}{
		{nil, def(func(*muxOptions) {})},
		// Clamps of docs/protocols/mimedefang-multiplexor.md, "Startup" step 8 and "Command-line options".
		{[]string{"-x", "0", "-m", "5"}, def(func(o *muxOptions) { o.MaxWorkers, o.MinWorkers = 1, 1 })},
		{[]string{"-x", "8", "-m", "20", "-y", "8"}, def(func(o *muxOptions) { o.MaxWorkers, o.MinWorkers = 8, 8 })},
		{[]string{"-x", "8", "-y", "-1"}, def(func(o *muxOptions) { o.MaxWorkers = 8 })},
		{[]string{"-x", "8", "-y", "7"}, def(func(o *muxOptions) { o.MaxWorkers, o.DomainLimit = 8, 7 })},
		{[]string{"-r", "0", "-V", "-5", "-i", "3", "-b", "9", "-c", "1", "-w", "0", "-W", "-2"}, def(func(o *muxOptions) {
			o.MaxRequests, o.Lifetime, o.Idle, o.Busy, o.Cmd, o.Slew, o.Spacing = 1, 0, 10*time.Second, 10*time.Second, 10*time.Second, time.Second, 0
		})},
		{[]string{"-q", "128", "-Q", "0"}, def(func(o *muxOptions) { o.Queue, o.QueueTimeout = 128, time.Second })},
		{[]string{"-q", "-3", "-Q", "9999"}, def(func(o *muxOptions) { o.QueueTimeout = 600 * time.Second })},
		{[]string{"-x", "100"}, def(func(o *muxOptions) { o.MaxWorkers, o.Backlog = 100, 25 })},
		{[]string{"-x", "2000"}, def(func(o *muxOptions) { o.MaxWorkers, o.Backlog = 2000, 200 })},
		{[]string{"-I", "1"}, def(func(o *muxOptions) { o.backlogSet = true })},
		{[]string{"-I", "37"}, def(func(o *muxOptions) { o.Backlog, o.backlogSet = 37, true })},
		{[]string{"-I", "999"}, def(func(o *muxOptions) { o.Backlog, o.backlogSet = 200, true })},
		{[]string{"-L", "2", "-X", "-1", "-P", "99"}, def(func(o *muxOptions) {
			o.LogInterval, o.Ticks = 5*time.Second, 30
		})},
		{[]string{"-L", "-1", "-P", "0"}, def(func(*muxOptions) {})},
		// sscanf("%d"): trailing garbage ignored, white space skipped.
		{[]string{"-x", "5x", "-m", " 3"}, def(func(o *muxOptions) { o.MaxWorkers, o.MinWorkers, o.Backlog = 5, 3, 5 })},
		// getopt: clustered flags, attached arguments, permutation, "--".
		{[]string{"-DGl", "-x4", "extra", "-Udefang", "--", "-m"}, def(func(o *muxOptions) {
			o.Foreground, o.Group, o.Verbose, o.MaxWorkers, o.User = true, true, true, 4, "defang"
			o.notices = []string{"sluice mux: extra arguments ignored: extra -m"}
		})},
		// Paths.
		{[]string{"-z", "/sp", "-p", "/run/m.pid", "-a", "inet:4000", "-f", "/bin/w", "-F", "/etc/f"}, def(func(o *muxOptions) {
			o.Spool, o.Socket, o.PidFile, o.LockFile = "/sp", "/sp/mimedefang-multiplexor.sock", "/run/m.pid", "/run/m.pid.lock"
			o.Restricted, o.Program, o.Rules = "inet:4000", "/bin/w", "/etc/f"
		})},
		{[]string{"-p", "/run/m.pid", "-o", "/run/lock", "-s", "/x.sock"}, def(func(o *muxOptions) {
			o.PidFile, o.LockFile, o.lockGiven, o.Socket = "/run/m.pid", "/run/lock", true, "/x.sock"
		})},
		// Every other option lands in its own field.
		{[]string{"-TuZdAkE", "-t", "/s", "-N", "/n", "-O", "/o", "-R", "100", "-M", "-5", "-X", "7", "-V", "9",
			"-W", "2", "-b", "30", "-c", "20", "-i", "40", "-w", "5", "-r", "9", "-P", "3", "-L", "60", "-q", "4"}, def(func(o *muxOptions) {
			o.StatsSyslog, o.Flush, o.StatusPipe, o.DebugEvents, o.SchedLog, o.Autoscale, o.Embed = true, true, true, true, true, true, true
			o.Stats, o.MapSocket, o.NotifySocket, o.RLimitRSS, o.RLimitAS = "/s", "/n", "/o", 102400, 0
			o.Tick, o.Lifetime, o.Spacing, o.Busy, o.Cmd, o.Idle, o.Slew = 7*time.Second, 9*time.Second, 2*time.Second,
				30*time.Second, 20*time.Second, 40*time.Second, 5*time.Second
			o.MaxRequests, o.Ticks, o.LogInterval, o.Queue = 9, 3, time.Minute, 4
		})},
		{[]string{"-S", "LOG_Local3", "-Y", "md"}, def(func(o *muxOptions) {
			o.Facility, o.Label = "LOG_Local3", "md"
		})},
	}
	for _, c := range cases {
		var stderr bytes.Buffer
		got, err := parseMuxArgs("sluice mux", c.args, &stderr)
		if err != nil {
			t.Errorf("%q: %v (%s)", c.args, err, stderr.String())
			continue
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%q:\n got %+v\nwant %+v", c.args, *got, *c.want)
		}
	}
}

// Every flag is built: none is announced as missing, -E (embedded Perl)
// included.
func TestMuxNoNotImplementedNotices(t *testing.T) {
	all := []string{"-E", "-O", "inet:4001", "-t", "/tmp/stats", "-T", "-u", "-X", "60", "-P", "2", "-R", "1000",
		"-M", "1000", "-Z", "-L", "60", "-S", "mail", "-Y", "x", "-d", "-A", "-k", "-N", "/m"}
	o, err := parseMuxArgs("sluice mux", append(all, all...), io.Discard)
	if err != nil || len(o.notices) != 0 {
		t.Fatalf("%v %q", err, o.notices)
	}
	// Through the command: no notice before the run starts (which here
	// stops at once: no such user). runMux sets the umask.
	mask := syscall.Umask(0o022)
	defer syscall.Umask(mask)
	code, _, errs := run("mux", "-D", "-N", "/m", "-O", "/o", "-E", "-U", "no-such-user-here")
	want := "sluice mux: Unknown user 'no-such-user-here'\n"
	if code != 1 || errs != want {
		t.Errorf("%d %q", code, errs)
	}
	// A fatal parse error comes before any notice.
	if code, _, errs := run("mux", "-E", "-q", "500"); code != 1 || errs != "sluice mux: Request queue size 500 too big (128 max)\n" {
		t.Errorf("%d %q", code, errs)
	}
}

func TestMuxUsageAndErrors(t *testing.T) {
	cases := []struct {
		args      []string
		code      int
		usage     bool
		stderr    string
		stdoutHas string
	}{
		{[]string{"-h"}, 1, true, "", ""},
		{[]string{"-x", "abc"}, 1, true, "", ""},
		{[]string{"-j"}, 1, true, "sluice mux: invalid option -- 'j'\n\nmimedefang", ""},
		{[]string{"-x"}, 1, true, "sluice mux: option requires an argument -- 'x'\n\nmimedefang", ""},
		{[]string{"-v"}, 0, false, "", "mimedefang-multiplexor version 3.3 (sluice "},
		{[]string{"-q", "129"}, 1, false, "sluice mux: Request queue size 129 too big (128 max)\n", ""},
		{[]string{"-f", "worker"}, 1, false, "sluice mux: -f: You must supply an absolute path for filter program\n", ""},
		{[]string{"-S", "nosuch"}, 1, false, "sluice mux: Unknown syslog facility nosuch\n", ""},
	}
	for _, c := range cases {
		code, out, errs := run(append([]string{"mux"}, c.args...)...)
		if code != c.code {
			t.Errorf("%q: exit %d, want %d", c.args, code, c.code)
		}
		if c.usage != strings.Contains(errs, "Usage: sluice mux [options]\n") {
			t.Errorf("%q: usage printed: %v:\n%s", c.args, !c.usage, errs)
		}
		if !strings.HasPrefix(errs, c.stderr) {
			t.Errorf("%q: stderr %q, want prefix %q", c.args, errs, c.stderr)
		}
		if !strings.Contains(out, c.stdoutHas) {
			t.Errorf("%q: stdout %q", c.args, out)
		}
	}
}

// asUser is the -U argument the tests pass: defang when run as root (the
// reference's user, created by the mimedefang package), else nothing.
func asUser(t *testing.T) ([]string, *user.User) {
	t.Helper()
	if os.Geteuid() != 0 {
		u, err := user.Current()
		if err != nil {
			t.Fatal(err)
		}
		return nil, u
	}
	return []string{"-U", "defang"}, peer.User(t, "defang")
}

// spoolDir is a spool the -U user can write.
func spoolDir(t *testing.T, u *user.User) string {
	t.Helper()
	d, err := os.MkdirTemp("", "sluice-mux-spool")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(d, uid, gid); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

func muxQuery(t *testing.T, sock, req string) string {
	t.Helper()
	c := dialUnix(t, sock)
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := c.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// dialUnix connects to the unix socket sock. Go's connect does not block:
// with the listen backlog full (the multiplexor's is 5 by default) it fails
// with EAGAIN where the milter's blocking connect would wait, so it waits
// and tries again, for up to 20 s.
func dialUnix(t *testing.T, sock string) net.Conn {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.Dial("unix", sock)
		if err == nil {
			return c
		}
		if !errors.Is(err, syscall.EAGAIN) || time.Now().After(deadline) {
			t.Fatalf("dial %s: %v", sock, err)
		}
		time.Sleep(time.Millisecond)
	}
}

// alive reports whether pid runs (a zombie counts as gone).
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	_, rest, _ := strings.Cut(string(b), ") ")
	return !strings.HasPrefix(rest, "Z")
}

func waitGone(t *testing.T, what string, pid int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("%s (pid %d) still runs", what, pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func fileMode(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

func procUID(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^Uid:\s+(\d+)`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("no Uid in /proc/%d/status", pid)
	}
	return string(m[1])
}

var statusRe = regexp.MustCompile(`^[SIBK]{3} 0 \d+ 0 0 \d+\n$`)

// The default mode: sluice mux daemonizes, writes its pid file, serves,
// refuses a second copy, and SIGTERM stops it and every worker.
func TestMuxDaemonEndToEnd(t *testing.T) {
	bin, worker := muxBinaries(t)
	uarg, u := asUser(t)
	spool := spoolDir(t, u)
	pidFile := filepath.Join(spool, "mux.pid")
	args := append([]string{"mux", "-z", spool, "-a", "ro.sock", "-p", pidFile, "-f", worker, "-x", "3", "-N", "map.sock"}, uarg...)
	// A syslog socket: without one the starting process would say that
	// the daemon's log is discarded (its stderr here is a pipe).
	logSock := filepath.Join(spool, "log")
	newSyslogSink(t, logSock)
	env := append(os.Environ(), muxSyslogEnv+"="+logSock)
	var stderr bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Env, cmd.Stderr = env, &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("sluice mux: %v\n%s", err, stderr.String())
	}
	if stderr.String() != "" {
		t.Errorf("stderr %q", stderr.String())
	}
	t.Logf("daemon ready after %v", time.Since(start))
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSuffix(string(b), "\n"))
	if err != nil || !strings.HasSuffix(string(b), "\n") {
		t.Fatalf("pid file %q", b)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	mainSock := filepath.Join(spool, "mimedefang-multiplexor.sock")
	mapSock := filepath.Join(spool, "map.sock")
	for path, want := range map[string]os.FileMode{pidFile: 0o644, pidFile + ".lock": 0o600, mainSock: 0o700, filepath.Join(spool, "ro.sock"): 0o777, mapSock: 0o700} {
		if got := fileMode(t, path); got != want {
			t.Errorf("%s: mode %o, want %o", path, got, want)
		}
	}
	if got := procUID(t, pid); got != u.Uid {
		t.Errorf("daemon runs as uid %s, want %s", got, u.Uid)
	}

	if got := muxQuery(t, mainSock, "status\n"); !statusRe.MatchString(got) {
		t.Errorf("status: %q", got)
	}
	if got := muxQuery(t, mainSock, "relayok 192.0.2.9 host 25 127.0.0.1 25 NOQUEUE\n"); got != "ok 1 ok 250 2.1.0 0\n" {
		t.Errorf("forwarded relayok: %q", got)
	}
	var workerPID int
	if _, err := fmt.Sscanf(muxQuery(t, mainSock, "pid\n"), "pid %d\n", &workerPID); err != nil {
		t.Fatalf("pid: %v", err)
	}
	if got := procUID(t, workerPID); got != u.Uid {
		t.Errorf("worker runs as uid %s, want %s", got, u.Uid)
	}
	if got := mapTalk(t, "unix", mapSock, []string{"15:rev hello world,", "10:nf somekey,"}); !reflect.DeepEqual(got, []string{"14:OK dlrow olleh,", "9:NOTFOUND ,"}) {
		t.Errorf("socket map: %q", got)
	}
	if got := muxQuery(t, filepath.Join(spool, "ro.sock"), "pid\n"); got != "error: Attempt to use privileged command on unprivileged socket\n" {
		t.Errorf("restricted socket: %q", got)
	}

	// A second copy with the same pid file stops before touching a socket.
	second := exec.Command(bin, append([]string{"mux", "-z", spool, "-s", "second.sock", "-p", pidFile, "-f", worker}, uarg...)...)
	second.Env = env
	out, err := second.CombinedOutput()
	if ee := (*exec.ExitError)(nil); !errors.As(err, &ee) || ee.ExitCode() != 1 || string(out) != "Error from child: Cannot lock lockfile: Is another copy running?\n" {
		t.Errorf("second copy: %v %q", err, out)
	}
	if _, err := os.Stat(filepath.Join(spool, "second.sock")); err == nil {
		t.Error("the second copy created its socket")
	}

	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitGone(t, "the daemon", pid)
	stopped = true
	waitGone(t, "the worker", workerPID)
	for _, gone := range []string{pidFile, pidFile + ".lock", mainSock} {
		if _, err := os.Stat(gone); err == nil {
			t.Errorf("%s left behind", gone)
		}
	}
	// The -a socket is removed only when given as an absolute path, and
	// the -N socket never (docs/protocols/mimedefang-multiplexor.md, "Signals").
	if _, err := os.Stat(filepath.Join(spool, "ro.sock")); err != nil {
		t.Errorf("relative -a socket: %v", err)
	}
	if _, err := os.Stat(mapSock); err != nil {
		t.Errorf("-N socket: %v", err)
	}
}

// In the foreground (-D) with -G: the workers run as the -U user (asked
// with id(1) by a shell worker), -G sockets are 0770, SIGINT rereads, and
// SIGTERM stops everything with status 0.
func TestMuxForegroundPrivileges(t *testing.T) {
	bin, _ := muxBinaries(t)
	uarg, u := asUser(t)
	spool := spoolDir(t, u)
	script := filepath.Join(spool, "idworker")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nwhile read -r cmd rest; do\n  case \"$cmd\" in\n    id) echo \"$(id -u) $(id -g) $(id -un)\" ;;\n    pid) echo \"pid $$\" ;;\n    *) echo \"ok $cmd\" ;;\n  esac\ndone\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(spool, "mx.sock")
	cmd := exec.Command(bin, append([]string{"mux", "-D", "-G", "-z", spool, "-s", "unix:" + sock, "-a", "unix:" + spool + "/ro.sock", "-f", script, "-m", "2", "-w", "1"}, uarg...)...)
	stderr := &logbuf.Buffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := false
	t.Cleanup(func() {
		if !waited {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(spool, "ro.sock")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no socket; stderr:\n%s", stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := fileMode(t, sock); got != 0o770 {
		t.Errorf("-G main socket mode %o", got)
	}
	if got := fileMode(t, filepath.Join(spool, "ro.sock")); got != 0o777 {
		t.Errorf("-a socket mode %o", got)
	}
	want := fmt.Sprintf("%s %s %s\n", u.Uid, u.Gid, u.Username)
	if got := muxQuery(t, sock, "id\n"); got != want {
		t.Errorf("worker id: %q, want %q", got, want)
	}
	if got := muxQuery(t, sock, "hello\n"); got != "ok hello\n" {
		t.Errorf("forwarded: %q", got)
	}
	var pids []int
	for range 2 {
		var p int
		if _, err := fmt.Sscanf(muxQuery(t, sock, "pid\n"), "pid %d\n", &p); err != nil {
			t.Fatal(err)
		}
		pids = append(pids, p)
	}
	// SIGINT is the reference's reread: idle workers are replaced.
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	waitGone(t, "a worker after SIGINT", pids[0])
	if got := muxQuery(t, sock, "hello\n"); got != "ok hello\n" {
		t.Errorf("after SIGINT: %q", got)
	}
	var p int
	if _, err := fmt.Sscanf(muxQuery(t, sock, "pid\n"), "pid %d\n", &p); err != nil {
		t.Fatal(err)
	}
	pids = append(pids, p)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	waited = true
	if err != nil {
		t.Fatalf("exit: %v\n%s", err, stderr.String())
	}
	for _, p := range pids {
		waitGone(t, "a worker", p)
	}
	for _, gone := range []string{sock, filepath.Join(spool, "ro.sock")} {
		if _, err := os.Stat(gone); err == nil {
			t.Errorf("%s left behind", gone)
		}
	}
}

// referenceMux is MIMEDefang's multiplexor by its installed name, the
// argv[0] it runs under; muxref.Command runs the real one from wherever
// it is (the diverted .distrib where sluice is the drop-in), and
// muxref.Mux proves it is not sluice.
const referenceMux = muxref.MultiplexorPath

// Startup errors, side by side with the reference (both in -D mode, so
// nothing daemonizes): same status, same text once the program names are
// aligned.
func TestMuxStartupErrorsVsReference(t *testing.T) {
	bin, _ := muxBinaries(t)
	muxref.Mux(t)
	uarg, u := asUser(t)
	// A spool of the test's own where one is reached: the default,
	// /var/spool/MIMEDefang, is the host's.
	spool := spoolDir(t, u)
	cases := [][]string{
		{"-h"},
		{"-D", "-x", "abc"},
		{"-D", "-j"},
		{"-D", "-m"},
		{"-D", "-U", "nosuchuser"},
		{"-D", "-q", "200"},
		{"-D", "-f", "relative"},
		{"-D", "-S", "nosuch"},
		append([]string{"-D", "-z", spool, "-s", "inet:1234"}, uarg...),
		append([]string{"-D", "-z", spool, "-s", "inet6_any:1234"}, uarg...),
		append([]string{"-D", "-z", "/nonexistent/spool"}, uarg...),
		append([]string{"-D", "-s", "/nonexistent/dir/mx.sock", "-z", "/tmp"}, uarg...),
	}
	if os.Geteuid() == 0 {
		cases = append(cases, []string{"-D"}, []string{"-D", "-s", "inet:1234"})
	}
	norm := strings.NewReplacer("sluice mux: ", referenceMux+": ", "Usage: sluice mux", "Usage: mimedefang-multiplexor")
	for _, args := range cases {
		ref := muxref.Command(t, append([]string{referenceMux}, args...)...)
		var refErr bytes.Buffer
		ref.Stderr = &refErr
		refCode := exitCode(t, ref.Run())
		ours := exec.Command(bin, append([]string{"mux"}, args...)...)
		var ourErr bytes.Buffer
		ours.Stderr = &ourErr
		ourCode := exitCode(t, ours.Run())
		got := norm.Replace(ourErr.String())
		// Deliberate difference socket-error-detail (internal/mux/differences.go):
		// sluice names the socket and the reason.
		got = sockErrDetail.ReplaceAllString(got, "Unable to create listening socket.")
		if ourCode != refCode || !strings.HasPrefix(got, refErr.String()) || refErr.Len() == 0 && got != "" {
			t.Errorf("%q: sluice %d %q\nreference %d %q", args, ourCode, got, refCode, refErr.String())
		}
	}
}

// sockErrDetail is sluice's main-socket error, with the path and the reason.
var sockErrDetail = regexp.MustCompile(`(?m)^Unable to create listening socket /\S+: [A-Z][^\n]*$`)

func exitCode(t *testing.T, err error) int {
	t.Helper()
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return ee.ExitCode()
}

// mapTalk plays one socket-map conversation: each step is written, then
// one reply netstring is read (or EOF, shown as "<EOF>" after whatever
// arrived). It stops at the first EOF.
func mapTalk(t *testing.T, network, addr string, steps []string) []string {
	t.Helper()
	c, err := net.Dial(network, addr)
	if err != nil {
		t.Errorf("dial %s: %v", addr, err)
		return nil
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(60 * time.Second))
	var out []string
	for _, s := range steps {
		if _, err := c.Write([]byte(s)); err != nil {
			return append(out, "<write: "+err.Error()+">")
		}
		var got []byte
		n := -1
		for n < 0 || len(got) < n {
			var b [1]byte
			if _, err := c.Read(b[:]); err != nil {
				if errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) {
					return append(out, string(got)+"<EOF>")
				}
				return append(out, string(got)+"<"+err.Error()+">")
			}
			got = append(got, b[0])
			if n < 0 && b[0] == ':' {
				l, err := strconv.Atoi(string(got[:len(got)-1]))
				if err != nil {
					return append(out, string(got)+"<bad reply>")
				}
				n = len(got) + l + 1
			}
		}
		out = append(out, string(got))
	}
	return out
}

// The socket map (-N) side by side with the reference, both with the fake
// worker and one worker slot (-x 1): good lookups, NOTFOUND, replies the
// worker chooses (percent-decoded), a dying and a hung worker, no free
// worker, and malformed netstrings, compared byte for byte. sluice listens
// on inet:PORT, the reference on a unix socket.
func TestMuxSocketMapVsReference(t *testing.T) {
	if testing.Short() {
		t.Skip("the busy timeout takes 10 s")
	}
	muxref.Mux(t)
	bin, worker := muxBinaries(t)
	uarg, u := asUser(t)
	type daemon struct {
		name, network, addr, main string
	}
	start := func(name string, argv []string, network, addr string) daemon {
		startForeground(t, name, argv, network, addr)
		return daemon{name, network, addr, argv[slices.Index(argv, "-s")+1]}
	}
	common := func(spool string) []string {
		return append([]string{"-D", "-z", spool, "-s", spool + "/mx.sock", "-f", worker, "-m", "1", "-x", "1", "-b", "10"}, uarg...)
	}
	ours := spoolDir(t, u)
	pl, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := pl.Addr().(*net.TCPAddr).Port
	pl.Close()
	theirs := spoolDir(t, u)
	daemons := []daemon{
		start("sluice", append([]string{bin, "mux", "-N", "inet:" + strconv.Itoa(port)}, common(ours)...), "tcp4", "127.0.0.1:"+strconv.Itoa(port)),
		start("reference", append([]string{referenceMux, "-N", theirs + "/map.sock"}, common(theirs)...), "unix", theirs+"/map.sock"),
	}

	// settle waits until the single worker slot answers again.
	settle := func(d daemon) {
		for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if r := mapTalk(t, d.network, d.addr, []string{"6:rev ok,"}); len(r) == 1 && r[0] == "5:OK ko," {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("%s: the worker never came back", d.name)
				return
			}
		}
	}
	ns := func(s string) string { return string(socketmap.AppendNetstring(nil, s)) }
	conversations := [][]string{
		{"15:rev hello world,", "10:nf somekey,", ns("rev a b  c"), ns("rev " + strings.Repeat("k", 3000))},
		{ns("raw OK a%41%2x%"), ns("raw TEMP try%20later"), ns("raw PERM no such user"), ns("raw TIMEOUT slow"), ns("raw "), ns("raw NOTFOUND ")},
		{ns("rev t\x01ab\x7f\xc3\xa9%'\"\\")},
		{ns("long 5000"), ns("long 4093"), ns("long 4092")},
		{"7:nospace,", "0:,", "1: ,", ns(" key"), "3:abcX", "15:rev hello world,", "3:a bX", "3:a b,"},
		{"x:abc,", "3:a b,"},
		{":"},
		{"-1:a,"},
		{"65537:"},
		{"0000000000000003:a b,"},
		{"000000000000003:r b,"},
		{"15:rev hello world,", "x:", "3:a b,"},
		{"partial x5:rev y,"},
		{"00000000000000003:a b,"},
		{"000000000000003:a b,"},
		{"+3:a b,"},
		{" 3:a b,"},
		{"3 :a b,"},
		{"3x:a b,"},
		{"0x3:a b,"},
		{"0000000000000003xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx:a b,", "1:a,"},
		{"-0:,", "4294967299:a b,", "-4294967293:a b,"},
		{"2147483651:a b,"},
		{"- 3:a,"},
		{"\t3:a b,"},
		{"1234567890123456:"},
		{ns("partial x")},
		{ns("die x")},
	}
	type result struct {
		replies [][]string
		busy    [2]string // the hung lookup, and one made meanwhile
	}
	results := make([]result, len(daemons))
	var wg sync.WaitGroup
	for i, d := range daemons {
		wg.Go(func() {
			settle(d)
			for _, conv := range conversations {
				results[i].replies = append(results[i].replies, mapTalk(t, d.network, d.addr, conv))
				settle(d)
			}
			hung := make(chan []string, 1)
			go func() { hung <- mapTalk(t, d.network, d.addr, []string{ns("hang x")}) }()
			// The lookup made meanwhile finds the one worker busy.
			featWaitStatus(t, &featDaemon{name: d.name, main: d.main}, `^B `)
			results[i].busy[1] = strings.Join(mapTalk(t, d.network, d.addr, []string{ns("rev x")}), "|")
			results[i].busy[0] = strings.Join(<-hung, "|")
			settle(d)
		})
	}
	wg.Wait()
	sl, ref := results[0], results[1]
	for i, conv := range conversations {
		var got, want []string
		if i < len(sl.replies) {
			got = sl.replies[i]
		}
		if i < len(ref.replies) {
			want = ref.replies[i]
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%q:\nsluice    %q\nreference %q", conv, got, want)
		}
	}
	if sl.busy != ref.busy {
		t.Errorf("hung worker and no free worker:\nsluice    %q\nreference %q", sl.busy, ref.busy)
	}
	t.Logf("reference busy replies: %q", ref.busy)
}
