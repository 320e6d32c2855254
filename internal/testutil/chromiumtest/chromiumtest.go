// Package chromiumtest runs headless Chromium (the Debian package
// chromium; scripts/test.sh installs it) for the status page's end-to-end
// tests: the page's script runs for real and the tests read the DOM it
// built, or keep a screenshot.
package chromiumtest

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sluice/internal/testutil/peer"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Binary returns the browser to run: $SLUICE_CHROMIUM, else the first of
// chromium, chromium-browser, google-chrome found. Without one the test
// is skipped, loudly.
func Binary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("SLUICE_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"/usr/bin/chromium", "chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	peer.Missing(t, "chromium", errors.New("not installed (Debian package chromium, or set SLUICE_CHROMIUM)"))
	return ""
}

// Run runs the headless browser bin on url with extra flags (such as
// --dump-dom or --screenshot=FILE) and returns its standard output. The
// virtual time budget lets the page's timers and reconnects run for
// budget without the test waiting on the wall clock; a 3-minute context
// only guards against a hung browser. A failed run fails the test.
func Run(t testing.TB, bin, url string, budget time.Duration, extra ...string) []byte {
	t.Helper()
	dir := t.TempDir()
	args := []string{
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-crash-reporter", "--hide-scrollbars",
		"--user-data-dir=" + filepath.Join(dir, "profile"),
		"--virtual-time-budget=" + strconv.FormatInt(budget.Milliseconds(), 10),
	}
	args = append(append(args, extra...), url)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "HOME="+dir)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s", bin, strings.Join(args, " "), err, stderr.String())
	}
	return stdout.Bytes()
}
