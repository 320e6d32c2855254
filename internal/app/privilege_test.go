package app

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"sluice/internal/config"
	"sluice/internal/privdrop"
	"sluice/internal/testutil/peer"
)

// TestPrepareDirsOwnership: the root phase gives the daemon's user a
// directory it makes, or sluice's own default one, and no other: a
// directory that existed (an administrator's, or a system one a
// configuration names as state_dir or runtime_dir) keeps its owner, and
// the start refuses it, naming it, when the user cannot write in it.
// Before, root chowned any existing directory state_dir named.
func TestPrepareDirsOwnership(t *testing.T) {
	peer.Root(t, "the root phase runs as root")
	peer.User(t, "sluice")
	acct, err := privdrop.Lookup("sluice")
	if err != nil {
		t.Fatal(err)
	}
	mkdir := func(t *testing.T, mode uint32, gid int) string {
		t.Helper()
		d := filepath.Join(t.TempDir(), "existing")
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(d, 0, gid); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Chmod(d, mode); err != nil {
			t.Fatal(err)
		}
		return d
	}
	owner := func(t *testing.T, d string) uint32 {
		t.Helper()
		var st syscall.Stat_t
		if err := syscall.Stat(d, &st); err != nil {
			t.Fatal(err)
		}
		return st.Uid
	}
	cases := []struct {
		name    string
		dirs    func(t *testing.T) (state, run string)
		refused string // the directory the error names; "" to pass
		wantUID int    // the state directory's owner after
	}{
		{"existing root state_dir", func(t *testing.T) (string, string) {
			return mkdir(t, 0o750, 0), filepath.Join(t.TempDir(), "run")
		}, "state", 0},
		{"existing root runtime_dir", func(t *testing.T) (string, string) {
			return filepath.Join(t.TempDir(), "state"), mkdir(t, 0o755, 0)
		}, "run", acct.UID},
		{"existing state_dir its group may write", func(t *testing.T) (string, string) {
			return mkdir(t, 0o770, acct.GID), filepath.Join(t.TempDir(), "run")
		}, "", 0},
		{"new directories", func(t *testing.T) (string, string) {
			return filepath.Join(t.TempDir(), "state"), filepath.Join(t.TempDir(), "run")
		}, "", acct.UID},
		{"existing default directory", func(t *testing.T) (string, string) {
			d := mkdir(t, 0o750, 0)
			t.Setenv("STATE_DIRECTORY", d) // systemd's StateDirectory=: sluice's own
			return d, filepath.Join(t.TempDir(), "run")
		}, "", acct.UID},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			state, run := c.dirs(t)
			cfg := config.Default()
			cfg.User, cfg.StateDir, cfg.RuntimeDir = "sluice", state, run
			err := prepareDirs(cfg, &acct)
			refused := map[string]string{"state": state, "run": run}[c.refused]
			switch {
			case c.refused == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.refused != "" && (err == nil || !strings.Contains(err.Error(), refused+": it exists (owner uid 0") || !strings.Contains(err.Error(), "user sluice cannot write in it")):
				t.Fatalf("%v, want a refusal naming %s", err, refused)
			}
			if c.refused != "" && owner(t, refused) != 0 {
				t.Errorf("%s was given away: owner %d", refused, owner(t, refused))
			}
			if c.refused != "state" {
				if got := owner(t, state); int(got) != c.wantUID {
					t.Errorf("state directory owner %d, want %d", got, c.wantUID)
				}
			}
		})
	}
}
