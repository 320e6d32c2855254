package main

import (
	"context"
	"embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"sluice/bench/internal/daemons"
)

//go:embed c/*.c
var cSources embed.FS

// wantSteps are the steps each milter must ask for: one that asked for
// more or fewer would measure something else.
var wantSteps = map[string]string{
	"sluice-connect":    "connect",
	"sluice-all":        "connect,helo,mail,rcpt,data,header,eoh,body",
	"libmilter":         "connect,helo,mail,rcpt,data,header,eoh,body,unknown",
	"libmilter-connect": "connect",
	"floor":             "connect",
	"go-floor":          "connect",
	baselineTarget:      "connect",
}

// socketNames are the milters' sockets in the run's directory (short:
// sun_path is below 108 bytes).
var socketNames = map[string]string{
	"sluice-connect": "sc.sock", "sluice-all": "sa.sock", "libmilter": "lm.sock",
	"libmilter-connect": "lc.sock", "floor": "fl.sock", "go-floor": "gf.sock", baselineTarget: "bc.sock",
}

// command runs name with args, its combined output returned in the error
// if it fails.
func command(ctx context.Context, name string, args ...string) error {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return nil
}

// build builds sluice, milterload and the Go floor with go, and the C
// milters with cc, into the run's directory.
func (b *bench) build(ctx context.Context) error {
	if _, err := os.Stat("cmd/sluice"); err != nil {
		return fmt.Errorf("run from the repository's root: %w", err)
	}
	if _, err := os.Stat("/usr/include/libmilter/mfapi.h"); err != nil {
		return fmt.Errorf("libmilter-dev is missing (apt-get install libmilter-dev): %w", err)
	}
	daemons.Logf("building sluice, milterload and miltergofloor in %s", b.dir)
	for _, p := range [][2]string{{"sluice", "./cmd/sluice"}, {"milterload", "./bench/milterload"}, {"miltergofloor", "./bench/miltergofloor"}} {
		if err := command(ctx, "go", "build", "-o", b.path(p[0]), p[1]); err != nil {
			return err
		}
	}
	entries, err := cSources.ReadDir("c")
	if err != nil {
		return err
	}
	for _, e := range entries {
		src, err := cSources.ReadFile("c/" + e.Name())
		if err != nil {
			return err
		}
		if err := os.WriteFile(b.path(e.Name()), src, 0o644); err != nil {
			return err
		}
	}
	for _, m := range []struct{ what, name string }{
		{"the libmilter accept-all milter", "acceptall"},
		{"the libmilter CONNECT-only milter", "connectonly"},
		{"the floor milter", "floor"},
	} {
		daemons.Logf("building %s in %s", m.what, b.dir)
		args := []string{"-O2", "-Wall", "-o", b.path(m.name), b.path(m.name + ".c")}
		if m.name != "floor" {
			args = append(args, b.path("libmilter_main.c"), "-lmilter", "-lpthread")
		}
		if err := command(ctx, "cc", args...); err != nil {
			return err
		}
	}
	return nil
}

// sluiceConfig is a sluice serve configuration for target, whose milter
// listens on sock; extraMilter goes into [milter], extraTables after it.
func sluiceConfig(dir, target, sock string, idle int, extraMilter, extraTables string) string {
	return fmt.Sprintf(`state_dir = "%s/%s-state"
[[class]]
name = "loopback"
match = ["127.0.0.0/8"]
refuse = 1000
[[class]]
name = "rest"
match = ["*"]
[anvil]
enabled = false
[policy]
enabled = false
[throttle]
enabled = false
[milter]
listen = ["unix:%s"]
max_sessions = %d
# The idle figure's sessions all come from one user (milterload's), as
# Postfix's all come from postfix: no per-peer cap below max_sessions.
max_conns_per_peer = 0
%s
[milter.socket]
owner = "postfix"
mode = "0600"
%s
`, dir, target, sock, idle+2000, extraMilter, extraTables)
}

// allEventsRule is sluice-all's rule: it counts bytes, so the milter asks
// for every step; its limit is never reached.
const allEventsRule = `
[[policy.rule]]
name = "bytes"
count = "bytes"
key = ["client_address"]
limit = ["2000000000/1h smooth"]
action = "DEFER_IF_PERMIT too many bytes"`

