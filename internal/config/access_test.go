package config

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"sluice/internal/testutil/peer"
)

// TestCheckAccess: a socket whose configured peer (owner, group, or every
// user for an o+rw mode) cannot traverse a directory above it is reported
// at the socket table's line, naming the directory and the fix; one it can
// reach is not. Directories that do not exist are judged as sluice will
// make them (state_dir 0750, runtime_dir 0755).
func TestCheckAccess(t *testing.T) {
	peer.Root(t, "judging other users' access needs directories owned by root")
	peer.User(t, "nobody")
	peer.Group(t, "nogroup")
	// t.TempDir's parent is private (0700): a directory of its own in /tmp.
	base, err := os.MkdirTemp("", "sluice-access")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	mkdir := func(name string, mode os.FileMode) string {
		d := filepath.Join(base, name)
		if err := os.Mkdir(d, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, mode); err != nil {
			t.Fatal(err)
		}
		return d
	}
	closed := mkdir("closed", 0o750) // root:root 0750, as StateDirectoryMode=0750 makes it
	open := mkdir("open", 0o755)
	search := mkdir("search", 0o711)
	ng := peer.Group(t, "nogroup")
	gid, _ := strconv.Atoi(ng.Gid)
	groupOnly := mkdir("grouponly", 0o750) // root:nogroup 0750: members only
	groupDenied := mkdir("groupdenied", 0o705)
	for _, d := range []string{groupOnly, groupDenied} {
		if err := os.Chown(d, 0, gid); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name   string
		body   string
		want   string // "" for no error; else a substring of the one error
		wantAt string // "file:line: key" prefix
	}{
		{"group blocked by 0750 state dir (the qmail recipe's fault)",
			"runtime_dir = %q\n[throttle.socket]\ngroup = \"nogroup\"\nmode = \"0660\"\n", "group nogroup cannot reach the socket " + filepath.Join(closed, "throttle") + ": the directory " + closed + " (owner root, group root, mode 0750)",
			":3: throttle.socket.group: "},
		{"group through a 0755 runtime dir",
			"runtime_dir = %q\n[throttle.socket]\ngroup = \"nogroup\"\nmode = \"0660\"\n", "", ""},
		{"owner through a 0711 dir",
			"runtime_dir = %q\n[anvil.socket]\nowner = \"nobody\"\nmode = \"0600\"\n", "", ""},
		{"owner blocked",
			"runtime_dir = %q\n[anvil.socket]\nowner = \"nobody\"\nmode = \"0600\"\n", "user nobody cannot reach", ":3: anvil.socket.owner: "},
		{"every user blocked",
			"runtime_dir = %q\n[policy.socket]\nmode = \"0666\"\n", "every user cannot reach", ":3: policy.socket.mode: "},
		{"a runtime dir sluice will create under a 0755 parent",
			"runtime_dir = %q\n[milter.socket]\ngroup = \"nogroup\"\nmode = \"0660\"\n", "", ""},
		{"a state dir sluice will create holds the sockets",
			"state_dir = %q\n[milter.socket]\ngroup = \"nogroup\"\nmode = \"0660\"\n", "group nogroup cannot reach", ":3: milter.socket.group: "},
		{"group without group bits is not a peer",
			"runtime_dir = %q\n[throttle.socket]\ngroup = \"nogroup\"\nmode = \"0600\"\n", "", ""},
		{"group through its own group's bits",
			"runtime_dir = %q\n[throttle.socket]\ngroup = \"nogroup\"\nmode = \"0660\"\n", "", ""},
		{"the group's bits apply to the group, not the others' bits",
			"runtime_dir = %q\n[throttle.socket]\ngroup = \"nogroup\"\nmode = \"0660\"\n", "group nogroup cannot reach", ":3: throttle.socket.group: "},
	}
	dirs := []string{closed, open, search, closed, closed, filepath.Join(open, "new", "run"), filepath.Join(open, "newstate")}
	dirs = append(dirs, closed, groupOnly, groupDenied)
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := filepath.Join(t.TempDir(), "sluice.toml")
			body := strings.Replace(tc.body, "%q", `"`+dirs[i]+`"`, 1)
			if err := os.WriteFile(f, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
			c, errs := Load(f)
			if len(errs) > 0 {
				t.Fatalf("Load: %v", errs)
			}
			errs = c.CheckAccess()
			if tc.want == "" {
				if len(errs) != 0 {
					t.Fatalf("CheckAccess: %v, want none", errs)
				}
				return
			}
			if len(errs) != 1 {
				t.Fatalf("CheckAccess: %v, want one error", errs)
			}
			got := errs[0].Error()
			if !strings.HasPrefix(got, f+tc.wantAt) || !strings.Contains(got, tc.want) {
				t.Errorf("CheckAccess:\n%s\nwant prefix %q and %q", got, f+tc.wantAt, tc.want)
			}
		})
	}
}
