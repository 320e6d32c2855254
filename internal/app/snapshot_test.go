package app

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sluice/internal/config"
)

func snapConfig(dir string, guard bool) string {
	return fmt.Sprintf(`state_dir = %q
[store.snapshot]
interval = "100ms"
restart_guard = %v
[anvil]
enabled = false
[throttle]
enabled = false
[policy]
listen = ["unix:policy"]
[[policy.rule]]
name = "r"
count = "messages"
key = ["sender"]
limit = ["3/60s exact"]
`, dir, guard)
}

// policyVerb sends one END-OF-MESSAGE request for sender and returns the
// action's verb.
func policyVerb(t *testing.T, sock, sender string) string {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "request=smtpd_access_policy\nprotocol_state=END-OF-MESSAGE\nclient_address=192.0.2.1\nsender=%s\nrecipient_count=1\n\n", sender)
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	verb, _, _ := strings.Cut(strings.TrimPrefix(strings.TrimSpace(line), "action="), " ")
	return verb
}

type daemonRun struct {
	d   *Daemon
	log *syncLog
}

// syncLog collects log text from several goroutines.
type syncLog struct {
	ch chan string
	b  strings.Builder
}

func (s *syncLog) Write(p []byte) (int, error) { s.ch <- string(p); return len(p), nil }

func (s *syncLog) String() string {
	for {
		select {
		case l := <-s.ch:
			s.b.WriteString(l)
		default:
			return s.b.String()
		}
	}
}

func runSnapDaemon(t *testing.T, path string) daemonRun {
	t.Helper()
	cfg, errs := config.Load(path)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	lg := &syncLog{ch: make(chan string, 1000)}
	d, err := New(cfg, path, slog.New(slog.NewTextHandler(lg, &slog.HandlerOptions{Level: slog.LevelDebug})), nil)
	if err != nil {
		t.Fatal(err)
	}
	d.Start()
	return daemonRun{d, lg}
}

