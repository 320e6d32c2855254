package app

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"sluice/internal/testutil/logbuf"
	"sluice/internal/testutil/peer"
)

func TestCarryRoundTrip(t *testing.T) {
	at := time.Unix(1700000000, 123)
	ids := []string{"smtp:192.0.2.1", "127.0.0.1:25:2001:db8::1", "odd \"ident\"\n\x00"}
	w, got, err := parseCarry(encodeCarry(at, ids))
	if err != nil || !w.Equal(at) || strings.Join(got, "|") != strings.Join(ids, "|") {
		t.Fatalf("round trip: %v %q %v", w, got, err)
	}
	if _, got, err := parseCarry(encodeCarry(at, nil)); err != nil || len(got) != 0 {
		t.Fatalf("no session: %q %v", got, err)
	}
}

func TestParseCarryErrors(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"empty", "", "truncated after 0 lines"},
		{"magic only", carryMagic + "\n", "truncated after 1 lines"},
		{"another file", "SLUICESNAP\n1\n", "line 1: not a sluice anvil sessions file"},
		{"time not a number", carryMagic + "\nsoon\n", `line 2: "soon" is not a time`},
		{"time zero", carryMagic + "\n0\n", `line 2: "0" is not a time`},
		{"unquoted ident", carryMagic + "\n1\nsmtp:192.0.2.1\n", `line 3: "smtp:192.0.2.1" is not a quoted ident`},
		{"empty ident", carryMagic + "\n1\n\"\"\n", `line 3: "\"\"" is not a quoted ident`},
		{"broken quote", carryMagic + "\n1\n\"abc\n", "line 3"},
		{"backquoted", carryMagic + "\n1\n`abc`\n", "line 3"},
		{"line too long", carryMagic + "\n1\n\"" + strings.Repeat("a", 5000) + "\"\n", "line 3: bufio.Scanner: token too long"},
	} {
		_, _, err := parseCarry([]byte(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

func FuzzParseCarry(f *testing.F) {
	f.Add(encodeCarry(time.Unix(1700000000, 0), []string{"smtp:192.0.2.1"}))
	f.Add([]byte(carryMagic + "\n1\n\"\\x00\"\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		w, ids, err := parseCarry(b)
		if err != nil {
			return
		}
		// What parses is what encodeCarry would write for it.
		w2, ids2, err := parseCarry(encodeCarry(w, ids))
		if err != nil || !w2.Equal(w) || strings.Join(ids2, "\x00") != strings.Join(ids, "\x00") {
			t.Fatalf("%q: re-encoded as %v %q %v", b, w2, ids2, err)
		}
	})
}

// TestTakeCarryRefusesHostileFiles: the hand-over file is read as every
// state file is (safefs): a symlink (to a secret or to /dev/zero), a
// FIFO and a 1 GiB file are refused with one log line each, none is
// followed, waited on or read whole, none is counted, and the start goes
// on; the file is removed so that the next start does not meet it again.
func TestTakeCarryRefusesHostileFiles(t *testing.T) {
	peer.Root(t, "the planted link belongs to another user")
	for _, tc := range []struct {
		name  string
		plant func(path string) error
	}{
		{"another user's symlink to a file of sessions", func(p string) error {
			secret := filepath.Join(filepath.Dir(p), "secret")
			if err := os.WriteFile(secret, encodeCarry(time.Now(), []string{"smtp:192.0.2.66"}), 0o600); err != nil {
				return err
			}
			if err := os.Symlink(secret, p); err != nil {
				return err
			}
			// The file rule follows a link only root or sluice's own user
			// could have made: this one is nobody's.
			return os.Lchown(p, 65534, 65534)
		}},
		{"symlink to /dev/zero", func(p string) error { return os.Symlink("/dev/zero", p) }},
		{"fifo", func(p string) error { return syscall.Mkfifo(p, 0o600) }},
		{"1 GiB", func(p string) error {
			f, err := os.Create(p)
			if err != nil {
				return err
			}
			defer f.Close()
			return f.Truncate(1 << 30)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := writeConfig(t, dir, cfgText(dir, "2"))
			if err := tc.plant(filepath.Join(dir, carryFile)); err != nil {
				t.Fatal(err)
			}
			var logs logbuf.Buffer
			d := startDaemonLog(t, path, slog.New(slog.NewTextHandler(&logs, nil)))
			if n := d.carried.Len(); n != 0 {
				t.Errorf("%d sessions counted from a hostile file", n)
			}
			if !strings.Contains(logs.String(), "cannot be read; they are not counted") {
				t.Errorf("no log line says the file was refused:\n%s", logs.String())
			}
			if _, err := os.Lstat(filepath.Join(dir, carryFile)); !os.IsNotExist(err) {
				t.Errorf("the hostile file is still there: %v", err)
			}
		})
	}
}
