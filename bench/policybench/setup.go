package main

import (
	"context"
	_ "embed"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"sluice/bench/internal/daemons"
	"sluice/bench/internal/procstat"
)

// postfwdChildren are postfwd2's pre-forked children: it pins one per
// persistent connection, so enough for c=64 plus spares, never reaped
// between runs.
const postfwdChildren = 72

var (
	//go:embed postfwd.cf
	postfwdRules string
	//go:embed Syslog.pm
	syslogStandIn string
)

// sluiceConfig is sluice serve's configuration: a policy door on port
// with the benchmark's rule, its state in the directory state.
func sluiceConfig(state string, port int) string {
	return fmt.Sprintf(`state_dir = "%s"
[anvil]
enabled = false
[policy]
listen = ["inet:127.0.0.1:%d"]
[[policy.rule]]
name = "sender-rate"
count = "messages"            # counted once per message, at END-OF-MESSAGE
key = ["sender"]
limit = ["1000/60s exact"]
action = "DEFER_IF_PERMIT too much mail from {key}: {count}/{limit}"
`, state, port)
}

// prlConfig is policyd-rate-limit's configuration, in dir, as u:g.
func prlConfig(dir, u, g string, port int) string {
	return fmt.Sprintf(`debug: False
user: "%s"
group: "%s"
pidfile: "%s/policyd-rate-limit.pid"
backend: 0 # SQLite
sqlite_config:
    database: ":memory:"
SOCKET: ["127.0.0.1", %d]
# Each sender may send 1000 mails per 60 s. Version 1.0.1 counts at RCPT
# only (one row per recipient) and answers every other state with DUNNO.
limits:
    - [1000, 60]
limits_by_id: {}
limit_by_sasl: False
limit_by_sender: True
limit_by_ip: False
limited_networks: []
success_action: "DUNNO"
fail_action: "DEFER_IF_PERMIT too much mail from this sender"
db_error_action: "DUNNO"
report: False
delay_to_close: 2 # see policybench's doc
`, u, g, dir, port)
}

// build builds sluice and policyload into the run's directory.
func (b *bench) build(ctx context.Context) error {
	if _, err := os.Stat("cmd/sluice"); err != nil {
		return fmt.Errorf("run from the repository's root: %w", err)
	}
	daemons.Logf("building sluice, policyload, policyfloor and protofloor in %s", b.dir)
	for _, p := range [][2]string{{"sluice", "./cmd/sluice"}, {"policyload", "./bench/policyload"}, {"policyfloor", "./bench/policyfloor"}} {
		if out, err := exec.CommandContext(ctx, "go", "build", "-o", b.path(p[0]), p[1]).CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s: %v\n%s", p[1], err, out)
		}
	}
	if out, err := exec.CommandContext(ctx, "cc", "-O2", "-Wall", "-o", b.path("protofloor"), "bench/protofloor.c").CombinedOutput(); err != nil {
		return fmt.Errorf("cc bench/protofloor.c (gcc is needed for the C floor): %v\n%s", err, out)
	}
	return nil
}

// startSluice starts sluice serve with a policy door on b.port["sluice"].
func (b *bench) startSluice(ctx context.Context) (err error) {
	b.sluice, err = b.startServe(ctx, "sluice", b.path("sluice"))
	return err
}

// startBaseline starts the BASELINE binary as startSluice starts sluice,
// on b.port["baseline"].
func (b *bench) startBaseline(ctx context.Context) (err error) {
	b.baseline, err = b.startServe(ctx, "baseline", b.s.baseline)
	return err
}

