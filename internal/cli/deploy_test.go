package cli

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"sluice/internal/testutil/logbuf"
	"sluice/internal/testutil/peer"
	"sluice/internal/testutil/recipe"
)

// deployDir is a directory of the test's own that other users can pass
// through (t.TempDir's parents are private to root).
func deployDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "sluice-deploy")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

// credential runs a command as the named user with its groups.
func credential(t *testing.T, name string) *syscall.SysProcAttr {
	t.Helper()
	u := peer.User(t, name)
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	var groups []uint32
	ids, _ := u.GroupIds()
	for _, s := range ids {
		if g, err := strconv.Atoi(s); err == nil {
			groups = append(groups, uint32(g))
		}
	}
	return &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: groups}}
}

// assertUnprivileged checks that process pid runs as user name, real,
// effective, saved and filesystem ids, with no capability at all.
// A daemon started by root accepts connections (in the kernel's backlog)
// as soon as its sockets are bound, a moment before it switches users: the
// check waits up to 10 s for the switch, then looks at every field.
func assertUnprivileged(t *testing.T, pid int, name string) {
	t.Helper()
	u := peer.User(t, name)
	var b []byte
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var err error
		if b, err = os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "\nUid:\t"+u.Uid+"\t") || time.Now().After(deadline) {
			break
		}
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "Uid:":
			if strings.Join(f[1:], " ") != strings.Repeat(u.Uid+" ", 3)+u.Uid {
				t.Errorf("daemon %s, want every uid %s (%s)", line, u.Uid, name)
			}
		case "Gid:":
			if strings.Join(f[1:], " ") != strings.Repeat(u.Gid+" ", 3)+u.Gid {
				t.Errorf("daemon %s, want every gid %s", line, u.Gid)
			}
		case "CapInh:", "CapPrm:", "CapEff:", "CapAmb:":
			if f[1] != "0000000000000000" {
				t.Errorf("daemon %s, want no capability", line)
			}
		}
	}
	assertNoPrivilegeBack(t, pid)
}

// assertNoPrivilegeBack checks that no thread of pid can get a privilege
// back: an empty capability bounding set and no_new_privs on each (a
// set-user-ID program run by a parser bug gains nothing).
func assertNoPrivilegeBack(t *testing.T, pid int) {
	t.Helper()
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	if err != nil || len(tasks) == 0 {
		t.Fatalf("threads of %d: %v", pid, err)
	}
	for _, task := range tasks {
		b, err := os.ReadFile(task)
		if err != nil {
			continue // a thread that ended
		}
		st := string(b)
		if !strings.Contains(st, "\nCapBnd:\t0000000000000000\n") || !strings.Contains(st, "\nNoNewPrivs:\t1\n") {
			t.Errorf("%s: want CapBnd 0 and NoNewPrivs 1:\n%s", task, st)
		}
	}
}

// qmailCredential runs a command as qmail runs its programs: as the user
// name with group's gid and that group alone (qmail-start gives
// qmail-rspawn, hence qmail-remote, uid qmailr and gid qmail, with a
// setgroups of that one group in qmail 1.03 and netqmail; tcpserver -u
// qmaild -g nofiles does the same for qmail-smtpd). qmail compiles its ids
// in, so the group is qmail's choice, not the user's primary group in
// passwd.
func qmailCredential(t *testing.T, name, group string) *syscall.SysProcAttr {
	t.Helper()
	u, g := peer.User(t, name), peer.Group(t, group)
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(g.Gid)
	return &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{uint32(gid)}}}
}

// asQmailr is qmail-remote's credential, as qmail-rspawn runs it: uid
// qmailr, group qmail alone.
func asQmailr(t *testing.T) *syscall.SysProcAttr {
	t.Helper()
	return qmailCredential(t, "qmailr", "qmail")
}

