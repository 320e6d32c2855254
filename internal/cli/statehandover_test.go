package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"sluice/internal/status"
	"sluice/internal/testutil/logbuf"
	"sluice/internal/testutil/peer"
)

// rootRunLeftovers runs sluice as root without a user (README's first
// command), counts two of sender's three messages an hour, stops it, and
// returns the state directory it left (root's files in a directory an
// administrator then gave to sluice) and a config body for later starts.
func rootRunLeftovers(t *testing.T, bin, base, sender string) (state, body string) {
	t.Helper()
	state, run := filepath.Join(base, "state"), filepath.Join(base, "run")
	body = fmt.Sprintf(`state_dir = %q
runtime_dir = %q
[store.snapshot]
interval = "1s"
[throttle]
enabled = true
listen = ["unix:throttle"]
[[throttle.policy]]
name = "relay"
match = ["*"]
limit = "10/1s"
[[policy.rule]]
name = "sender"
count = "messages"
key = ["sender"]
limit = ["3/1h exact"]
[web]
listen = ["unix:web"]
`, state, run)
	cfg := filepath.Join(base, "root.toml")
	if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	p := relStart(t, bin, []string{"serve", "-c", cfg}, filepath.Join(run, "policy"))
	p.stderr.WaitFor(t, "sluice started")
	for i := range 2 {
		if got := policyOnce(t, filepath.Join(run, "policy"), sender); got != "DUNNO" {
			t.Fatalf("root run, message %d: %q", i+1, got)
		}
	}
	// An administrator's suspension: the marks file is written too.
	if code, out, _ := runControl(t, bin, "throttle", "suspend", "-s", filepath.Join(run, "control"), "-for", "1h", "relay.example"); code != 0 {
		t.Fatalf("throttle suspend: %d %s", code, out)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.wait(t, 30*time.Second); err != nil {
		t.Fatalf("root run's stop: %v\n%s", err, p.stderr.String())
	}
	ents, err := os.ReadDir(state)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		fi, _ := e.Info()
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid == 0 && fi.Mode().IsRegular() {
			names = append(names, e.Name())
		}
	}
	if !slices.Contains(names, "store.snapshot") || !slices.Contains(names, "throttle.marks") {
		t.Fatalf("the root run left %v as root's, want the store file and the marks", names)
	}
	t.Logf("root's files the root run left: %v", names)
	// The administrator gives the directories to sluice.
	chownNames(t, state, "sluice", "sluice")
	chownNames(t, run, "sluice", "sluice")
	return state, body
}

// statusOf runs `sluice status -json`-like: /status.json over the web
// socket.
func statusOf(t *testing.T, sock string) status.Status {
	t.Helper()
	var st status.Status
	out, err := exec.Command("curl", "-sf", "--unix-socket", sock, "http://sluice/status.json").Output()
	if err != nil {
		t.Fatalf("status.json: %v", err)
	}
	if err := json.Unmarshal(out, &st); err != nil {
		t.Fatalf("status.json: %v", err)
	}
	return st
}

