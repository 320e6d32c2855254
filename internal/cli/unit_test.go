package cli

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"sluice/internal/testutil/peer"
	"sluice/internal/testutil/recipe"
)

// unitFile is the settings of a systemd unit file, by key, in order.
type unitFile map[string][]string

func readUnit(t *testing.T, name string) unitFile {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(recipe.Root(), "examples", "systemd", name))
	if err != nil {
		t.Fatal(err)
	}
	u := unitFile{}
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' || line[0] == '[' {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if ok {
			u[k] = append(u[k], v)
		}
	}
	return u
}

func (u unitFile) one(t *testing.T, key string) string {
	t.Helper()
	if len(u[key]) != 1 {
		t.Fatalf("unit has %d %s= lines, want 1", len(u[key]), key)
	}
	return u[key][0]
}

// TestSystemdUnitAsDeployed runs the shipped units as systemd would,
// with the example configuration: systemd-socket-activate binds every
// ListenStream= of the service's socket units (paths moved under a
// directory of the test's own) and the test gives each socket its unit's
// SocketUser=, SocketGroup= and SocketMode=, as systemd does; sluice runs
// as the unit's User= and Group= with no capability (setpriv, as systemd's
// CapabilityBoundingSet= and NoNewPrivileges= would), first ExecStartPre=,
// then ExecStart=. Then each socket's peer, as its own user, gets in:
// postfix on the anvil and policy sockets, qmailr (group nofiles) with
// sluice throttle on the throttle socket; and another user does not.
func TestSystemdUnitAsDeployed(t *testing.T) {
	peer.Root(t, "the unit's sockets are made by root for other users")
	setpriv := peer.Binary(t, "util-linux", "setpriv")
	perl := peer.Binary(t, "perl-base", "perl")
	svc := readUnit(t, "sluice.service")
	runUser, runGroup := svc.one(t, "User"), svc.one(t, "Group")
	if u := peer.User(t, runUser); u.Uid == "0" {
		t.Fatalf("sluice.service runs sluice as %s, uid 0", runUser)
	}
	if svc.one(t, "CapabilityBoundingSet") != "" || svc.one(t, "AmbientCapabilities") != "" || svc.one(t, "NoNewPrivileges") != "yes" {
		t.Errorf("sluice.service gives capabilities: CapabilityBoundingSet=%s AmbientCapabilities=%s NoNewPrivileges=%s",
			svc.one(t, "CapabilityBoundingSet"), svc.one(t, "AmbientCapabilities"), svc.one(t, "NoNewPrivileges"))
	}
	postfix, qmailr, nobody := credential(t, "postfix"), credential(t, "qmailr"), credential(t, "nobody")
	bin, _ := muxBinaries(t)
	base := deployDir(t)

	// The directories as Postfix, systemd's StateDirectory= and
	// RuntimeDirectory= make them.
	moved := strings.NewReplacer("/var/spool/postfix", filepath.Join(base, "spool"), "/run/sluice", filepath.Join(base, "run"),
		"/var/lib/sluice", filepath.Join(base, "state"), "/etc/sluice/sluice.toml", filepath.Join(base, "sluice.toml"), "/usr/local/bin/sluice", bin,
		"127.0.0.1:9465", "127.0.0.1:0")
	mkdirOwned(t, filepath.Join(base, "spool"), "root", "root", 0o755)
	mkdirOwned(t, filepath.Join(base, "spool", "private"), "postfix", "root", 0o700)
	mkdirOwned(t, filepath.Join(base, "state"), runUser, runGroup, 0o750)
	mkdirOwned(t, filepath.Join(base, "run"), runUser, runGroup, 0o755)
	cfg, err := os.ReadFile(filepath.Join(recipe.Root(), "examples", "sluice.toml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(base, "sluice.toml"), []byte(moved.Replace(string(cfg))), 0o644); err != nil {
		t.Fatal(err)
	}

	type sock struct{ path, user, group, mode string }
	var socks []sock
	for _, name := range strings.Fields(svc.one(t, "Sockets")) {
		u := readUnit(t, name)
		if u.one(t, "Service") != "sluice.service" {
			t.Errorf("%s: Service=%s", name, u.one(t, "Service"))
		}
		for _, l := range u["ListenStream"] {
			socks = append(socks, sock{moved.Replace(l), u.one(t, "SocketUser"), u.one(t, "SocketGroup"), u.one(t, "SocketMode")})
		}
	}
	asUnit := []string{setpriv, "--reuid=" + runUser, "--regid=" + runGroup, "--init-groups", "--bounding-set=-all", "--inh-caps=-all", "--no-new-privs"}
	pre := strings.Fields(moved.Replace(svc.one(t, "ExecStartPre")))
	if out, err := exec.Command(asUnit[0], append(asUnit[1:], pre...)...).CombinedOutput(); err != nil {
		t.Fatalf("ExecStartPre %v: %v\n%s", pre, err, out)
	}
	var listen []string
	for _, s := range socks {
		listen = append(listen, s.path)
	}
	p := activate(t, "sluice", listen, append(asUnit, strings.Fields(moved.Replace(svc.one(t, "ExecStart")))...)...)
	for _, s := range socks {
		mode, _ := strconv.ParseUint(s.mode, 8, 32)
		chownNames(t, s.path, s.user, s.group)
		if err := os.Chmod(s.path, os.FileMode(mode)); err != nil {
			t.Fatal(err)
		}
	}

	connect := func(cred *syscall.SysProcAttr, path string) string {
		cmd := exec.Command(perl, "-MIO::Socket::UNIX", "-e", `IO::Socket::UNIX->new(Peer => $ARGV[0]) or die "$!\n"; print "connected\n"`, path)
		cmd.SysProcAttr = cred
		out, _ := cmd.CombinedOutput()
		return strings.TrimSpace(string(out))
	}
	anvilSock, policySock := filepath.Join(base, "spool", "private", "anvil"), filepath.Join(base, "spool", "private", "sluice-policy")
	for _, path := range []string{anvilSock, policySock} {
		if got := connect(postfix, path); got != "connected" {
			t.Errorf("postfix connecting to %s: %s", path, got)
		}
		if got := connect(nobody, path); got != "Permission denied" {
			t.Errorf("nobody connecting to %s: %q, want Permission denied", path, got)
		}
	}
	p.waitSockets(t, anvilSock) // the first connection started sluice; wait until it serves
	assertUnprivileged(t, p.cmd.Process.Pid, runUser)

	throttleSock := filepath.Join(base, "run", "throttle")
	cmd := exec.Command(bin, "throttle", "-s", throttleSock, "-k", "relay.example", "--", "/bin/echo", "sent")
	cmd.SysProcAttr = qmailr
	if out, err := cmd.CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "sent" {
		t.Errorf("sluice throttle as qmailr: %v %q\n%s", err, out, p.stderr.String())
	}
	cmd = exec.Command(bin, "throttle", "-s", throttleSock, "-k", "relay.example", "--", "/bin/echo", "sent")
	cmd.SysProcAttr = nobody
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "permission denied: user nobody") {
		t.Errorf("sluice throttle as nobody: %v %q, want a permission error that names the user", err, out)
	}
}

// mkdirOwned makes dir with owner, group and mode.
func mkdirOwned(t *testing.T, dir, owner, group string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(dir, mode); err != nil {
		t.Fatal(err)
	}
	chownNames(t, dir, owner, group)
	if err := os.Chmod(dir, mode); err != nil {
		t.Fatal(err)
	}
}

func chownNames(t *testing.T, path, owner, group string) {
	t.Helper()
	u, err := user.Lookup(owner)
	if err != nil {
		peer.Missing(t, "user "+owner, err)
	}
	g, err := user.LookupGroup(group)
	if err != nil {
		peer.Missing(t, "group "+group, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(g.Gid)
	if err := os.Lchown(path, uid, gid); err != nil {
		t.Fatal(fmt.Errorf("chown %s: %w", path, err))
	}
}