// startMilters starts the run's milters (both sluice daemons, BASELINE's,
// the three C milters; TARGETS' only), waits for their sockets, and
// checks the steps each asks for.
func (b *bench) startMilters(ctx context.Context) error {
	// Every target but postfix-alone has a milter.
	all := slices.DeleteFunc(slices.Clone(b.s.targets()), func(t string) bool { return t == "postfix-alone" })
	for _, t := range all {
		if t != "sluice-connect" && t != "sluice-all" && t != baselineTarget {
			continue
		}
		extraMilter, extraTables := "", ""
		if t == "sluice-all" {
			extraMilter, extraTables = "policy_rules = true", allEventsRule
		}
		if err := os.Mkdir(b.path(t+"-state"), 0o700); err != nil {
			return err
		}
		conf := sluiceConfig(b.dir, t, b.sock(t), b.s.idle, extraMilter, extraTables)
		if err := os.WriteFile(b.path(t+".toml"), []byte(conf), 0o644); err != nil {
			return err
		}
		prog := b.path("sluice")
		if t == baselineTarget {
			prog = b.s.baseline
		}
		daemons.Logf("starting %s serve (%s) on %s", prog, t, b.sock(t))
		// Each idle milter session holds a descriptor: Go raises its own
		// soft limit on open files to the hard one, as the script's ulimit.
		if err := b.startDaemon(t, prog, "serve", "-c", b.path(t+".toml")); err != nil {
			return err
		}
	}
	for _, m := range []struct{ target, what, prog, arg string }{
		{"libmilter", "the libmilter accept-all milter", "acceptall", "unix:" + b.sock("libmilter")},
		{"libmilter-connect", "the libmilter CONNECT-only milter", "connectonly", "unix:" + b.sock("libmilter-connect")},
		{"floor", "the floor milter", "floor", b.sock("floor")},
		{"go-floor", "the Go floor milter", "miltergofloor", b.sock("go-floor")},
	} {
		if !slices.Contains(all, m.target) {
			continue
		}
		daemons.Logf("starting %s on %s", m.what, b.sock(m.target))
		if err := b.startDaemon(m.target, b.path(m.prog), m.arg); err != nil {
			return err
		}
	}
	for _, t := range all {
		if err := daemons.WaitSocket(ctx, b.sock(t), 10*time.Second, b.procs[t]); err != nil {
			b.tail(t+".log", 30)
			return fmt.Errorf("%s did not create its socket: %w", t, err)
		}
	}
	for _, t := range all {
		out, err := exec.CommandContext(ctx, b.path("milterload"), "steps", "-socket", b.sock(t)).Output()
		if err != nil {
			return fmt.Errorf("%s: negotiation failed: %w", t, err)
		}
		got := strings.TrimSpace(string(out))
		daemons.Logf("%s asks for %s (end of message is always sent)", t, got)
		if got != "steps="+wantSteps[t] {
			return fmt.Errorf("%s asks for %s, want steps=%s", t, got, wantSteps[t])
		}
	}
	return nil
}

// startDaemon starts target's milter, its output in target.log.
func (b *bench) startDaemon(target, prog string, args ...string) error {
	logf, err := os.Create(b.path(target + ".log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(prog, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	p, err := b.set.Start(target, cmd)
	if err != nil {
		return err
	}
	b.procs[target] = p
	return nil
}

// startPostfix starts one private Postfix instance per target (milterload
// postfix, which stops it when stdin, the liveness pipe, reaches end of
// file) and waits for each to be ready.
func (b *bench) startPostfix(ctx context.Context, alive *os.File) error {
	var used []int
	for _, t := range b.s.targets() {
		port, err := daemons.FreeTCPPort(used...)
		if err != nil {
			return err
		}
		used = append(used, port)
		b.port[t] = port
		args := []string{"postfix", "-dir", b.path("pf-" + t), "-port", strconv.Itoa(port),
			"-set", "smtpd_client_connection_count_limit=0",
			"-set", "smtpd_client_connection_rate_limit=0",
			"-set", "in_flow_delay=0s",
			"-set", "default_process_limit=200",
			"-set", "max_idle=3600s",
			"-set", "milter_default_action=tempfail"}
		if _, ok := socketNames[t]; ok {
			args = append(args, "-set", "smtpd_milters=unix:"+b.sock(t))
		}
		daemons.Logf("starting Postfix (%s) on 127.0.0.1:%d", t, port)
		out, err := os.Create(b.path("pf-" + t + ".out"))
		if err != nil {
			return err
		}
		errf, err := os.Create(b.path("pf-" + t + ".err"))
		if err != nil {
			out.Close()
			return err
		}
		cmd := exec.Command(b.path("milterload"), args...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = alive, out, errf
		p, err := b.set.Start("Postfix ("+t+")", cmd)
		out.Close()
		errf.Close()
		if err != nil {
			return err
		}
		b.procs["pf-"+t] = p
	}
	for _, t := range b.s.targets() {
		line, err := daemons.WaitLine(ctx, b.path("pf-"+t+".out"), "ready ", 90*time.Second, b.procs["pf-"+t])
		if err != nil {
			b.tail("pf-"+t+".err", 1000)
			return fmt.Errorf("the Postfix of %s did not start: %w", t, err)
		}
		b.maillog[t] = strings.TrimPrefix(line, "ready maillog=")
	}
	return nil
}

// tail copies the last n lines of the run's file name to stderr.
func (b *bench) tail(name string, n int) {
	data, _ := os.ReadFile(b.path(name))
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	fmt.Fprintln(os.Stderr, strings.Join(lines, "\n"))
}

// path is name in the run's directory.
func (b *bench) path(name string) string { return filepath.Join(b.dir, name) }

// sock is target's milter socket.
func (b *bench) sock(target string) string { return b.path(socketNames[target]) }