// qmailHost is docs/throttle.md's qmail recipe as deployed in a directory
// of the test's own: the daemon's block read from the page, sluice
// started by root and switched to its own user, and the wrapper's install
// script, with a qmail-remote-real that records each send by the relay's
// clock.
type qmailHost struct {
	bin    string   // sluice
	sock   string   // the throttle socket
	remote string   // qmail-remote: the wrapper
	sends  string   // the relay's send log, a line per send
	daemon *relProc // sluice serve
}

// deployQmailRecipe deploys the recipe, changing only its paths and the
// replacements in change (old, new, ...) to the daemon's block.
func deployQmailRecipe(t *testing.T, change ...string) *qmailHost {
	t.Helper()
	peer.Root(t, "the daemon is started by root and switches to the user sluice")
	peer.User(t, "sluice")
	bin, _ := muxBinaries(t)
	base := deployDir(t)
	run := filepath.Join(base, "run")
	h := &qmailHost{bin: bin, sock: filepath.Join(run, "throttle")}
	cfgText := recipe.Replace(t, recipe.Get(t, "docs/throttle.md", "qmail-config"),
		append([]string{"/run/sluice/throttle", h.sock}, change...)...)
	cfgText = fmt.Sprintf("state_dir = %q\nruntime_dir = %q\n", filepath.Join(base, "state"), run) + cfgText
	cfg := filepath.Join(base, "sluice.toml")
	if err := os.WriteFile(cfg, []byte(cfgText), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, "check", "-q", "-c", cfg).CombinedOutput(); err != nil {
		t.Fatalf("sluice check on the recipe: %v\n%s", err, out)
	}
	h.daemon = relStart(t, bin, []string{"serve", "-c", cfg}, h.sock)
	assertUnprivileged(t, h.daemon.pid(), "sluice")

	// qmail's bin directory with a qmail-remote that records each send by
	// the relay's clock, as any user can write it.
	qbin := filepath.Join(base, "qmail", "bin")
	logDir := filepath.Join(base, "relay")
	for _, d := range []string{qbin, logDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(logDir, 0o777); err != nil {
		t.Fatal(err)
	}
	var relay string
	relay, h.sends = fakeQmailRemote(t, logDir)
	h.remote = filepath.Join(qbin, "qmail-remote")
	if err := os.Rename(relay, h.remote); err != nil {
		t.Fatal(err)
	}
	installQmailWrapper(t, qbin, h.sock, filepath.Dir(bin))
	return h
}

// installQmailWrapper runs docs/throttle.md's qmail-wrapper recipe as
// written, with qmail's bin directory qbin and the throttle socket sock,
// on a PATH that finds sluice in binDir first, as root's shell finds the
// installed binary.
func installQmailWrapper(t *testing.T, qbin, sock, binDir string) {
	t.Helper()
	install := recipe.Replace(t, recipe.Get(t, "docs/throttle.md", "qmail-wrapper"),
		"/var/qmail/bin", qbin, "/run/sluice/throttle", sock)
	cmd := exec.Command("sh", "-ec", install)
	cmd.Env = append(os.Environ(), "PATH="+binDir+":/usr/sbin:/usr/bin:/sbin:/bin")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the wrapper's install script: %v\n%s\n%s", err, out, install)
	}
}

