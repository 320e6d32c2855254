package cli

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"sluice/internal/testutil/peer"
)

// TestUpgradeAppliesSocketSettings: an upgrade by SIGUSR2 applies what
// the new configuration changes about the sockets (docs/operations.md,
// "Upgrade in place: SIGUSR2"): the throttle socket's new mode and group, as far
// as the daemon's user may set them, and a log line naming each setting
// it may not; a policy listen address moved to another path is bound, and
// the old path, no longer named, is closed and removed. Run as root
// without user (every change applies) and started by root with user =
// "sluice", not a member of the new group (the group is named in the
// log, the mode applies).
func TestUpgradeAppliesSocketSettings(t *testing.T) {
	peer.Root(t, "the daemon is started by root; the new group is one root may give")
	mail := peer.Group(t, "mail")
	peer.User(t, "sluice")
	bin, _ := muxBinaries(t)
	for _, tc := range []struct {
		name, user   string
		groupApplies bool
	}{
		{"root", "", true},
		{"user sluice", "sluice", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base, err := os.MkdirTemp("", "sluice-upsock")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(base) })
			if err := os.Chmod(base, 0o755); err != nil {
				t.Fatal(err)
			}
			live := filepath.Join(base, "bin", "sluice")
			mkdirOwned(t, filepath.Dir(live), "root", "root", 0o755)
			installBinary(t, bin, live)
			dir := filepath.Join(base, "run") // made (0755) by the root phase, given to the user
			cfgPath := filepath.Join(base, "sluice.toml")
			head := "state_dir = \"" + filepath.Join(base, "state") + "\"\nruntime_dir = \"" + dir + "\"\n"
			if tc.user != "" {
				head += "user = \"" + tc.user + "\"\n"
			}
			head += "[anvil]\nenabled = false\n[milter]\nenabled = false\n[throttle]\nlisten = [\"unix:throttle\"]\n"
			write := func(policyPath, socket string) {
				t.Helper()
				text := head + socket + senderPolicy("unix:"+policyPath, "100/60s exact")
				if err := os.WriteFile(cfgPath+".new", []byte(text), 0o644); err != nil {
					t.Fatal(err)
				}
				if err := os.Rename(cfgPath+".new", cfgPath); err != nil {
					t.Fatal(err)
				}
			}
			write("policy", "[throttle.socket]\nmode = \"0660\"\n")
			p := startProc(t, live, []string{"serve", "-c", cfgPath}, nil)
			killStarted(t, p)
			waitUntil(t, "the daemon serves", func() bool { return strings.Contains(p.stderr.String(), "sluice started") },
				func() string { return p.stderr.String() })
			throttle := filepath.Join(dir, "throttle")
			before := statSocket(t, throttle)
			if int(before.Gid) == mailGID(t, mail.Gid) || before.Mode&0o777 != 0o660 {
				t.Fatalf("the throttle socket before: gid %d, mode %04o", before.Gid, before.Mode&0o777)
			}
			askPolicy(t, filepath.Join(dir, "policy"))

			write("policy2", "[throttle.socket]\nmode = \"0666\"\ngroup = \"mail\"\n")
			_ = syscall.Kill(p.pid(), syscall.SIGUSR2)
			waitUntil(t, "the upgrade", func() bool { return servesRE.MatchString(p.stderr.String()) },
				func() string { return p.stderr.String() })
			next, _ := strconv.Atoi(servesRE.FindStringSubmatch(p.stderr.String())[1])
			t.Cleanup(func() { _ = syscall.Kill(next, syscall.SIGKILL) })
			waitUntil(t, "the old daemon to exit", func() bool { return gone(p.pid()) }, func() string { return p.stderr.String() })

			after := statSocket(t, throttle)
			if after.Mode&0o777 != 0o666 {
				t.Errorf("the throttle socket's mode after the upgrade: %04o, want 0666", after.Mode&0o777)
			}
			named := regexp.MustCompile(`applies only after a restart" setting=throttle\.socket\.group `).MatchString(p.stderr.String())
			switch {
			case tc.groupApplies && int(after.Gid) != mailGID(t, mail.Gid):
				t.Errorf("the throttle socket's group after the upgrade: gid %d, want mail (%s)", after.Gid, mail.Gid)
			case !tc.groupApplies && int(after.Gid) == mailGID(t, mail.Gid):
				t.Errorf("the throttle socket's group is mail: the user %s may not give it", tc.user)
			case !tc.groupApplies && !named:
				t.Errorf("the log does not name throttle.socket.group as needing a restart:\n%s", p.stderr.String())
			case tc.groupApplies && named:
				t.Errorf("the log names throttle.socket.group, which applied:\n%s", p.stderr.String())
			}
			askPolicy(t, filepath.Join(dir, "policy2"))
			if _, err := os.Lstat(filepath.Join(dir, "policy")); err == nil {
				t.Error("the policy socket the configuration no longer names is left")
			}
			_ = syscall.Kill(next, syscall.SIGTERM)
			waitGone(t, "the new daemon", next)
		})
	}
}

func statSocket(t *testing.T, path string) *syscall.Stat_t {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFSOCK {
		t.Fatalf("%s is not a socket", path)
	}
	return &st
}

func mailGID(t *testing.T, gid string) int {
	t.Helper()
	n, err := strconv.Atoi(gid)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
