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
	"time"

	"sluice/internal/testutil/peer"
	"sluice/internal/testutil/recipe"
)

// unitFile is the settings of a systemd unit file, by key, in order.
type unitFile map[string][]string

// unitPath is where the shipped unit file name is.
func unitPath(name string) string { return filepath.Join(recipe.Root(), "examples", "systemd", name) }

func readUnit(t *testing.T, name string) unitFile {
	t.Helper()
	b, err := os.ReadFile(unitPath(name))
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

// TestSystemdUnitAsDeployed runs the shipped units as systemd would
// (unitHost), with the example configuration and its milter turned on,
// as the milter's socket unit asks: first ExecStartPre= (sluice check
// with every socket unit), then ExecStart=. Then each socket's peer, as
// its own user, gets in: postfix on the anvil, policy and milter
// sockets, qmailr (group qmail alone, as qmail-rspawn runs it) with
// sluice throttle on the throttle socket, sluice status on the web
// socket; and another user does not (nobody, and on the throttle socket
// qmaild, qmail-smtpd's user in group nofiles).
// With the milter off again, the check and the start refuse alike the
// socket the milter's unit still passes; with it on and its socket unit
// not installed, alike the socket sluice cannot make.
func TestSystemdUnitAsDeployed(t *testing.T) {
	peer.Root(t, "the unit's sockets are made by root for other users")
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
	postfix, qmailr, nobody := credential(t, "postfix"), asQmailr(t), credential(t, "nobody")
	bin, _ := muxBinaries(t)
	base := deployDir(t)
	moved := movedDeploymentAt(t, bin, base, "", runUser, runGroup)
	cfgPath := filepath.Join(base, "sluice.toml")
	writeMovedConfig(t, moved, cfgPath, true)
	h := newUnitHost(t, moved, filepath.Join(base, "systemd"))
	p := h.start()
	assertUnprivileged(t, p.pid(), runUser)

	connect := func(cred *syscall.SysProcAttr, path string) string {
		cmd := exec.Command(perl, "-MIO::Socket::UNIX", "-e", `IO::Socket::UNIX->new(Peer => $ARGV[0]) or die "$!\n"; print "connected\n"`, path)
		cmd.SysProcAttr = cred
		out, _ := cmd.CombinedOutput()
		return strings.TrimSpace(string(out))
	}
	anvilSock, policySock := filepath.Join(base, "spool", "private", "anvil"), filepath.Join(base, "spool", "private", "sluice-policy")
	milterSock := filepath.Join(base, "spool", "sluice", "milter")
	for _, path := range []string{anvilSock, policySock, milterSock} {
		if got := connect(postfix, path); got != "connected" {
			t.Errorf("postfix connecting to %s: %s", path, got)
		}
		if got := connect(nobody, path); got != "Permission denied" {
			t.Errorf("nobody connecting to %s: %q, want Permission denied", path, got)
		}
	}
	if !strings.Contains(p.stderr.String(), "milter service listening") {
		t.Errorf("the milter does not serve the passed socket:\n%s", p.stderr.String())
	}

	throttleSock := filepath.Join(base, "run", "throttle")
	cmd := exec.Command(bin, "throttle", "-s", throttleSock, "-k", "relay.example", "--", "/bin/echo", "sent")
	cmd.SysProcAttr = qmailr
	if out, err := cmd.CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "sent" {
		t.Errorf("sluice throttle as qmailr: %v %q\n%s", err, out, p.stderr.String())
	}
	// qmaild is qmail-smtpd's user, group nofiles alone (tcpserver -g):
	// the Internet-facing one, which must not reach it.
	for who, cred := range map[string]*syscall.SysProcAttr{"nobody": nobody, "qmaild": qmailCredential(t, "qmaild", "nofiles")} {
		cmd = exec.Command(bin, "throttle", "-s", throttleSock, "-k", "relay.example", "--", "/bin/echo", "sent")
		cmd.SysProcAttr = cred
		if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "permission denied: user "+who) {
			t.Errorf("sluice throttle as %s: %v %q, want a permission error that names the user", who, err, out)
		}
	}
	cmd = exec.Command(bin, "status", "-c", cfgPath)
	cmd.SysProcAttr = credential(t, runUser)
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "milter") {
		t.Errorf("sluice status as %s through the web socket: %v\n%s", runUser, err, out)
	}
	// systemctl reload: ExecReload='s check knows the socket units as
	// ExecStartPre='s does, so the configuration the start took reloads.
	if out, err := h.reload(); err != nil {
		t.Errorf("ExecReload of the configuration ExecStartPre accepted: %v\n%s", err, out)
	}
	h.stop()

	// The milter off, its socket unit still installed: the check says
	// which line, and the start refuses the same socket.
	writeMovedConfig(t, moved, cfgPath, false)
	out, err := h.preStart()
	if err == nil || !strings.Contains(string(out), "sluice-milter.socket:") || !strings.Contains(string(out), "would refuse the socket") {
		t.Errorf("ExecStartPre with the milter off: %v\n%s", err, out)
	}
	p = h.startMain()
	if err := p.wait(t, 30*time.Second); err == nil || !strings.Contains(p.stderr.String(), "no listen address in the configuration names") {
		t.Errorf("ExecStart with the milter off: %v\n%s", err, p.stderr.String())
	}

	// The milter on, its socket unit not installed: sluice would bind the
	// socket itself, in a directory of root's; the check says so, and the
	// start fails alike.
	h.uninstall("sluice-milter.socket")
	writeMovedConfig(t, moved, cfgPath, true)
	out, err = h.preStart()
	if err == nil || !strings.Contains(string(out), "milter.listen[1]: user sluice cannot bind "+milterSock) {
		t.Errorf("ExecStartPre with the milter on and no socket unit for it: %v\n%s", err, out)
	}
	p = h.startMain()
	if err := p.wait(t, 30*time.Second); err == nil || !strings.Contains(p.stderr.String(), milterSock) {
		t.Errorf("ExecStart with the milter on and no socket unit for it: %v\n%s", err, p.stderr.String())
	}
}