// TestQmailWrapperFindsTheBinary installs docs/throttle.md's qmail
// wrapper with sluice where the package puts it (/usr/bin) and where the
// source install does (/usr/local/bin), both under the test's directory:
// each wrapper execs that binary, which answers qmail-rspawn with its own
// report (no daemon listens: a deferral naming the socket), not a shell's
// "not found".
func TestQmailWrapperFindsTheBinary(t *testing.T) {
	bin, _ := muxBinaries(t)
	for _, layout := range []string{"usr/bin", "usr/local/bin"} {
		t.Run(layout, func(t *testing.T) {
			base := t.TempDir()
			binDir, qbin := filepath.Join(base, layout), filepath.Join(base, "qmail", "bin")
			for _, d := range []string{binDir, qbin} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.Symlink(bin, filepath.Join(binDir, "sluice")); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(qbin, "qmail-remote"), []byte("#!/bin/sh\necho real\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			sock := filepath.Join(base, "throttle")
			installQmailWrapper(t, qbin, sock, binDir)
			wrapper, err := os.ReadFile(filepath.Join(qbin, "qmail-remote"))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(wrapper), "exec "+filepath.Join(binDir, "sluice")+" throttle") || !strings.Contains(string(wrapper), `"$@"`) {
				t.Errorf("the wrapper does not exec %s with its arguments:\n%s", filepath.Join(binDir, "sluice"), wrapper)
			}
			out, _ := exec.Command(filepath.Join(qbin, "qmail-remote"), "relay.example", "s@example.org", "r@example.net").CombinedOutput()
			if !strings.HasPrefix(string(out), "Z") || !strings.Contains(string(out), sock) {
				t.Errorf("the wrapper's report: %q, want sluice's deferral naming %s", out, sock)
			}
		})
	}
}

// TestDocsNameNoFixedBinaryPath: a command the documentation gives to
// copy names the sluice binary by `command -v sluice` (the package's
// /usr/bin/sluice, the source install's /usr/local/bin/sluice), never
// one of the two, except the source install's own install line.
func TestDocsNameNoFixedBinaryPath(t *testing.T) {
	pages, err := filepath.Glob(filepath.Join(recipe.Root(), "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	pages = append(pages, filepath.Join(recipe.Root(), "README.md")) // not sluice(8): only the package installs it, with /usr/bin/sluice
	allowed := "install -m 755 sluice /usr/local/bin/sluice"
	for _, p := range pages {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		inBlock := false
		for i, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "```") {
				inBlock = !inBlock
				continue
			}
			code, _, _ := strings.Cut(line, "#")
			if inBlock && strings.TrimSpace(code) != allowed && (strings.Contains(code, "/usr/local/bin/sluice") || strings.Contains(code, "/usr/bin/sluice")) {
				t.Errorf("%s:%d: a command names a fixed path of the binary: %s", filepath.Base(p), i+1, line)
			}
		}
	}
}

// deliver runs the wrapper as qmail-rspawn would (qmail-remote host
// sender recipient) with credential cred, and returns its report and
// error in one string.
func (h *qmailHost) deliver(cred *syscall.SysProcAttr, rcpt string) string {
	cmd := exec.Command(h.remote, "relay.example", "sender@example.org", rcpt)
	cmd.SysProcAttr = cred
	out, err := cmd.CombinedOutput()
	return fmt.Sprintf("%q %v", out, err)
}

// TestQmailRecipeAsDeployed runs docs/throttle.md's qmail recipe as it is
// deployed (deployQmailRecipe): 40 deliveries at once by qmail-remote
// wrappers running as qmail-rspawn runs them (uid qmailr, group qmail).
// Only the directories and the limit change (5 per 2 s, to be quick).
// Every message must reach the relay (a recording stand-in for
// qmail-remote-real), and the relay's own clock must never see more than
// 5 sends in any 2 seconds.
func TestQmailRecipeAsDeployed(t *testing.T) {
	if testing.Short() {
		t.Skip("40 throttled deliveries take 16 s")
	}
	t.Parallel() // mostly waiting for slots: it overlaps other waiting tests
	qmailr := asQmailr(t)
	h := deployQmailRecipe(t, `"30/60s"`, `"5/2s"`)
	assertSocket(t, h.sock, "sluice", "qmail", 0o660)

	const n, limit, window = 40, 5, 2 * time.Second
	outs := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { outs[i] = h.deliver(qmailr, fmt.Sprintf("rcpt%d@example.net", i)) })
	}
	wg.Wait()
	for i, o := range outs {
		if !strings.Contains(o, `Kok\x00" <nil>`) {
			t.Errorf("wrapper %d as qmailr: %s", i, o)
		}
	}
	times := relaySends(t, h.sends)
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	if len(times) != n {
		t.Fatalf("the relay saw %d sends, want %d; daemon log:\n%s", len(times), n, h.daemon.stderr.String())
	}
	if most := maxInWindow(times, window); most > limit {
		t.Errorf("the relay saw %d sends in one 2 s window, limit %d; sends at %v", most, limit, times)
	} else {
		t.Logf("%d sends over %v; at most %d in any %v at the relay (limit %d)", n, times[n-1].Sub(times[0]).Round(time.Millisecond), most, window, limit)
	}
}

