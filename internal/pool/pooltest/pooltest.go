// Package pooltest builds the fake worker program that the pool and mux
// tests run as their filter (internal/pool/testdata/fakeworker).
package pooltest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
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