// startServe starts bin's serve as target with the benchmark's rule, its
// state and configuration under name-prefixed files in the run's directory.
func (b *bench) startServe(ctx context.Context, target, bin string) (*daemons.Proc, error) {
	port := b.port[target]
	daemons.Logf("starting %s serve (%s) with a policy door on 127.0.0.1:%d", target, bin, port)
	state := b.path(target + "-state")
	if err := os.Mkdir(state, 0o700); err != nil {
		return nil, err
	}
	cfg := b.path(target + ".toml")
	if err := os.WriteFile(cfg, []byte(sluiceConfig(state, port)), 0o644); err != nil {
		return nil, err
	}
	p, err := b.startLogged(target, b.path(target+".log"), exec.Command(bin, "serve", "-c", cfg))
	if err != nil {
		return nil, err
	}
	if err := daemons.WaitTCP(ctx, b.addr(target), 10*time.Second, p); err != nil {
		tail(b.path(target+".log"), 30)
		return nil, fmt.Errorf("%s's policy door did not come up: %w", target, err)
	}
	return p, nil
}

// startFloor starts bench/policyfloor on b.port["floor"].
func (b *bench) startFloor(ctx context.Context) error {
	daemons.Logf("starting the floor (bench/policyfloor) on %s", b.addr("floor"))
	p, err := b.startLogged("floor", b.path("floor.log"), exec.Command(b.path("policyfloor"), "-listen", b.addr("floor")))
	if err != nil {
		return err
	}
	b.floor = p
	if err := daemons.WaitTCP(ctx, b.addr("floor"), 10*time.Second, p); err != nil {
		tail(b.path("floor.log"), 30)
		return fmt.Errorf("the floor did not come up: %w", err)
	}
	return nil
}

// startCFloor starts bench/protofloor.c's policy mode on b.port["cfloor"].
func (b *bench) startCFloor(ctx context.Context) error {
	daemons.Logf("starting the C floor (bench/protofloor.c) on %s", b.addr("cfloor"))
	p, err := b.startLogged("cfloor", b.path("cfloor.log"), exec.Command(b.path("protofloor"), "policy", b.addr("cfloor")))
	if err != nil {
		return err
	}
	b.cfloor = p
	if err := daemons.WaitTCP(ctx, b.addr("cfloor"), 10*time.Second, p); err != nil {
		tail(b.path("cfloor.log"), 30)
		return fmt.Errorf("the C floor did not come up: %w", err)
	}
	return nil
}

// startLogged starts cmd as the daemon name, its output in logPath.
func (b *bench) startLogged(name, logPath string, cmd *exec.Cmd) (*daemons.Proc, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	return b.set.Start(name, cmd)
}

// ids are a user's and its primary group's names and numbers.
type ids struct {
	user, group string
	uid, gid    int
}

// lookupIDs finds name's user and primary group.
func lookupIDs(name string) (ids, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return ids{}, err
	}
	g, err := user.LookupGroupId(u.Gid)
	if err != nil {
		return ids{}, err
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return ids{user: name, group: g.Name, uid: uid, gid: gid}, nil
}

// writeOwned writes data to path with mode, owned by who.
func writeOwned(path, data string, mode os.FileMode, who ids) error {
	if err := os.WriteFile(path, []byte(data), mode); err != nil {
		return err
	}
	if err := os.Chmod(path, mode); err != nil {
		return err
	}
	return os.Chown(path, who.uid, who.gid)
}

