package muxd

import (
	"bytes"
	"context"
	"os"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("os/signal.signal_recv"))
}

// Startup errors before anything is bound, in the reference's words and
// prefixed with Prog: an unknown -U user; root without -U.
func TestRunStartupErrors(t *testing.T) {
	mask := syscall.Umask(0o022) // Run sets the umask
	defer syscall.Umask(mask)
	o := Options{Prog: "px", User: "no-such-user-here", Foreground: true, Spool: t.TempDir()}
	var stderr bytes.Buffer
	if code := Run(context.Background(), o, &stderr); code != 1 || stderr.String() != "px: Unknown user 'no-such-user-here'\n" {
		t.Errorf("unknown user: %d %q", code, stderr.String())
	}
	if os.Geteuid() != 0 {
		return
	}
	o.User = ""
	stderr.Reset()
	want := "ERROR: You must not run mimedefang-multiplexor as root.\nUse the -U option to set a non-root user.\n"
	if code := Run(context.Background(), o, &stderr); code != 1 || stderr.String() != want {
		t.Errorf("root: %d %q", code, stderr.String())
	}
}

// The signal loop: SIGHUP (no stats file) goes on,
// SIGTERM stops, and so does the end of ctx.
func TestSignalLoop(t *testing.T) {
	r := &running{}
	sigs := make(chan os.Signal, 3)
	sigs <- syscall.SIGHUP
	sigs <- syscall.SIGHUP
	sigs <- syscall.SIGTERM
	done := make(chan struct{})
	go func() { r.wait(context.Background(), sigs); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("SIGTERM did not stop the loop")
	}
	if len(sigs) != 0 {
		t.Errorf("%d signals left unread", len(sigs))
	}
	sigs <- syscall.SIGHUP
	ctx, cancel := context.WithCancel(context.Background())
	done = make(chan struct{})
	go func() { r.wait(ctx, sigs); close(done) }()
	cancel()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("the end of ctx did not stop the loop")
	}
}
