package cli

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"sluice/internal/anvil/anviltest"
	"sluice/internal/testutil/logbuf"
)

func run(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := Main(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// TestCheckGood: `sluice check` prints the full example as understood
// (its host directories moved to the test's own: hostFreeConfig).
func TestCheckGood(t *testing.T) {
	cfg, moved := hostFreeConfig(t, "../config/testdata/good/full.toml")
	code, out, errs := run("check", "-c", cfg)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{
		"partners              20      30  *.partner.example 192.0.2.0/24 2001:db8::/32",
		"*.insa-lyon.fr         3       8  *.insa-lyon.fr",
		"connection count  smtpd 50; local=off partners=10",
		"counts across restarts: /var/lib/sluice/store.snapshot, written every 5s and at a graceful stop",
		"restart guard on",
		"full.toml: OK",
	} {
		if want = moved.Replace(want); !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// -q: nothing at all for a good file (the unit's ExecStartPre).
	if code, out, errs := run("check", "-q", "-c", cfg); code != 0 || out != "" || errs != "" {
		t.Errorf("check -q of a good file: exit %d, %q, %q; want silence", code, out, errs)
	}
}

func TestCheckBad(t *testing.T) {
	code, _, errs := run("check", "-c", "../config/testdata/bad/values.toml")
	if code != 1 {
		t.Fatalf("exit %d", code)
	}
	if !strings.Contains(errs, "values.toml:4: log.level:") || !strings.Contains(errs, "values.toml: 17 error(s)") {
		t.Fatalf("stderr:\n%s", errs)
	}
	// Eight mistakes of eight kinds: one run reports them all.
	code, _, errs = run("check", "-c", "../config/testdata/bad/first-hour.toml")
	if code != 1 || !strings.Contains(errs, "first-hour.toml: 8 error(s)") || !strings.Contains(errs, "first-hour.toml:6: limiter.max_keys: expected an integer, got the string \"10k\"") {
		t.Fatalf("first-hour.toml: exit %d, stderr:\n%s", code, errs)
	}
	if code, _, errs := run("check"); code != 2 || !strings.Contains(errs, "-c FILE is required") {
		t.Fatalf("check without -c: %d %s", code, errs)
	}
}

func TestUsage(t *testing.T) {
	if code, _, errs := run("frobnicate"); code != 2 || !strings.Contains(errs, `unknown command "frobnicate"`) {
		t.Fatalf("%d %s", code, errs)
	}
	if code, out, _ := run("version"); code != 0 || !strings.HasPrefix(out, "sluice ") {
		t.Fatalf("%d %s", code, out)
	}
	if code, out, _ := run("help"); code != 0 || !strings.Contains(out, "serve") {
		t.Fatalf("%d %s", code, out)
	}
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for i := 0; i < 1000; i++ {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

// TestServeSignals: SIGHUP with a broken file keeps the running config
// and says why, to the log and to systemd; with a good one it reloads; a
// change of the file does the same without a signal; SIGTERM stops.
func TestServeSignals(t *testing.T) {
	dir := t.TempDir()
	// The config is a symlink to a file in another directory: writing
	// that file is not seen by the watch of the config's directory, so
	// the SIGHUP reloads are the only ones until the link is replaced.
	real := filepath.Join(t.TempDir(), "real.toml")
	cfg := filepath.Join(dir, "sluice.toml")
	good := "state_dir = \"" + dir + "\"\n"
	if err := os.WriteFile(real, []byte(good), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, cfg); err != nil {
		t.Fatal(err)
	}
	notify := systemdSocket(t)
	var errb logbuf.Buffer
	done := make(chan int, 1)
	go func() { done <- Main(context.Background(), []string{"serve", "-c", cfg}, &bytes.Buffer{}, &errb) }()
	waitFor(t, "start", func() bool { return strings.Contains(errb.String(), "sluice started") })
	notify.expect(t, "READY=1\nSTATUS=serving")
	os.WriteFile(real, []byte(good+"[anvil]\nlisten = 5\n"), 0o644)
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	waitFor(t, "reload failure", func() bool { return strings.Contains(errb.String(), "reload failed") })
	if !strings.Contains(errb.String(), "keeping the running configuration") {
		t.Fatalf("log:\n%s", errb.String())
	}
	notify.expect(t, "RELOADING=1\nMONOTONIC_USEC=")
	notify.expect(t, "READY=1\nSTATUS=serving; the last reload failed, see the log")
	os.WriteFile(real, []byte(good+"[log]\nlevel = \"debug\"\n"), 0o644)
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	waitFor(t, "reload", func() bool { return strings.Contains(errb.String(), "configuration reloaded") })
	notify.expect(t, "RELOADING=1\nMONOTONIC_USEC=")
	notify.expect(t, "READY=1\nSTATUS=serving")

	// The file watch: a broken file in the link's place, then a good one.
	if err := os.Remove(cfg); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(cfg, []byte(good+"[anvil]\nlisten = 5\n"), 0o644)
	notify.expect(t, "RELOADING=1\nMONOTONIC_USEC=")
	notify.expect(t, "READY=1\nSTATUS=serving; the last reload failed, see the log")
	if !strings.Contains(errb.String(), "configuration file changed; reloading") {
		t.Fatalf("log:\n%s", errb.String())
	}
	os.WriteFile(cfg, []byte(good), 0o644)
	notify.expect(t, "RELOADING=1\nMONOTONIC_USEC=")
	notify.expectExact(t, "READY=1\nSTATUS=serving")

	syscall.Kill(os.Getpid(), syscall.SIGTERM)
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no exit on SIGTERM")
	}
	notify.expect(t, "STOPPING=1")
}

// notifySocket is a stand-in for systemd's notify socket.
type notifySocket struct{ c *net.UnixConn }

func systemdSocket(t *testing.T) notifySocket {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	t.Setenv("NOTIFY_SOCKET", path)
	t.Setenv("WATCHDOG_USEC", "")
	return notifySocket{c}
}

// expectExact reads the next notification, which must be want.
func (n notifySocket) expectExact(t *testing.T, want string) {
	t.Helper()
	if got := n.next(t, want); got != want {
		t.Fatalf("systemd was told %q, want %q", got, want)
	}
}

// expect reads the next notification, which must start with prefix.
func (n notifySocket) expect(t *testing.T, prefix string) {
	t.Helper()
	if got := n.next(t, prefix); !strings.HasPrefix(got, prefix) {
		t.Fatalf("systemd was told %q, want %q", got, prefix)
	}
}

// next reads the next notification; want is for the message on timeout.
func (n notifySocket) next(t *testing.T, want string) string {
	t.Helper()
	buf := make([]byte, 4096)
	_ = n.c.SetReadDeadline(time.Now().Add(30 * time.Second))
	k, err := n.c.Read(buf)
	if err != nil {
		t.Fatalf("waiting for %q from sluice: %v", want, err)
	}
	return string(buf[:k])
}

// TestServeDefaults runs "serve" on the embedded defaults in a temp state
// directory, talks anvil to it, and stops it with SIGTERM.
func TestServeDefaults(t *testing.T) {
	dir := t.TempDir()
	done := make(chan int, 1)
	var errb logbuf.Buffer
	go func() {
		done <- Main(context.Background(), []string{"serve", "-state-dir", dir, "-grace", "2s"}, &bytes.Buffer{}, &errb)
	}()
	sock := filepath.Join(dir, "anvil")
	var cl *anviltest.Client
	var err error
	for i := 0; i < 200; i++ {
		if cl, err = anviltest.Dial("unix", sock, false); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("daemon did not come up: %v\n%s", err, errb.String())
	}
	if got, err := cl.Do("connect", "smtp:192.0.2.1"); err != nil || got["count"] != 1 {
		t.Fatalf("%v %v", got, err)
	}
	cl.Close()
	syscall.Kill(os.Getpid(), syscall.SIGTERM)
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d\n%s", code, errb.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not stop on SIGTERM")
	}
	if !strings.Contains(errb.String(), "sluice stopped") {
		t.Fatalf("log:\n%s", errb.String())
	}
}

// TestCheckWarnsOfReadableSecret: a configuration file that holds a
// Redis password and that every user may read gets a warning, even
// with -q, and stays valid.
func TestCheckWarnsOfReadableSecret(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sluice.toml")
	if err := os.WriteFile(path, []byte("[store.redis]\npassword = \"s3cret\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs := run("check", "-q", "-c", path)
	if code != 0 || out != "" || !strings.Contains(errs, "warning: "+path+" holds a Redis password and every user may read it (mode 0644)") {
		t.Errorf("exit %d, %q, %q", code, out, errs)
	}
	if err := os.Chmod(path, 0o640); err != nil {
		t.Fatal(err)
	}
	if code, out, errs := run("check", "-q", "-c", path); code != 0 || out != "" || errs != "" {
		t.Errorf("mode 0640: exit %d, %q, %q", code, out, errs)
	}
}
