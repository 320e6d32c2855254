package cli

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sluice/internal/testutil/peer"
)

// TestMuxSocketErrorNamesPath: a socket `sluice mux` cannot create is
// named with the system's reason, in the foreground (-D) and from the
// detached child alike (the parent prints what the child reports).
func TestMuxSocketErrorNamesPath(t *testing.T) {
	peer.Root(t, "the multiplexor drops to -U")
	peer.User(t, "nobody")
	bin, _ := muxBinaries(t)
	base := deployDir(t)
	spool := filepath.Join(base, "spool")
	mkdirOwned(t, spool, "nobody", "root", 0o755)
	missing := filepath.Join(base, "missing")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"-s, foreground", []string{"-D", "-s", filepath.Join(missing, "mux.sock")},
			"Unable to create listening socket " + filepath.Join(missing, "mux.sock") + ": No such file or directory"},
		{"-a, foreground", []string{"-D", "-s", filepath.Join(spool, "mux.sock"), "-a", filepath.Join(missing, "unpriv.sock")},
			"Unable to create unprivileged listening socket " + filepath.Join(missing, "unpriv.sock") + ": No such file or directory"},
		{"-a, detached", []string{"-s", filepath.Join(spool, "mux.sock"), "-a", filepath.Join(missing, "unpriv.sock")},
			"Unable to create unprivileged listening socket " + filepath.Join(missing, "unpriv.sock") + ": No such file or directory"},
	} {
		args := append([]string{"mux", "-U", "nobody", "-z", spool, "-f", "/bin/true"}, tc.args...)
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), tc.want) {
			t.Errorf("%s: %v %q, want %q", tc.name, err, out, tc.want)
		}
	}
}
