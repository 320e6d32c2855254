package cli

import (
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestServeExitsWhenAListenerFails: a listening socket that breaks under
// the daemon (here shut down through the copy its owner, as systemd,
// keeps) ends that door's accept loop for good; sluice serve logs it,
// shuts down and exits 1, so that the service manager restarts it,
// instead of running on with the door shut.
func TestServeExitsWhenAListenerFails(t *testing.T) {
	bin, _ := muxBinaries(t)
	dir := t.TempDir()
	tl, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer tl.Close()
	cfg := writeServeConfig(t, dir, fmt.Sprintf("[policy]\nlisten = [\"inet:%s\"]\n", tl.Addr()), "anvil", "milter", "throttle")
	lf, err := tl.File()
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	p := serveFromSystemd(t, bin, lf, "policy", "serve", "-c", cfg, "-grace", "10s")
	// shutdown(2) acts on the socket both descriptors share: the
	// daemon's accept fails with EINVAL, which is not retried.
	if err := syscall.Shutdown(int(lf.Fd()), syscall.SHUT_RD); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(time.Minute):
		t.Fatalf("sluice serve still runs a minute after its listener failed:\n%s", p.stderr.String())
	}
	var ee *exec.ExitError
	if !errors.As(p.err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("exit: %v, want status 1\n%s", p.err, p.stderr.String())
	}
	for _, want := range []string{"policy: listener failed", "shutting down: a listener failed", "sluice stopped"} {
		if !strings.Contains(p.stderr.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, p.stderr.String())
		}
	}
}
