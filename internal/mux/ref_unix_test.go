package mux_test

import (
	"os"
	"os/user"
	"strconv"
	"syscall"
	"testing"
	"time"

	"sluice/internal/testutil/muxref"
)

func chownDefang(dir string) error {
	u, err := user.Lookup("defang")
	if err != nil {
		return err
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return os.Chown(dir, uid, gid)
}

// runReference starts the reference and returns a function that stops it
// with SIGTERM (its clean shutdown) and waits for it.
func runReference(t *testing.T, args []string) func() {
	t.Helper()
	cmd := muxref.Command(t, append([]string{muxref.MultiplexorPath}, args...)...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the reference: %v", err)
	}
	return func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
}