// TestQmailThrottleSocketOnlyQmailr attacks the throttle socket of
// docs/throttle.md's qmail recipe, deployed verbatim (only its paths
// change): qmail-remote's wrapper as qmail-rspawn runs it (uid qmailr,
// group qmail alone) gets its slot and delivers; the same wrapper as
// qmail-smtpd's user (uid qmaild, group nofiles alone, as tcpserver runs
// it: the Internet-facing one, whose group also holds alias, qmaill and
// qmailp) is refused by the kernel at connect (EACCES), defers with a
// report that says so, and nothing reaches the relay.
func TestQmailThrottleSocketOnlyQmailr(t *testing.T) {
	qmailr, qmaild := asQmailr(t), qmailCredential(t, "qmaild", "nofiles")
	h := deployQmailRecipe(t)
	assertSocket(t, h.sock, "sluice", "qmail", 0o660)

	if o := h.deliver(qmailr, "rcpt@example.net"); !strings.Contains(o, `Kok\x00" <nil>`) {
		t.Errorf("the wrapper as qmailr (group qmail): %s\ndaemon log:\n%s", o, h.daemon.stderr.String())
	}
	o := h.deliver(qmaild, "attack@example.net")
	if !strings.HasPrefix(o, `"Z`) || !strings.Contains(o, "connect: permission denied: user qmaild") || !strings.HasSuffix(o, `\x00" <nil>`) {
		t.Errorf("the wrapper as qmaild (group nofiles): %s, want a deferral (Z report) for connect: permission denied", o)
	} else {
		t.Logf("the wrapper as qmaild: %s", o)
	}
	if b, err := os.ReadFile(h.sends); err != nil || strings.Count(string(b), "\n") != 1 || !strings.Contains(string(b), " rcpt@example.net\n") {
		t.Errorf("the relay's sends: %v %q, want qmailr's alone", err, b)
	}
}

// assertSocket checks a socket's owner, group and mode.
func assertSocket(t *testing.T, path, owner, group string, mode os.FileMode) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	u, _ := user.LookupId(strconv.Itoa(int(st.Uid)))
	g, _ := user.LookupGroupId(strconv.Itoa(int(st.Gid)))
	if u == nil || g == nil || u.Username != owner || g.Name != group || fi.Mode().Perm() != mode {
		t.Errorf("socket %s: uid %d gid %d mode %04o, want %s:%s %04o", path, st.Uid, st.Gid, fi.Mode().Perm(), owner, group, mode)
	}
}

