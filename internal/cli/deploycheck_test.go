package cli

import (
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"sluice/internal/testutil/peer"
)

// TestCheckKnowsTheDeployment: check -service-unit judges every unix
// socket no socket unit passes as the unit's User= under its
// ProtectSystem= and ReadWritePaths=, as the start will make it: the
// example's milter socket in a root-owned spool directory fails under
// ProtectSystem=strict, then for want of permission once the path is
// writable, and passes once a socket unit makes it; a socket owner other
// than sluice's user fails (only root gives a file away).
func TestCheckKnowsTheDeployment(t *testing.T) {
	u, err := user.Lookup("sluice")
	if err != nil {
		peer.Missing(t, "the system user sluice", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	tmp := t.TempDir()
	for _, d := range []string{filepath.Dir(tmp), tmp} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	runDir, spool := filepath.Join(tmp, "run"), filepath.Join(tmp, "spool")
	for _, d := range []string{runDir, spool} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(runDir, uid, gid); err != nil {
		t.Fatal(err)
	}
	write := func(name, body string) string {
		p := filepath.Join(tmp, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	sock := filepath.Join(spool, "sluice", "milter")
	cfg := write("sluice.toml", "state_dir = \""+filepath.Join(tmp, "state")+"\"\nruntime_dir = \""+runDir+"\"\n[milter]\nlisten = [\"unix:"+sock+"\"]\n[milter.socket]\nmode = \"0660\"\n")
	strict := write("strict.service", "[Service]\nUser=sluice\nProtectSystem=strict\nReadWritePaths="+runDir+"\n")
	writable := write("rw.service", "[Service]\nUser=sluice\nProtectSystem=strict\nReadWritePaths="+runDir+" "+spool+"\n")
	socketUnit := write("milter.socket", "[Socket]\nListenStream="+sock+"\n")
	for _, c := range []struct {
		args []string
		code int
		err  string
	}{
		{[]string{"-service-unit", strict}, 1, "sluice.toml:4: milter.listen[1]: user sluice cannot bind " + sock + ": " + strict + " makes " + spool + " read-only (ProtectSystem=; add ReadWritePaths=)"},
		{[]string{"-service-unit", writable}, 1, "user sluice cannot bind " + sock + ": it cannot create the directory " + filepath.Dir(sock) + " in " + spool + " (owner root, group root, mode 0755)"},
		{[]string{"-service-unit", writable, "-socket-unit", socketUnit}, 0, ""},
		{nil, 0, ""}, // as root: the start binds as root
	} {
		code, _, errs := run(append([]string{"check", "-q", "-c", cfg}, c.args...)...)
		if code != c.code || !strings.Contains(errs, c.err) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", c.args, code, errs, c.code, c.err)
		}
	}
	cfg = write("owner.toml", "state_dir = \""+filepath.Join(tmp, "state")+"\"\nruntime_dir = \""+runDir+"\"\n[milter]\nlisten = [\"unix:milter\"]\n[milter.socket]\nowner = \"postfix\"\nmode = \"0600\"\n")
	code, _, errs := run("check", "-q", "-c", cfg, "-service-unit", writable)
	if code != 1 || !strings.Contains(errs, "the socket's owner postfix (milter.socket.owner) is another user, and only root can give a file away") {
		t.Errorf("owner postfix: exit %d, %q", code, errs)
	}
}