func (r daemonRun) stop(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.d.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestSnapshotAcrossRestart: a sender over its exact limit is still over
// it after a graceful restart; a corrupt snapshot is refused with one
// line and the daemon starts empty; an unclean stop with the restart
// guard on holds exact limits back.
func TestSnapshotAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	path := writeConfig(t, dir, snapConfig(dir, false))
	sock, file := filepath.Join(dir, "policy"), filepath.Join(dir, "store.snapshot")

	// A write cut short by a crash left a temporary file: removed.
	stale := filepath.Join(dir, ".store.snapshot.tmp-123")
	os.WriteFile(stale, []byte("SLUICEMS half"), 0o600)
	r := runSnapDaemon(t, path)
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Fatalf("stale temporary file kept: %v", err)
	}
	for i := range 3 {
		if v := policyVerb(t, sock, "s@example.org"); v != "DUNNO" {
			t.Fatalf("request %d: %s", i, v)
		}
	}
	if v := policyVerb(t, sock, "s@example.org"); v != "DEFER_IF_PERMIT" {
		t.Fatalf("4th request: %s", v)
	}
	r.stop(t)
	if !strings.Contains(r.log.String(), "store snapshot written") {
		t.Fatalf("no final snapshot logged:\n%s", r.log.String())
	}

	r = runSnapDaemon(t, path)
	if v := policyVerb(t, sock, "s@example.org"); v != "DEFER_IF_PERMIT" {
		t.Fatalf("after a restart: %s, want still deferred", v)
	}
	if v := policyVerb(t, sock, "other@example.org"); v != "DUNNO" {
		t.Fatalf("another sender after a restart: %s", v)
	}
	if l := r.log.String(); !strings.Contains(l, "store snapshot restored") || !strings.Contains(l, "keys=1") || !strings.Contains(l, "clean_stop=true") {
		t.Fatalf("restore not logged as expected:\n%s", l)
	}
	// Wait for a periodic (unclean) snapshot, keep it: it is what a kill
	// -9 leaves behind.
	written := func() int { return strings.Count(r.log.String(), `msg="store snapshot written"`) }
	before := written()
	eventuallyTrue(t, func() bool { return written() > before }, "a periodic snapshot after the requests")
	crashed, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	r.stop(t)

	// Garbage, another version, a base cut short (a write cut short in
	// the log after it is not refused: TestLogTornTail).
	for _, bad := range []string{"garbage", "SLUICEMS\x00\x07rest", string(crashed[:30])} {
		os.WriteFile(file, []byte(bad), 0o600)
		r = runSnapDaemon(t, path)
		if v := policyVerb(t, sock, "s@example.org"); v != "DUNNO" {
			t.Fatalf("after a refused snapshot %.12q: %s, want a fresh start", bad, v)
		}
		r.stop(t)
		if n := strings.Count(r.log.String(), "store snapshot refused"); n != 1 {
			t.Fatalf("%.12q: %d refusal lines, want 1:\n%s", bad, n, r.log.String())
		}
	}

	// Unclean stop without the guard: counts as of the last write, a
	// warning; with it, exact limits grant nothing for one period.
	os.WriteFile(file, crashed, 0o600)
	r = runSnapDaemon(t, path)
	if v := policyVerb(t, sock, "s@example.org"); v != "DEFER_IF_PERMIT" {
		t.Fatalf("unclean snapshot: %s", v)
	}
	if v := policyVerb(t, sock, "new@example.org"); v != "DUNNO" {
		t.Fatalf("unclean snapshot, guard off, new sender: %s", v)
	}
	r.stop(t)
	if !strings.Contains(r.log.String(), "the last stop was not clean") {
		t.Fatalf("unclean stop not logged:\n%s", r.log.String())
	}
	writeConfig(t, dir, snapConfig(dir, true))
	os.WriteFile(file, crashed, 0o600)
	r = runSnapDaemon(t, path)
	defer r.stop(t)
	if v := policyVerb(t, sock, "new2@example.org"); v != "DEFER_IF_PERMIT" {
		t.Fatalf("restart guard on, new sender: %s, want held back", v)
	}
	if !strings.Contains(r.log.String(), "restart guard") {
		t.Fatalf("guard not logged:\n%s", r.log.String())
	}
}

// TestSnapshotWriteFailingKeepsServing: a snapshot that cannot be written
// (here its directory is missing) is logged once, decisions go on, and
// the recovery is logged once when writes succeed again.
func TestSnapshotWriteFailingKeepsServing(t *testing.T) {
	dir := t.TempDir()
	body := strings.Replace(snapConfig(dir, false), "[store.snapshot]\n", "[store.snapshot]\nfile = \"snap/store.snapshot\"\n", 1)
	path := writeConfig(t, dir, body)
	r := runSnapDaemon(t, path)
	defer r.stop(t)
	sock := filepath.Join(dir, "policy")
	for range 3 {
		if v := policyVerb(t, sock, "s@example.org"); v != "DUNNO" {
			t.Fatalf("with snapshots failing: %s", v)
		}
	}
	// Five intervals, all failing: one ERROR line, the others at debug.
	eventuallyTrue(t, func() bool { return strings.Count(r.log.String(), "store snapshot: write failed again") >= 4 }, "five failed writes")
	if n := strings.Count(r.log.String(), "level=ERROR msg=\"store snapshot: write failed;"); n != 1 {
		t.Fatalf("%d failure lines, want 1:\n%s", n, r.log.String())
	}
	if err := os.Mkdir(filepath.Join(dir, "snap"), 0o700); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(r.log.String(), "store snapshot: writing again") {
		if time.Now().After(deadline) {
			t.Fatalf("no recovery logged:\n%s", r.log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := os.Stat(filepath.Join(dir, "snap", "store.snapshot")); err != nil {
		t.Fatal(err)
	}
}
