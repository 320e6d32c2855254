package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"sluice/internal/testutil/logbuf"
	"sluice/internal/testutil/muxref"
	"sluice/internal/testutil/peer"
	"sluice/internal/testutil/recipe"
)

// TestStatusReadsMuxPoolThroughUnprivSocket: Debian's multiplexor runs as
// defang as docs/mux.md's "The pool on sluice's status page" has it
// (startDebianMux). sluice serve runs as the user sluice (not in the
// group defang) with [web] mux_socket at the -a socket, and `sluice
// status` shows the pool's slots; pointed at the privileged socket, it
// shows the permission error and what to change (-a) instead.
func TestStatusReadsMuxPoolThroughUnprivSocket(t *testing.T) {
	peer.Root(t, "the test runs the multiplexor as defang and sluice as sluice")
	sluiceCred := credential(t, "sluice")
	t.Parallel()
	bin, _ := muxBinaries(t)
	base := deployDir(t)
	priv, unpriv := startDebianMux(t, base)
	own := filepath.Join(base, "sluice")
	mkdirOwned(t, own, "sluice", "sluice", 0o755)

	for _, tc := range []struct {
		name, sock string
		want       []string
	}{
		{"unprivileged", unpriv, []string{"pool     0/2 busy  ["}},
		{"privileged", priv, []string{"pool     cannot read the multiplexor's pool at " + priv, "permission denied", "-a /run/mimedefang/mimedefang-multiplexor-unpriv.sock", "set [web] mux_socket to PATH"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(own, tc.name)
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			chownNames(t, dir, "sluice", "sluice")
			conf := filepath.Join(dir, "sluice.toml")
			// docs/mux.md's lines, at the test's own paths.
			web := recipe.Replace(t, recipe.Get(t, "docs/mux.md", "mux-unpriv-web"), "[web]\n", "[web]\nlisten = [\"unix:web\"]\n",
				"/run/mimedefang/mimedefang-multiplexor-unpriv.sock", tc.sock)
			body := "state_dir = \"" + dir + "\"\nruntime_dir = \"" + dir + "\"\n[anvil]\nenabled = false\n" + web
			if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
			env := []string{"PATH=/usr/bin:/bin", "HOME=/nonexistent", "NOTIFY_SOCKET=", "WATCHDOG_USEC="}
			cmd := exec.Command(bin, "serve", "-c", conf)
			cmd.SysProcAttr, cmd.Env = sluiceCred, env
			p := &relProc{cmd: cmd, stderr: &logbuf.Buffer{}, done: make(chan struct{})}
			cmd.Stderr = p.stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			go func() { p.err = cmd.Wait(); close(p.done) }()
			defer func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = p.wait(t, 30*time.Second) }()
			p.waitSockets(t, filepath.Join(dir, "web"))
			out := statusAs(t, bin, conf, sluiceCred, p)
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("sluice status lacks %q:\n%s", w, out)
				}
			}
		})
	}
}

// statusAs runs `sluice status -c conf` with cred and returns its output;
// a failure fails the test with the daemon p's log.
func statusAs(t *testing.T, bin, conf string, cred *syscall.SysProcAttr, p *relProc) string {
	t.Helper()
	st := exec.Command(bin, "status", "-c", conf)
	st.SysProcAttr, st.Env = cred, []string{"PATH=/usr/bin:/bin", "HOME=/nonexistent"}
	out, err := st.CombinedOutput()
	if err != nil {
		t.Fatalf("sluice status: %v\n%s\ndaemon:\n%s", err, out, p.stderr.String())
	}
	return string(out)
}

// startDebianMux runs Debian's mimedefang-multiplexor (muxref) as defang,
// as docs/mux.md's "The pool on sluice's status page" has it, with 2
// workers (the fake worker of muxBinaries), under dir: its privileged
// socket in dir/MIMEDefang (defang, mode 0750, as /var/spool/MIMEDefang),
// its unprivileged -a socket in dir/mimedefang (defang, 0755, as
// /run/mimedefang), the -a option given by docs/mux.md's line for
// /etc/default/mimedefang, expanded as Debian's unit and init script
// expand it (checked: both still have that expansion). It returns the
// two sockets' paths once both answer; the multiplexor is stopped when
// the test ends. The user sluice must not be in the group defang: the
// tests that read the pool would prove nothing.
func startDebianMux(t *testing.T, dir string) (priv, unpriv string) {
	t.Helper()
	peer.Root(t, "the multiplexor is started by root and runs as defang")
	ref := muxref.Mux(t)
	peer.User(t, "defang")
	if ids, _ := peer.User(t, "sluice").GroupIds(); strings.Contains(","+strings.Join(ids, ",")+",", ","+peer.Group(t, "defang").Gid+",") {
		t.Fatal("the user sluice is in the group defang: the test would prove nothing")
	}
	_, worker := muxBinaries(t)
	spool, run := filepath.Join(dir, "MIMEDefang"), filepath.Join(dir, "mimedefang")
	mkdirOwned(t, spool, "defang", "defang", 0o750)
	mkdirOwned(t, run, "defang", "defang", 0o755)
	priv, unpriv = filepath.Join(spool, "mimedefang-multiplexor.sock"), filepath.Join(run, "mimedefang-multiplexor-unpriv.sock")
	const expand = "`[ -n \"$MX_RECIPOK_PERDOMAIN_LIMIT\" ] && echo \"-y $MX_RECIPOK_PERDOMAIN_LIMIT\"`"
	for _, f := range []string{"/lib/systemd/system/mimedefang-multiplexor.service", "/etc/init.d/mimedefang"} {
		if b, err := os.ReadFile(f); err != nil || !strings.Contains(string(b), expand) {
			t.Errorf("%s (Debian package mimedefang) no longer expands MX_RECIPOK_PERDOMAIN_LIMIT as docs/mux.md says (%v)", f, err)
		}
	}
	defaults := filepath.Join(dir, "default-mimedefang")
	line := recipe.Replace(t, recipe.Get(t, "docs/mux.md", "mux-unpriv-default"), "/run/mimedefang/", run+"/")
	if err := os.WriteFile(defaults, []byte(line), 0o644); err != nil {
		t.Fatal(err)
	}
	words, err := exec.Command("sh", "-c", ". "+defaults+"; echo "+expand).Output()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(words), "-a "+unpriv) {
		t.Fatalf("docs/mux.md's line expands to %q, without -a %s", words, unpriv)
	}
	args := append([]string{"-D", "-U", "defang", "-m", "2", "-x", "2", "-z", spool, "-f", worker,
		"-p", filepath.Join(run, "pid"), "-o", filepath.Join(run, "lock")}, strings.Fields(string(words))...)
	mx := exec.Command(ref, append(args, "-s", priv)...)
	mp := &relProc{cmd: mx, stderr: &logbuf.Buffer{}, done: make(chan struct{})}
	mx.Stdout, mx.Stderr = mp.stderr, mp.stderr
	if err := mx.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { mp.err = mx.Wait(); close(mp.done) }()
	t.Cleanup(func() { _ = mx.Process.Signal(syscall.SIGTERM); _ = mp.wait(t, 30*time.Second) })
	mp.waitSockets(t, priv, unpriv)
	return priv, unpriv
}