// startPostfwd starts postfwd2 as nobody, daemonized into a session of
// its own that the watchdog knows, and waits for its children.
func (b *bench) startPostfwd(ctx context.Context) error {
	port := b.port["postfwd"]
	daemons.Logf("starting postfwd2 on 127.0.0.1:%d (%d pre-forked children, request cache %ds)", port, postfwdChildren, b.s.postfwdCache)
	pf := b.path("postfwd")
	nobody, err := lookupIDs("nobody")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(pf, "perl5", "Sys"), 0o755); err != nil {
		return err
	}
	if err := os.Chown(pf, nobody.uid, nobody.gid); err != nil {
		return err
	}
	root := ids{uid: 0, gid: 0}
	for _, f := range []struct{ path, data string }{
		{filepath.Join(pf, "postfwd.cf"), postfwdRules},
		{filepath.Join(pf, "perl5", "Sys", "Syslog.pm"), syslogStandIn},
	} {
		if err := writeOwned(f.path, f.data, 0o644, root); err != nil {
			return err
		}
	}
	if err := writeOwned(filepath.Join(pf, "syslog"), "", 0o644, nobody); err != nil {
		return err
	}
	// postfwd2 -C exits 1 even when all is well; the rule must be listed.
	show, _ := exec.CommandContext(ctx, "/usr/sbin/postfwd2", "--file", filepath.Join(pf, "postfwd.cf"), "--showconfig").CombinedOutput()
	rule := firstLine(string(show), `id->"SENDER_RATE"`)
	if rule == "" {
		os.Stderr.Write(show)
		return fmt.Errorf("postfwd2 did not parse its rule")
	}
	daemons.Logf("postfwd2 rule: %s", firstLine(string(show), "SENDER_RATE"))
	cmd := exec.CommandContext(ctx, "perl", "-T", "-w", "-I"+filepath.Join(pf, "perl5"), "/usr/sbin/postfwd2",
		"--daemon", "--file", filepath.Join(pf, "postfwd.cf"),
		"--server_socket", "tcp:127.0.0.1:"+strconv.Itoa(port),
		"--cache_socket", "unix::"+filepath.Join(pf, "cache.sock"),
		"--pidfile", filepath.Join(pf, "master.pid"),
		"--user", "nobody", "--group", nobody.group,
		"--cache="+strconv.Itoa(b.s.postfwdCache),
		"--min_servers="+strconv.Itoa(postfwdChildren), "--max_servers=128",
		"--min_spare_servers=8", "--max_spare_servers=96",
		"--summary=0", "--nodns")
	cmd.Env = append(os.Environ(), "BENCH_SYSLOG_FILE="+filepath.Join(pf, "syslog"))
	// A file, not a pipe: the daemon it leaves behind may keep it open.
	out, err := os.Create(filepath.Join(pf, "start.log"))
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = out, out
	err = cmd.Run()
	out.Close()
	if err != nil {
		tail(filepath.Join(pf, "start.log"), 1000)
		tail(filepath.Join(pf, "syslog"), 1000)
		return fmt.Errorf("postfwd2 did not start: %w", err)
	}
	return b.waitPostfwd(ctx)
}

// waitPostfwd waits for postfwd2's pid file, listener and children.
func (b *bench) waitPostfwd(ctx context.Context) error {
	pf := b.path("postfwd")
	for range 100 {
		if b.postfwdSID = readPID(filepath.Join(pf, "master.pid")); b.postfwdSID > 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if b.postfwdSID <= 0 {
		return fmt.Errorf("postfwd2 wrote no pid file")
	}
	if err := b.set.WatchSession(b.postfwdSID); err != nil {
		return err
	}
	sess := session{b.postfwdSID}
	if err := daemons.WaitTCP(ctx, b.addr("postfwd"), 20*time.Second, sess); err != nil {
		tail(filepath.Join(pf, "syslog"), 30)
		return fmt.Errorf("postfwd2 did not listen: %w", err)
	}
	// Master, cache daemon, policy daemon, and the pre-forked children.
	for i := 0; i < 300 && len(procstat.SessionPIDs(b.postfwdSID)) < postfwdChildren+3; i++ {
		time.Sleep(100 * time.Millisecond)
	}
	daemons.Logf("postfwd2 runs as session %d with %d policy children", b.postfwdSID, len(procstat.SessionPIDs(b.postfwdSID))-3)
	return nil
}

// session is a daemon's session, alive while it has a process.
type session struct{ sid int }

func (s session) Alive() bool    { return len(procstat.SessionPIDs(s.sid)) > 0 }
func (s session) String() string { return "session " + strconv.Itoa(s.sid) }

// readPID is the number in a pid file, 0 if none.
func readPID(path string) int {
	b, _ := os.ReadFile(path)
	n, err := strconv.Atoi(strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' {
			return r
		}
		return -1
	}, string(b)))
	if err != nil {
		return 0
	}
	return n
}

