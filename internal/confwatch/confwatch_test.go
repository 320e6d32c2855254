package confwatch

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestIsConfigFile: the main file, a listed file and the include_dir's
// *.toml files are the configuration's; hidden or other files beside them,
// and files of the same names elsewhere, are not.
func TestIsConfigFile(t *testing.T) {
	c := &Config{Path: "/etc/sluice/sluice.toml", Files: func() ([]string, string) {
		return []string{"/etc/sluice/tables/senders.limits"}, "/etc/sluice/conf.d"
	}}
	for _, tc := range []struct {
		dir, name string
		want      bool
	}{
		{"/etc/sluice", "sluice.toml", true},
		{"/etc/sluice/tables", "senders.limits", true},
		{"/etc/sluice/conf.d", "10-classes.toml", true},
		{"/etc/sluice/conf.d", ".10-classes.toml", false},
		{"/etc/sluice/conf.d", "10-classes.toml~", false},
		{"/etc/sluice", "other.toml", false},
		{"/etc/sluice/tables", "other.limits", false},
		{"/tmp", "sluice.toml", false},
	} {
		if got := c.isConfigFile(tc.dir, tc.name); got != tc.want {
			t.Errorf("isConfigFile(%s, %s) = %v, want %v", tc.dir, tc.name, got, tc.want)
		}
	}
}

// TestWatchReloadsOnChange: once armed, writing a listed file in a
// directory of its own, and renaming a *.toml file into the include_dir,
// each reload; Watch returns nil when its context ends.
func TestWatchReloadsOnChange(t *testing.T) {
	dir := t.TempDir()
	tables, include := filepath.Join(dir, "tables"), filepath.Join(dir, "conf.d")
	for _, d := range []string{tables, include} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	table := filepath.Join(tables, "senders.limits")
	armed, reloaded := make(chan struct{}), make(chan struct{}, 16)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- Watch(ctx, Config{
			Path:   filepath.Join(dir, "sluice.toml"),
			Files:  func() ([]string, string) { return []string{table}, include },
			Settle: time.Millisecond,
			Reload: func() { reloaded <- struct{}{} },
			Armed:  func() { close(armed) },
			Log:    slog.New(slog.NewTextHandler(io.Discard, nil)),
		})
	}()
	select {
	case <-armed:
	case err := <-done:
		t.Fatalf("Watch ended before it was armed: %v", err)
	}
	wait := func(what string) {
		t.Helper()
		select {
		case <-reloaded:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no reload", what)
		}
	}
	if err := os.WriteFile(table, []byte("a@example.com 30/60s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	wait("writing the table")
	tmp := filepath.Join(dir, "staged.toml")
	if err := os.WriteFile(tmp, []byte("# staged\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// staged.toml beside sluice.toml is not the configuration's; its
	// rename into conf.d is.
	if err := os.Rename(tmp, filepath.Join(include, "20-staged.toml")); err != nil {
		t.Fatal(err)
	}
	wait("renaming a file into include_dir")
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Watch: %v", err)
	}
}
