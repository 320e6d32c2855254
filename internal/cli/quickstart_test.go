package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"sluice/internal/testutil/peer"
	"sluice/internal/testutil/recipe"
)

// TestMuxQuickStart runs docs/mux.md's example worker and quick start as
// written, with the paths moved to a temporary directory: the commands
// succeed, the worker's replies come back through sluice mux, the spool
// and socket are the -U user's, the workers run as that user, and the pid
// file stops it.
func TestMuxQuickStart(t *testing.T) {
	peer.Root(t, "the quick start runs sluice mux as root with -U defang")
	u := peer.User(t, "defang")
	bin, _ := muxBinaries(t)
	top, err := os.MkdirTemp("", "sluice-quickstart")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(top) })
	if err := os.Chmod(top, 0o755); err != nil {
		t.Fatal(err)
	}
	worker := filepath.Join(top, "worker.sh")
	if err := os.WriteFile(worker, []byte(recipe.Get(t, "docs/mux.md", "mux-worker")), 0o644); err != nil {
		t.Fatal(err)
	}
	spool := filepath.Join(top, "MIMEDefang")
	script := recipe.Replace(t, recipe.Get(t, "docs/mux.md", "mux-quickstart"),
		"/var/spool/MIMEDefang", spool,
		"/run/mimedefang-multiplexor.pid", filepath.Join(top, "mimedefang-multiplexor.pid"), // top: root's, 0755
		"/usr/local/libexec/sluice-worker", filepath.Join(top, "sluice-worker"),
		"install -m 0755 worker.sh", "install -m 0755 "+worker,
		"sluice mux ", bin+" mux ",
		"sluice ctl ", bin+" ctl ")
	sock := filepath.Join(spool, "mimedefang-multiplexor.sock")
	pidFile := filepath.Join(top, "mimedefang-multiplexor.pid")
	t.Cleanup(func() {
		if b, err := os.ReadFile(pidFile); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				_ = syscall.Kill(pid, syscall.SIGTERM)
			}
		}
	})
	out, err := exec.Command("sh", "-e", "-c", script).CombinedOutput()
	if err != nil {
		t.Fatalf("the quick start failed: %v\n%s\nscript:\n%s", err, out, script)
	}
	if !strings.Contains(string(out), "Max workers: 10\n") {
		t.Errorf("sluice ctl status printed:\n%s", out)
	}

	for req, want := range map[string]string{
		"relayok 192.0.2.7 bad.example 25 127.0.0.1 25 NOQUEUE\n":            "ok 0 Go%20away 554 5.7.1 0\n",
		"relayok 198.51.100.1 ok.example 25 127.0.0.1 25 NOQUEUE\n":          "ok 1 ok 250 2.1.0 0\n",
		"senderok %3Calice@example.org%3E 127.0.0.1 host helo dir NOQUEUE\n": "ok 1 ok 250 2.1.0 0\n",
		"frobnicate\n": "error: frobnicate not handled\n",
	} {
		if got := muxQuery(t, sock, req); got != want {
			t.Errorf("%q: %q, want %q", strings.TrimSpace(req), got, want)
		}
	}
	// A scan: the milter's work directory in the spool, RESULTS written.
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	work := filepath.Join(spool, "mdefang-QS1")
	if err := os.Mkdir(work, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(work, uid, gid); err != nil {
		t.Fatal(err)
	}
	if got := muxQuery(t, sock, "scan QS1 "+work+"\n"); got != "ok\n" {
		t.Errorf("scan: %q", got)
	}
	if b, err := os.ReadFile(filepath.Join(work, "RESULTS")); err != nil || string(b) != "F\n" {
		t.Errorf("RESULTS: %q %v", b, err)
	}

	// Ownership as the page says: spool and socket the user's, the
	// socket 0700, the workers run as the user.
	for path, mode := range map[string]os.FileMode{spool: 0o750 | os.ModeDir, sock: 0o700 | os.ModeSocket} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if int(st.Uid) != uid || int(st.Gid) != gid || fi.Mode() != mode {
			t.Errorf("%s: owner %d:%d mode %v, want %d:%d %v", path, st.Uid, st.Gid, fi.Mode(), uid, gid, mode)
		}
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	workers, _ := exec.Command("ps", "-o", "user=", "--ppid", strconv.Itoa(pid)).Output()
	users := strings.Fields(string(workers))
	if len(users) == 0 {
		t.Error("no workers")
	}
	for _, w := range users {
		if w != "defang" {
			t.Errorf("a worker runs as %s, want defang", w)
		}
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); syscall.Kill(pid, 0) == nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("sluice mux did not stop on SIGTERM")
		}
	}
}
