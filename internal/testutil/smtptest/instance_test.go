package smtptest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestWaitLog(t *testing.T) {
	var calls atomic.Int32
	read := func() (string, error) {
		if calls.Add(1) < 3 {
			return "starting", nil
		}
		return "starting\nready", nil
	}
	if err := WaitLog(context.Background(), time.Millisecond, "the log", read, "ready"); err != nil {
		t.Fatal(err)
	}
	if n := calls.Load(); n != 3 {
		t.Fatalf("%d reads, want 3", n)
	}
	// A failed read ends the wait with its error.
	bad := errors.New("read failed")
	if err := WaitLog(context.Background(), time.Millisecond, "the log", func() (string, error) { return "", bad }, "x"); !errors.Is(err, bad) {
		t.Fatalf("failed read: %v", err)
	}
	// An ended context ends it too, naming the log.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := WaitLog(ctx, time.Millisecond, "/var/log/mail.log", func() (string, error) { return "", nil }, "never")
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "/var/log/mail.log") {
		t.Fatalf("ended context: %v", err)
	}
}

func TestInstanceDir(t *testing.T) {
	base := t.TempDir()
	if err := os.Symlink(base, filepath.Join(base, "link")); err != nil {
		t.Fatal(err)
	}
	real, err := filepath.EvalSymlinks(base)
	if err != nil {
		t.Fatal(err)
	}
	got, err := InstanceDir(filepath.Join(base, "link", "a", "b"))
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(real, "a", "b"); got != want {
		t.Fatalf("InstanceDir: %q, want %q", got, want)
	}
	if st, err := os.Stat(got); err != nil || !st.IsDir() {
		t.Fatalf("not created: %v", err)
	}
	// A file in the way fails it.
	if err := os.WriteFile(filepath.Join(base, "file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := InstanceDir(filepath.Join(base, "file", "x")); err == nil {
		t.Fatal("a path through a file was accepted")
	}
}