// TestServeAsOrdinaryUser: run by a user whose home does not exist
// (nobody), `sluice serve` says which state directory it could not make
// and how to choose another; with -state-dir it serves, its sockets in
// that directory, and `sluice throttle` as the same user finds them when
// told where.
func TestServeAsOrdinaryUser(t *testing.T) {
	peer.Root(t, "the test runs sluice as nobody")
	nobody := credential(t, "nobody")
	bin, _ := muxBinaries(t)
	env := []string{"PATH=/usr/bin:/bin", "HOME=/nonexistent"}
	cmd := exec.Command(bin, "serve")
	cmd.SysProcAttr, cmd.Env = nobody, env
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "state directory /nonexistent/.local/state/sluice: mkdir /nonexistent: permission denied (choose another with -state-dir or state_dir") {
		t.Fatalf("serve as nobody without a usable home: %v\n%s", err, out)
	}
	base := deployDir(t)
	state := filepath.Join(base, "state")
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	chownNames(t, state, "nobody", "nogroup")
	cmd = exec.Command(bin, "serve", "-state-dir", state)
	cmd.SysProcAttr, cmd.Env = nobody, env
	p := &relProc{cmd: cmd, stderr: &logbuf.Buffer{}, done: make(chan struct{})}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-p.done })
	p.waitSockets(t, filepath.Join(state, "throttle"))
	c := exec.Command(bin, "throttle", "-s", filepath.Join(state, "throttle"), "-k", "relay", "--", "/bin/echo", "sent")
	c.SysProcAttr, c.Env = nobody, env
	if out, err := c.CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "sent" {
		t.Errorf("sluice throttle as nobody: %v %q", err, out)
	}
}

// TestStatusOutOfTheBox: `sluice status` with no flags reads the status of
// `sluice serve` started with no flags, both run by the same user: root
// (its directories given by systemd's variables, as the unit would, so the
// test does not touch /run/sluice) and an ordinary user (nobody, with a
// home of its own). The status comes over the default unix socket; no TCP
// port is opened.
func TestStatusOutOfTheBox(t *testing.T) {
	peer.Root(t, "the test runs the daemon as root and as nobody")
	bin, _ := muxBinaries(t)
	base := deployDir(t)
	home := filepath.Join(base, "home")
	if err := os.Mkdir(home, 0o700); err != nil {
		t.Fatal(err)
	}
	chownNames(t, home, "nobody", "nogroup")
	for _, tc := range []struct {
		who  string
		cred *syscall.SysProcAttr
		env  []string
		sock string
	}{
		{"root", nil, []string{"STATE_DIRECTORY=" + filepath.Join(base, "state"), "RUNTIME_DIRECTORY=" + filepath.Join(base, "run")}, filepath.Join(base, "run", "web")},
		{"nobody", credential(t, "nobody"), []string{"HOME=" + home}, filepath.Join(home, ".local", "state", "sluice", "web")},
	} {
		t.Run(tc.who, func(t *testing.T) {
			env := append([]string{"PATH=/usr/bin:/bin", "NOTIFY_SOCKET=", "WATCHDOG_USEC="}, tc.env...)
			cmd := exec.Command(bin, "serve")
			cmd.SysProcAttr, cmd.Env = tc.cred, env
			p := &relProc{cmd: cmd, stderr: &logbuf.Buffer{}, done: make(chan struct{})}
			cmd.Stderr = p.stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			go func() { p.err = cmd.Wait(); close(p.done) }()
			defer func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = p.wait(t, 30*time.Second) }()
			p.waitSockets(t, tc.sock)
			st := exec.Command(bin, "status")
			st.SysProcAttr, st.Env = tc.cred, env
			out, err := st.CombinedOutput()
			if err != nil || !strings.Contains(string(out), "sluice") {
				t.Fatalf("sluice status as %s: %v\n%s\ndaemon:\n%s", tc.who, err, out, p.stderr.String())
			}
			if l := tcpListeners(t, p.pid()); len(l) > 0 {
				t.Errorf("the daemon listens on TCP: %v", l)
			}
		})
	}
}

// tcpListeners returns the TCP sockets in state LISTEN that process pid
// holds (its descriptors' socket inodes, looked up in the kernel's tables).
func tcpListeners(t *testing.T, pid int) []string {
	t.Helper()
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		if l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); err == nil && strings.HasPrefix(l, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	var out []string
	for _, table := range []string{"tcp", "tcp6"} {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, table))
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) > 9 && f[3] == "0A" && inodes[f[9]] {
				out = append(out, table+" "+f[1])
			}
		}
	}
	return out
}
