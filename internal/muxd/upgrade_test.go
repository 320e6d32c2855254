package muxd

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// writePid leaves exactly "<pid>\n" whatever was there, and never an
// empty file on the way (its first write covers the old content: a
// longer one with newlines after the line).
func TestWritePid(t *testing.T) {
	want := strconv.Itoa(os.Getpid()) + "\n"
	for _, old := range []string{"", "1\n", "4194304\n", "123456789012\n\n", strings.Repeat("9", 100), "garbage without a newline"} {
		path := filepath.Join(t.TempDir(), "pid")
		if err := os.WriteFile(path, []byte(old), 0o644); err != nil {
			t.Fatal(err)
		}
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		writePid(f)
		f.Close()
		if b, err := os.ReadFile(path); err != nil || string(b) != want {
			t.Errorf("over %q: %q (%v), want %q", old, b, err, want)
		}
	}
}

// The lock handed over: a second description of the file cannot take it
// while the first holds it, and taking it again on the same description
// (the new multiplexor's, inherited) succeeds.
func TestLockFileHandedOver(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lock")
	held, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if err := lockFile(held); err != nil {
		t.Fatal(err)
	}
	other, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := lockFile(other); err == nil {
		t.Error("a second open of the lock file took the lock")
	}
	if err := lockFile(held); err != nil {
		t.Errorf("the same description cannot take its lock again: %v", err)
	}
}