// startPRL starts policyd-rate-limit as its own user (or nobody).
func (b *bench) startPRL(ctx context.Context) error {
	who, err := lookupIDs("policyd-rate-limit")
	if err != nil {
		if who, err = lookupIDs("nobody"); err != nil {
			return err
		}
	}
	prl := b.path("prl")
	if err := os.Mkdir(prl, 0o755); err != nil {
		return err
	}
	if err := os.Chown(prl, who.uid, who.gid); err != nil {
		return err
	}
	conf := filepath.Join(prl, "policyd-rate-limit.yaml")
	if err := writeOwned(conf, prlConfig(prl, who.user, who.group, b.port["policyd-rate-limit"]), 0o644, ids{}); err != nil {
		return err
	}
	daemons.Logf("starting policyd-rate-limit on %s as %s", b.addr("policyd-rate-limit"), who.user)
	cmd := exec.Command("/usr/bin/policyd-rate-limit", "--file", conf)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{
		Uid: uint32(who.uid), Gid: uint32(who.gid), Groups: []uint32{}, // setpriv --clear-groups
	}}
	p, err := b.startLogged("policyd-rate-limit", filepath.Join(prl, "log"), cmd)
	if err != nil {
		return err
	}
	b.prl = p
	if err := daemons.WaitTCP(ctx, b.addr("policyd-rate-limit"), 20*time.Second, p); err != nil {
		tail(filepath.Join(prl, "log"), 30)
		return fmt.Errorf("policyd-rate-limit did not listen: %w", err)
	}
	return nil
}

// warnSystemPeers warns about the packages' own daemons still running:
// they would compete for the CPUs.
func warnSystemPeers() {
	for _, port := range []int{10040, 10045} {
		if daemons.Listening("127.0.0.1:" + strconv.Itoa(port)) {
			daemons.Logf("warning: something still listens on port %d (a system postfwd?); it is left alone", port)
		}
	}
	if fi, err := os.Stat("/var/spool/postfix/ratelimit/policy"); err == nil && fi.Mode().Type() == fs.ModeSocket {
		dirs, _ := os.ReadDir("/proc")
		for _, d := range dirs {
			if pid, err := strconv.Atoi(d.Name()); err == nil && strings.Contains(procstat.Cmdline(pid), "/usr/bin/policyd-rate-limit") {
				daemons.Logf("warning: a system policyd-rate-limit seems to run; it is left alone")
				return
			}
		}
	}
}

// firstLine is the first line of s that contains sub, "" if none.
func firstLine(s, sub string) string {
	for l := range strings.SplitSeq(s, "\n") {
		if strings.Contains(l, sub) {
			return l
		}
	}
	return ""
}

// tail copies the last n lines of the file at path to stderr.
func tail(path string, n int) {
	data, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	fmt.Fprintln(os.Stderr, strings.Join(lines, "\n"))
}

// disableService makes sure the package's own daemon name neither runs
// nor starts at boot, with or without systemd: the packages enable their
// services on install (a policy-rc.d or a missing systemd may have kept
// them from starting).
func disableService(name, pidfile string) {
	quiet := func(prog string, args ...string) {
		if _, err := exec.LookPath(prog); err == nil {
			_ = exec.Command(prog, args...).Run()
		}
	}
	// "disable" only edits symlinks, so it works without a running systemd.
	quiet("systemctl", "disable", name+".service")
	if fi, err := os.Stat("/run/systemd/system"); err == nil && fi.IsDir() {
		quiet("systemctl", "stop", name+".service")
	}
	quiet("update-rc.d", name, "disable")
	pid := readPID(pidfile)
	if pid <= 1 || syscall.Kill(pid, 0) != nil {
		return
	}
	daemons.Logf("stopping the system's %s (pid %d)", name, pid)
	_ = exec.Command("/etc/init.d/"+name, "stop").Run()
	time.Sleep(time.Second)
	if syscall.Kill(pid, 0) == nil {
		_ = syscall.Kill(pid, syscall.SIGTERM)
	}
}
