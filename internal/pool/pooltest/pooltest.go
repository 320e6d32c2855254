// Package pooltest builds the fake worker program that the pool and mux
// tests run as their filter (internal/pool/testdata/fakeworker).
package pooltest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"

	"go.uber.org/goleak"

	"sluice/internal/pool"
)

// BuildFakeWorker builds the fake worker into dir (which must be readable
// by whoever runs it) and returns its absolute path.
func BuildFakeWorker(dir string) (string, error) {
	_, here, _, _ := runtime.Caller(0)
	src := filepath.Join(filepath.Dir(here), "..", "testdata", "fakeworker")
	bin, err := filepath.Abs(filepath.Join(dir, "fakeworker"))
	if err != nil {
		return "", err
	}
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the fake worker: %w\n%s", err, out)
	}
	return bin, nil
}

// Main is a TestMain for tests that run the fake worker: it builds it
// into a new directory anyone may read (a -U user runs it), sets *worker
// to its path, runs the tests, removes the directory and, when the tests
// passed, fails them on leaked goroutines. It returns the exit code.
func Main(m *testing.M, worker *string) int {
	dir, err := os.MkdirTemp("", "fakeworker")
	if err == nil {
		err = os.Chmod(dir, 0o755)
	}
	if err == nil {
		*worker, err = BuildFakeWorker(dir)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	code := m.Run()
	os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(goleak.IgnoreTopFunction("os/signal.signal_recv")); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	return code
}

// Start runs a pool of cfg for the test and stops it (reaping every
// child) at cleanup, checking that Run ends without error and that no
// worker process survives.
func Start(t testing.TB, cfg pool.Config) *pool.Pool {
	t.Helper()
	p, _ := Run(t, cfg)
	return p
}

// Run is Start with the stop function, for a test that stops the pool
// itself (stop waits for Run and checks the workers are gone; cleanup
// calls it too, and a second call does nothing).
func Run(t testing.TB, cfg pool.Config) (*pool.Pool, func()) {
	t.Helper()
	p, err := pool.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			var pids []int
			if snap, ok := p.Snapshot(); ok {
				for _, s := range snap.Slots {
					if s.PID > 0 {
						pids = append(pids, s.PID)
					}
				}
			}
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
			for _, pid := range pids {
				if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
					t.Errorf("worker pid %d still exists after shutdown (kill 0: %v)", pid, err)
				}
			}
		})
	}
	t.Cleanup(stop)
	return p, stop
}
