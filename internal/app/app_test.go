package app

import (
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"sluice/internal/anvil/anviltest"
	"sluice/internal/config"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func writeConfig(t testing.TB, dir, body string) string {
	t.Helper()
	p := filepath.Join(dir, "sluice.toml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func startDaemon(t testing.TB, path string) *Daemon {
	t.Helper()
	return startDaemonLog(t, path, slog.New(slog.DiscardHandler))
}

// startDaemonLog loads path, starts a daemon logging to log, and stops it
// when the test ends.
func startDaemonLog(t testing.TB, path string, log *slog.Logger) *Daemon {
	t.Helper()
	cfg, errs := config.Load(path)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	d, err := New(cfg, path, log, nil)
	if err != nil {
		t.Fatal(err)
	}
	d.Start()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		d.Shutdown(ctx)
	})
	return d
}

const baseConfig = `
state_dir = "%s"
[[class]]
name = "partners"
match = ["192.0.2.0/24"]
[class.anvil]
client_connection_count_limit = %s
[[class]]
name = "rest"
match = ["*"]
[anvil]
listen = ["unix:anvil"]
[anvil.socket]
mode = "0600"
`

func cfgText(dir, limit string) string {
	return strings.Replace(strings.Replace(baseConfig, "%s", dir, 1), "%s", limit, 1)
}

func TestServeAnvilAndReload(t *testing.T) {
	dir := t.TempDir()
	path := writeConfig(t, dir, cfgText(dir, "2"))
	d := startDaemon(t, path)
	sock := filepath.Join(dir, "anvil")
	fi, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 || fi.Mode()&os.ModeSocket == 0 {
		t.Fatalf("socket mode %v, want 0600 socket", fi.Mode())
	}
	cl, err := anviltest.Dial("unix", sock, false)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	// smtpd's default limit is 50; the class allows 2: the reported
	// count for one connection is scaled to 25.
	got, err := cl.Do("connect", "smtp:192.0.2.1")
	if err != nil || got["count"] != 25 || got["rate"] != 1 {
		t.Fatalf("connect: %v %v", got, err)
	}
	// A broken config keeps the running one.
	os.WriteFile(path, []byte("[anvil]\nbogus = 1\n"), 0o644)
	if err := d.Reload(); err == nil || !strings.Contains(err.Error(), "bogus: unknown key") {
		t.Fatalf("reload of a bad file: %v", err)
	}
	if got, _ := cl.Do("connect", "smtp:192.0.2.1"); got["count"] != 25 {
		t.Fatalf("after failed reload: %v", got)
	}
	// A good one applies to streams already open; counts survive.
	writeConfig(t, dir, cfgText(dir, "5"))
	if err := d.Reload(); err != nil {
		t.Fatal(err)
	}
	got, _ = cl.Do("connect", "smtp:192.0.2.1")
	if got["count"] != 10 || got["rate"] != 3 {
		t.Fatalf("after reload (class limit 5): %v, want count 10 rate 3", got)
	}
	look, err := cl.Do("lookup", "smtp:192.0.2.1")
	if err != nil || look["count"] != 1 || look["rate"] != 3 {
		t.Fatalf("lookup: %v %v", look, err)
	}
}

func TestSocketInUseAndStale(t *testing.T) {
	dir := t.TempDir()
	path := writeConfig(t, dir, cfgText(dir, "2"))
	startDaemon(t, path)
	cfg, _ := config.Load(path)
	if _, err := New(cfg, path, slog.New(slog.DiscardHandler), nil); err == nil || !strings.Contains(err.Error(), "in use by a running server") {
		t.Fatalf("second daemon on the same socket: %v", err)
	}
	// A stale socket file (its server died) is replaced.
	dir2 := t.TempDir()
	l, err := net.Listen("unix", filepath.Join(dir2, "anvil"))
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	startDaemon(t, writeConfig(t, dir2, cfgText(dir2, "2")))
	cl, err := anviltest.Dial("unix", filepath.Join(dir2, "anvil"), false)
	if err != nil {
		t.Fatalf("stale socket not replaced: %v", err)
	}
	cl.Close()
}

func TestShutdownReleasesAndUnlinks(t *testing.T) {
	dir := t.TempDir()
	path := writeConfig(t, dir, cfgText(dir, "2"))
	cfg, _ := config.Load(path)
	d, err := New(cfg, path, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	d.Start()
	cl, err := anviltest.Dial("unix", filepath.Join(dir, "anvil"), false)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := cl.Do("connect", "smtp:192.0.2.1"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	if err := d.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if time.Since(start) > 3*time.Second {
		t.Fatalf("shutdown waited %s for an idle client", time.Since(start))
	}
	if _, err := os.Stat(filepath.Join(dir, "anvil")); !os.IsNotExist(err) {
		t.Fatalf("socket left behind: %v", err)
	}
	if held, _ := d.lim.Held(ctx, "anvil\x00c\x00smtp:192.0.2.1"); held != 0 {
		t.Fatalf("connection count %d after its stream closed", held)
	}
}

// TestWatchReloads: writing the file, or replacing it by rename, reloads;
// a broken file keeps the running configuration.
func TestWatchReloads(t *testing.T) {
	dir := t.TempDir()
	path := writeConfig(t, dir, cfgText(dir, "2"))
	d := startDaemon(t, path)
	armed := make(chan struct{})
	watchArmed = func() { close(armed) }
	defer func() { watchArmed = nil }() // after Watch has returned: deferred first, run last
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Watch(ctx, 20*time.Millisecond, nil) }()
	defer func() { cancel(); <-done }()
	select {
	case <-armed:
	case err := <-done:
		t.Fatalf("Watch ended before its watch was armed: %v", err)
	}
	limitOf := func() int64 {
		r := d.Governor()
		return *r.AnvilRules().Classes["partners"].Count
	}
	waitLimit := func(want int64) {
		t.Helper()
		for i := 0; limitOf() != want; i++ {
			if i > 5000 {
				t.Fatalf("class limit %d, want %d", limitOf(), want)
			}
			time.Sleep(time.Millisecond)
		}
	}
	write := func(p, text string) {
		t.Helper()
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(path, cfgText(dir, "7"))
	waitLimit(7)
	tmp := path + ".new"
	write(tmp, cfgText(dir, "9"))
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	waitLimit(9)
	gen := d.generation.Load()
	before := time.Now()
	write(path, "[broken")
	// The watcher must have tried the broken file and failed: only then
	// does an unchanged limit mean anything.
	for i := 0; ; i++ {
		if f := d.reloadFailed.Load(); f != nil && !f.Before(before) {
			break
		}
		if i > 5000 {
			t.Fatal("no failed reload recorded after writing a broken file")
		}
		time.Sleep(time.Millisecond)
	}
	if limitOf() != 9 || d.generation.Load() != gen {
		t.Fatalf("a broken file replaced the running configuration: limit %d, generation %d -> %d", limitOf(), gen, d.generation.Load())
	}
}
