package cli

import (
	"bytes"
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

// TestMuxNeverRunsWorkersAsRoot: run as root, `sluice mux` refuses to
// start without -U, and with -U root, before it binds a socket or starts
// a worker. (TestMuxForegroundPrivileges and TestMuxDaemonEndToEnd check
// that with -U the daemon and its workers run as that user.)
func TestMuxNeverRunsWorkersAsRoot(t *testing.T) {
	peer.Root(t, "the refusal to run workers as root is only seen as root")
	bin, worker := muxBinaries(t)
	for _, uarg := range [][]string{nil, {"-U", "root"}} {
		t.Run(fmt.Sprint(uarg), func(t *testing.T) {
			spool := t.TempDir()
			sock := filepath.Join(spool, "mx.sock")
			marker := filepath.Join(spool, "worker-ran")
			script := filepath.Join(spool, "worker")
			if err := os.WriteFile(script, []byte("#!/bin/sh\ntouch "+marker+"\nexec "+worker+"\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(bin, append([]string{"mux", "-D", "-z", spool, "-s", "unix:" + sock, "-f", script, "-m", "2"}, uarg...)...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			done := make(chan error, 1)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			go func() { done <- cmd.Wait() }()
			var err error
			select {
			case err = <-done:
			case <-time.After(60 * time.Second):
				_ = cmd.Process.Kill()
				<-done
				t.Fatal("sluice mux kept running as root")
			}
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(stderr.String(), "You must not run mimedefang-multiplexor as root") {
				t.Errorf("as root with %v: %v\n%s", uarg, err, stderr.String())
			}
			for _, p := range []string{sock, marker} {
				if _, err := os.Stat(p); err == nil {
					t.Errorf("%s exists: the refusal came too late", p)
				}
			}
		})
	}
}

// TestMuxInetBindsLoopback: an inet restricted socket (`-a inet:PORT`;
// the main socket must be a unix one) listens on 127.0.0.1 only, as the
// reference does (inet_any: is the explicit way to listen on every
// interface).
func TestMuxInetBindsLoopback(t *testing.T) {
	bin, worker := muxBinaries(t)
	uarg, u := asUser(t)
	spool := spoolDir(t, u)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	sock := filepath.Join(spool, "mx.sock")
	args := append([]string{"mux", "-D", "-z", spool, "-s", "unix:" + sock, "-a", fmt.Sprintf("inet:%d", port), "-f", worker, "-m", "1"}, uarg...)
	p := relStart(t, bin, args, sock)
	if got := muxQuery(t, sock, "free\n"); !freeRe.MatchString(got) {
		t.Fatalf("free: %q", got)
	}
	// /proc/net/tcp lists the listening socket with its local address.
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/tcp", p.pid()))
	if err != nil {
		t.Fatal(err)
	}
	var local []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 3 && f[3] == "0A" && strings.HasSuffix(f[1], fmt.Sprintf(":%04X", port)) {
			local = append(local, f[1])
		}
	}
	if want := fmt.Sprintf("0100007F:%04X", port); len(local) != 1 || local[0] != want {
		t.Errorf("listening on %v, want only %s (127.0.0.1)", local, want)
	}
	if b6, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/tcp6", p.pid())); err == nil && strings.Contains(string(b6), fmt.Sprintf(":%04X 00000000000000000000000000000000:0000 0A", port)) {
		t.Errorf("also listening on IPv6 port %d", port)
	}
}

// TestMuxDropEmptiesBoundingSet: started as root with -U, daemonized as
// deployed (-p in a directory of root's), the multiplexor and its worker
// run as the -U user on every thread with no capability and an empty
// bounding set, so no program they run can gain one; and so does the
// multiplexor an upgrade in place (SIGUSR2) starts. no_new_privs is
// deliberately not set (privdrop.ExecAllowSetID): MIMEDefang's
// notifications reach Postfix through the set-group-ID postdrop.
func TestMuxDropEmptiesBoundingSet(t *testing.T) {
	peer.Root(t, "the drop of -U is only made as root")
	bin, _ := muxBinaries(t)
	r := newMuxUpgradeRig(t, bin)
	_, u := asUser(t)
	worker, _ := shellWorker(t, r.base)
	cmd := exec.Command(r.live, append([]string{"mux", "-f", worker, "-m", "1", "-x", "1"}, r.args(t)...)...)
	cmd.Env = append(os.Environ(), muxSyslogEnv+"="+filepath.Join(r.base, "no-syslog"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("sluice mux: %v\n%s", err, out)
	}
	first := r.pid(t)
	t.Cleanup(func() { _ = syscall.Kill(first, syscall.SIGKILL) })
	check := func(stage string, pid int) {
		t.Helper()
		waitUntil(t, "the multiplexor serves "+stage, func() bool { return muxAnswers(r.sock) == "ok relayok\n" }, func() string { return "" })
		assertDropped(t, stage+": the multiplexor", pid, u.Uid)
		kids := childPids(t, pid)
		if len(kids) == 0 {
			t.Fatalf("%s: the multiplexor (pid %d) has no worker", stage, pid)
		}
		for _, k := range kids {
			assertDropped(t, stage+": its worker", k, u.Uid)
		}
	}
	check("after the start", first)

	_ = syscall.Kill(first, syscall.SIGUSR2)
	waitUntil(t, "the upgraded multiplexor", func() bool { return !alive(first) && r.pid(t) != first }, func() string { return "" })
	next := r.pid(t)
	t.Cleanup(func() { _ = syscall.Kill(next, syscall.SIGKILL) })
	check("after the upgrade", next)
	_ = syscall.Kill(next, syscall.SIGTERM)
	waitGone(t, "the upgraded multiplexor", next)
}

// assertDropped checks every thread of pid: uid (real, effective, saved,
// file system) uid, no capability permitted or effective, an empty
// bounding set, and no_new_privs off (set-group-ID postdrop must work).
func assertDropped(t *testing.T, what string, pid int, uid string) {
	t.Helper()
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	if err != nil || len(tasks) == 0 {
		t.Fatalf("%s: threads of %d: %v", what, pid, err)
	}
	for _, task := range tasks {
		b, err := os.ReadFile(task)
		if err != nil {
			continue // a thread that ended
		}
		st := string(b)
		for _, want := range []string{
			fmt.Sprintf("\nUid:\t%s\t%s\t%s\t%s\n", uid, uid, uid, uid),
			"\nCapPrm:\t0000000000000000\n", "\nCapEff:\t0000000000000000\n", "\nCapInh:\t0000000000000000\n", "\nCapAmb:\t0000000000000000\n",
			"\nCapBnd:\t0000000000000000\n", "\nNoNewPrivs:\t0\n",
		} {
			if !strings.Contains(st, want) {
				t.Errorf("%s, %s: no %q in\n%s", what, task, strings.TrimSpace(want), st)
			}
		}
	}
}

// childPids is the pids of pid's children (every thread's).
func childPids(t *testing.T, pid int) []int {
	t.Helper()
	files, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	var kids []int
	for _, f := range files {
		b, _ := os.ReadFile(f)
		for _, s := range strings.Fields(string(b)) {
			if k, err := strconv.Atoi(s); err == nil {
				kids = append(kids, k)
			}
		}
	}
	return kids
}
