package cli

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"sluice/internal/testutil/peer"
	"sluice/internal/testutil/recipe"
)

// TestInitScript runs examples/init.d/sluice as root, as sysvinit runs
// it, with its defaults file pointing at the test's binary, configuration
// (user = "sluice", sockets in the test's runtime directory), pid file
// and log: status before the start (3), start (the pid file names a
// process running as sluice), start again (already running), reload (a
// SIGHUP the daemon logs; a broken configuration refused by the script,
// the daemon still serving the old one), restart while clients send
// policy requests without a pause (SIGUSR2: every request answered, a
// new pid in the pid file, the old process gone), stop (the daemon gone,
// its pid file removed by it) and status after (3).
func TestInitScript(t *testing.T) {
	peer.Root(t, "an init script runs as root and the daemon switches to sluice")
	peer.User(t, "sluice")
	peer.Binary(t, "util-linux", "setsid")
	bin, _ := muxBinaries(t)
	base := deployDir(t)
	run, pidfile, logfile := filepath.Join(base, "run"), filepath.Join(base, "run", "sluice.pid"), filepath.Join(base, "sluice.log")
	cfg := filepath.Join(base, "sluice.toml")
	good := fmt.Sprintf("user = \"sluice\"\nstate_dir = %q\nruntime_dir = %q\n[policy]\nlisten = [\"unix:policy\"]\n"+
		"[policy.socket]\nmode = \"0666\"\n[[policy.rule]]\nname = \"sender\"\ncount = \"messages\"\nkey = [\"sender\"]\nlimit = [\"1000000/60s\"]\n",
		filepath.Join(base, "state"), run)
	writeText(t, cfg, good)
	defaults := filepath.Join(base, "default")
	writeText(t, defaults, fmt.Sprintf("DAEMON=%s\nCONFIG=%s\nPIDFILE=%s\nLOG=%s\n", bin, cfg, pidfile, logfile))
	script := filepath.Join(recipe.Root(), "examples", "init.d", "sluice")
	initd := func(action string) (string, int) {
		cmd := exec.Command(script, action)
		cmd.Env = []string{"SLUICE_DEFAULTS=" + defaults, "PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), code
	}
	logText := func() string { b, _ := os.ReadFile(logfile); return string(b) }
	t.Cleanup(func() {
		if out, code := initd("stop"); code != 0 {
			t.Logf("cleanup stop: %d %s", code, out)
		}
	})

	if out, code := initd("status"); code != 3 {
		t.Errorf("status before the start: %d %s, want 3", code, out)
	}
	out, code := initd("start")
	if code != 0 {
		t.Fatalf("start: %d %s\n%s", code, out, logText())
	}
	pid := pidIn(t, pidfile)
	assertUnprivileged(t, pid, "sluice")
	if out, code := initd("status"); code != 0 || !strings.Contains(out, "running (pid "+strconv.Itoa(pid)+")") {
		t.Errorf("status: %d %s", code, out)
	}
	if out, code := initd("start"); code != 0 || !strings.Contains(out, "already running") || pidIn(t, pidfile) != pid {
		t.Errorf("start again: %d %s", code, out)
	}

	reloads := strings.Count(logText(), "configuration reloaded")
	if out, code := initd("reload"); code != 0 {
		t.Errorf("reload: %d %s", code, out)
	}
	waitUntil(t, "the daemon reloads", func() bool { return strings.Count(logText(), "configuration reloaded") > reloads }, logText)
	writeText(t, cfg, good+"[[class]]\n")
	if out, code := initd("reload"); code != 1 || !strings.Contains(out, "has errors; nothing done") {
		t.Errorf("reload of a broken configuration: %d %s", code, out)
	}
	writeText(t, cfg, good)

	// restart: clients send requests without a pause; none is refused.
	sock := filepath.Join(run, "policy")
	if err := policyAsk(sock); err != nil {
		t.Fatalf("a request before the restart: %v", err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var answered int
	var refused []error
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				err := policyAsk(sock)
				mu.Lock()
				if err != nil {
					refused = append(refused, err)
				} else {
					answered++
				}
				mu.Unlock()
			}
		}()
	}
	out, code = initd("restart")
	close(stop)
	wg.Wait()
	if code != 0 || !strings.Contains(out, "no listener closed") {
		t.Fatalf("restart: %d %s\n%s", code, out, logText())
	}
	if len(refused) > 0 || answered == 0 {
		t.Errorf("during the restart: %d answered, %d refused (first: %v)", answered, len(refused), append(refused, nil)[0])
	}
	npid := pidIn(t, pidfile)
	if npid == pid || syscall.Kill(pid, 0) == nil {
		t.Errorf("after the restart the pid file names %d (before: %d, still alive: %v)", npid, pid, syscall.Kill(pid, 0) == nil)
	}
	assertUnprivileged(t, npid, "sluice")

	if out, code := initd("stop"); code != 0 || !strings.Contains(out, "stopped") {
		t.Errorf("stop: %d %s\n%s", code, out, logText())
	}
	if err := syscall.Kill(npid, 0); err == nil {
		t.Errorf("pid %d still runs after stop", npid)
	}
	if _, err := os.Stat(pidfile); !os.IsNotExist(err) {
		t.Errorf("the pid file outlived the daemon: %v", err)
	}
	if out, code := initd("status"); code != 3 {
		t.Errorf("status after stop: %d %s, want 3", code, out)
	}
}

// pidIn is the pid a pid file names.
func pidIn(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("pid file %s: %q", path, b)
	}
	return pid
}

// policyAsk sends one policy request on sock and reads its answer.
func policyAsk(sock string) error {
	c, err := net.Dial("unix", sock)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.Write([]byte(policyRequest)); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "action=") {
		return fmt.Errorf("answer %q", line)
	}
	return nil
}

func writeText(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}