// TestRootRunStateHandedOver: README's first command run as root leaves
// root's state files (the store file, the marks); a later start as
// root with user = "sluice" gives every one of them to sluice and keeps
// the counts (the third message passes, the fourth is deferred) and the
// suspension; `sluice status` says healthy. A file of another user in
// the state directory makes that start fail, naming the fix.
func TestRootRunStateHandedOver(t *testing.T) {
	peer.Root(t, "the state is a root run's")
	base := deployDir(t)
	bin := filepath.Join(base, "sluice")
	if out, err := exec.Command("go", "build", "-o", bin, "sluice/cmd/sluice").CombinedOutput(); err != nil {
		t.Fatalf("build sluice: %v\n%s", err, out)
	}
	state, body := rootRunLeftovers(t, bin, base, "kept@example.org")
	run := filepath.Join(base, "run")
	cfg := filepath.Join(base, "sluice.toml")
	if err := os.WriteFile(cfg, []byte("user = \"sluice\"\n"+body), 0o644); err != nil {
		t.Fatal(err)
	}
	p := relStart(t, bin, []string{"serve", "-c", cfg}, filepath.Join(run, "policy"))
	p.stderr.WaitFor(t, "sluice started")
	assertUnprivileged(t, p.pid(), "sluice")
	if got := policyOnce(t, filepath.Join(run, "policy"), "kept@example.org"); got != "DUNNO" {
		t.Fatalf("third message: %q", got)
	}
	if got := policyOnce(t, filepath.Join(run, "policy"), "kept@example.org"); !strings.HasPrefix(got, "DEFER") {
		t.Fatalf("fourth message: %q, want DEFER: the root run's counts were not kept\n%s", got, p.stderr.String())
	}
	uid, _ := strconv.Atoi(peer.User(t, "sluice").Uid)
	ents, _ := os.ReadDir(state)
	for _, e := range ents {
		fi, _ := e.Info()
		if st := fi.Sys().(*syscall.Stat_t); fi.Mode().IsRegular() && int(st.Uid) != uid {
			t.Errorf("%s is owned by uid %d after the start as sluice", e.Name(), st.Uid)
		}
	}
	st := statusOf(t, filepath.Join(run, "web"))
	if st.Store == nil || st.Store.Degraded != "" || len(st.ThrottleKeys) != 1 {
		t.Errorf("status: store %+v, throttle keys %+v; want healthy, not degraded, relay.example suspended", st.Store, st.ThrottleKeys)
	}
	if strings.Contains(p.stderr.String(), "level=ERROR") {
		t.Errorf("the start logged an error:\n%s", p.stderr.String())
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.wait(t, 30*time.Second); err != nil {
		t.Fatalf("stop: %v", err)
	}

	// Another user's file among the state files: not sluice's to give.
	foreign := filepath.Join(state, "store.snapshot.changes")
	if err := os.WriteFile(foreign, []byte("not sluice's"), 0o600); err != nil {
		t.Fatal(err)
	}
	chownNames(t, foreign, "nobody", "nogroup")
	out, err := exec.Command(bin, "serve", "-c", cfg).CombinedOutput()
	if err == nil || !strings.Contains(string(out), foreign) || !strings.Contains(string(out), "cannot give to user sluice") || !strings.Contains(string(out), "remove each") {
		t.Fatalf("a start with another user's state file: %v\n%s", err, out)
	}
}

// TestRootRunStateDegraded: the same leftovers, read by a daemon started
// as user sluice directly (a unit with User=sluice, no root phase): it
// cannot read root's files, and says so until its next snapshot: degraded
// with the file and why in /status.json, `sluice status` and
// sluice_state_degraded.
func TestRootRunStateDegraded(t *testing.T) {
	peer.Root(t, "the state is a root run's")
	base := deployDir(t)
	bin := filepath.Join(base, "sluice")
	if out, err := exec.Command("go", "build", "-o", bin, "sluice/cmd/sluice").CombinedOutput(); err != nil {
		t.Fatalf("build sluice: %v\n%s", err, out)
	}
	state, body := rootRunLeftovers(t, bin, base, "lost@example.org")
	// The snapshot unreadable by others, as an umask 077 leaves it.
	if err := os.Chmod(filepath.Join(state, "store.snapshot"), 0o600); err != nil {
		t.Fatal(err)
	}
	run := filepath.Join(base, "run")
	cfg := filepath.Join(base, "sluice.toml")
	if err := os.WriteFile(cfg, []byte(strings.Replace(body, "interval = \"1s\"", "interval = \"3s\"", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", "-c", cfg)
	cmd.SysProcAttr = credential(t, "sluice")
	cmd.Env = append(os.Environ(), "NOTIFY_SOCKET=", "WATCHDOG_USEC=")
	var logs logbuf.Buffer
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	web := filepath.Join(run, "web")
	waitUntil(t, "the web socket answers", func() bool { _, err := os.Stat(web); return err == nil },
		func() string { return logs.String() })
	st := statusOf(t, web)
	if st.Store == nil || !strings.Contains(st.Store.Degraded, "store.snapshot") || !strings.Contains(st.Store.Degraded, "permission denied") {
		t.Fatalf("status after a start that could not read the snapshot: %+v\n%s", st.Store, logs.String())
	}
	out, _ := exec.Command(bin, "status", "-u", "unix:"+web).CombinedOutput()
	if !strings.Contains(string(out), "DEGRADED (") || !strings.Contains(string(out), "store.snapshot") {
		t.Errorf("sluice status does not say degraded:\n%s", out)
	}
	waitUntil(t, "sluice_state_degraded 1", func() bool { return scrape(t, web)["sluice_state_degraded"] == 1 },
		func() string { return fmt.Sprint(scrape(t, web)["sluice_state_degraded"]) })
	// The next periodic snapshot is written: the counts on disk are this
	// run's whole again.
	waitUntil(t, "the snapshot's reason to clear", func() bool {
		return !strings.Contains(statusOf(t, web).Store.Degraded, "store.snapshot:")
	}, func() string { return statusOf(t, web).Store.Degraded })
}