// movedDeploymentAt makes the directories of the example deployment
// under base, as systemd's StateDirectory= and RuntimeDirectory= make
// them, and returns the replacer that moves the units' and the example
// config's paths and the web's port there. spool stands for
// /var/spool/postfix: a private Postfix's queue directory, or "" for one
// made under base.
func movedDeploymentAt(t *testing.T, bin, base, spool, runUser, runGroup string) *strings.Replacer {
	t.Helper()
	webPort := freePort(t)
	if spool == "" {
		spool = filepath.Join(base, "spool")
		mkdirOwned(t, spool, "root", "root", 0o755)
		mkdirOwned(t, filepath.Join(spool, "private"), "postfix", "root", 0o700)
	}
	mkdirOwned(t, filepath.Join(base, "state"), runUser, runGroup, 0o750)
	mkdirOwned(t, filepath.Join(base, "run"), runUser, runGroup, 0o755)
	return strings.NewReplacer("/var/spool/postfix", spool, "/run/sluice", filepath.Join(base, "run"),
		"/var/lib/sluice", filepath.Join(base, "state"), "/etc/sluice/sluice.toml", filepath.Join(base, "sluice.toml"), "/usr/local/bin/sluice", bin,
		"/etc/systemd/system", filepath.Join(base, "systemd"),
		"127.0.0.1:9465", "127.0.0.1:"+strconv.Itoa(webPort))
}

// writeMovedConfig writes the example config, moved, with the milter on
// or off and the replacements oldnew made, to path.
func writeMovedConfig(t *testing.T, moved *strings.Replacer, path string, milter bool, oldnew ...string) {
	t.Helper()
	cfg, err := os.ReadFile(filepath.Join(recipe.Root(), "examples", "sluice.toml"))
	if err != nil {
		t.Fatal(err)
	}
	text := moved.Replace(string(cfg))
	if milter {
		text = recipe.Replace(t, text, "[milter]\nenabled = false", "[milter]\nenabled = true")
	}
	text = recipe.Replace(t, text, oldnew...)
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// appendFile appends text to the file at path.
func appendFile(t *testing.T, path, text string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(text); err != nil {
		t.Fatal(err)
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
