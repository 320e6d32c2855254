package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"sluice/internal/testutil/logbuf"
	"sluice/internal/testutil/peer"
	"sluice/internal/testutil/redistest"
)

// TestOpenRedisWarnings: a Redis store reached over TCP without a
// password, and a password file every user may read, are warned of by
// `sluice check` (exit status 0: the configuration is valid) and logged
// by `sluice serve` at start, which then serves.
func TestOpenRedisWarnings(t *testing.T) {
	srv, err := redistest.Start(t.TempDir(), 0)
	if errors.Is(err, redistest.ErrNoRedis) {
		peer.Missing(t, "redis-server", err)
	} else if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Kill)
	dir := t.TempDir()
	path := filepath.Join(dir, "sluice.toml")
	store := fmt.Sprintf("[store]\nkind = \"redis\"\n[store.redis]\naddrs = [%q]\nkey_prefix = \"warn:\"\n", srv.Addr())
	if err := os.WriteFile(path, []byte(store), 0o600); err != nil {
		t.Fatal(err)
	}
	const open = "is reached over TCP without a password: any local user (or host) that can reach it steers sluice"
	code, out, errs := run("check", "-q", "-c", path)
	if code != 0 || out != "" || !strings.Contains(errs, "warning: store.redis: Redis at "+srv.Addr()+" "+open) {
		t.Errorf("check: exit %d, %q, %q", code, out, errs)
	}

	done := make(chan int, 1)
	var errb logbuf.Buffer
	go func() {
		done <- Main(context.Background(), []string{"serve", "-c", path, "-state-dir", dir, "-grace", "2s"}, &bytes.Buffer{}, &errb)
	}()
	errb.WaitFor(t, "sluice started")
	syscall.Kill(os.Getpid(), syscall.SIGTERM)
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("serve: exit %d\n%s", code, errb.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not stop on SIGTERM")
	}
	if w := errb.Lines(open); len(w) != 1 || !strings.Contains(w[0], "WARN") {
		t.Errorf("serve logged %q, want one WARN line saying the store %s", w, open)
	}

	pass := filepath.Join(dir, "redis.pass")
	if err := os.WriteFile(pass, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(pass, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(store+"username = \"sluice\"\npassword_file = \"redis.pass\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errs = run("check", "-q", "-c", path)
	if code != 0 || out != "" || !strings.Contains(errs, "warning: store.redis.password_file: every user may read "+pass+" (owner ") || strings.Contains(errs, open) {
		t.Errorf("check, password file 0644: exit %d, %q, %q", code, out, errs)
	}
	if err := os.Chmod(pass, 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, errs := run("check", "-q", "-c", path); code != 0 || out != "" || errs != "" {
		t.Errorf("check, password file 0600: exit %d, %q, %q", code, out, errs)
	}
}
