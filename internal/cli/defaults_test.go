package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sluice/internal/testutil/peer"
)

// privateDefaults gives the package's tests default directories of their
// own; TestMain calls it before the tests and the function it returns
// after. STATE_DIRECTORY and RUNTIME_DIRECTORY (systemd's, which
// config.DefaultStateDir and config.DefaultRuntimeDir take before
// anything else) point into a directory of this test binary, so that
// `sluice serve`, `status` or `throttle` run without a path, in this
// process or in a child that inherits its environment, never reads or
// writes the host's /var/lib/sluice and /run/sluice nor reaches a daemon
// serving there: an installed sluice, as scripts/test.sh sets up as root
// (scripts/installed-host.sh). A test that gives a child an environment
// of its own sets the variables itself (TestStatusOutOfTheBox).
func privateDefaults() (remove func(), err error) {
	dir, err := os.MkdirTemp("", "sluice-cli-defaults")
	if err != nil {
		return nil, err
	}
	for name, sub := range map[string]string{"STATE_DIRECTORY": "state", "RUNTIME_DIRECTORY": "run"} {
		if err := os.Setenv(name, filepath.Join(dir, sub)); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	return func() { os.RemoveAll(dir) }, nil
}

// hostPaths are the host's directories a configuration under test may
// name: sluice's defaults and the spools of Postfix and MIMEDefang.
var hostPaths = []string{"/var/lib/sluice", "/run/sluice", "/etc/sluice", "/var/spool/postfix", "/var/spool/MIMEDefang"}

// hostFreeConfig copies the configuration src, and the files beside it,
// into a directory of the test's own (mode 0755, as a host's /var is),
// each host directory it names (hostPaths) moved under that directory,
// and returns the copy's path and the replacer that moves the same paths
// in the text a test expects. `sluice check` judges the directories above
// each socket, so on a host where Postfix's spool or sluice's directories
// exist, with whatever modes an administrator gave them, the copy is
// judged the same as anywhere else.
func hostFreeConfig(t *testing.T, src string) (string, *strings.Replacer) {
	t.Helper()
	dir, err := os.MkdirTemp("", "sluice-cli-config")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var pairs []string
	for _, p := range hostPaths {
		pairs = append(pairs, p, filepath.Join(dir, "host", p))
	}
	moved := strings.NewReplacer(pairs...)
	entries, err := os.ReadDir(filepath.Dir(src))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(filepath.Dir(src), e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), []byte(moved.Replace(string(b))), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, filepath.Base(src)), moved
}

// envPrivateMounts names the test that a child run of this test binary
// plays inside inPrivateMounts's mount namespace.
const envPrivateMounts = "SLUICE_TEST_PRIVATE_MOUNTS"

// inPrivateMounts is for a test that must use a literal host path (a
// compiled-in default, such as md-mx-ctrl's socket in
// /var/spool/MIMEDefang) without meeting what the host has there. Called
// from the test as run by go test, it runs the test again in a child of
// this test binary, in a private mount namespace (unshare) with an empty
// tmpfs over each of dirs, reports the child's failure as its own, and
// returns false: the caller returns. In the child it returns true and the
// test goes on. It needs root (peer.Root); call it from a top-level test.
func inPrivateMounts(t *testing.T, dirs ...string) bool {
	t.Helper()
	if os.Getenv(envPrivateMounts) == t.Name() {
		return true
	}
	peer.Root(t, "a private mount namespace hides the host's "+strings.Join(dirs, ", "))
	unshare := peer.Binary(t, "util-linux", "unshare")
	script := "set -e\nfor d in \"$@\"; do [ \"$d\" = -- ] && break; mount -t tmpfs -o mode=0755 tmpfs \"$d\"; shift; done\nshift\nexec \"$@\"\n"
	args := append([]string{"--mount", "--propagation", "private", "sh", "-c", script, "sh"}, dirs...)
	args = append(args, "--", os.Args[0], "-test.run=^"+regexp.QuoteMeta(t.Name())+"$", "-test.v", "-test.count=1")
	cmd := exec.Command(unshare, args...)
	cmd.Env = append(os.Environ(), envPrivateMounts+"="+t.Name())
	out, err := cmd.CombinedOutput()
	switch {
	case err != nil:
		t.Errorf("in a private mount namespace (tmpfs over %s): %v\n%s", strings.Join(dirs, ", "), err, out)
	case !strings.Contains(string(out), "--- PASS: "+t.Name()+" "):
		t.Errorf("in a private mount namespace (tmpfs over %s) the test did not pass:\n%s", strings.Join(dirs, ", "), out)
	default:
		t.Logf("passed in a private mount namespace (tmpfs over %s)", strings.Join(dirs, ", "))
	}
	return false
}
