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
// budget without the test waiting on the wall clock. Virtual time only
// advances while no request is in flight, so a page whose event stream
// never ends would hold it for ever (Chromium 148 and later never return):
// the server must end its streams within the budget. A browser still
// running 30 s of wall time past the budget is killed and fails the test,
// named as hung.
func Run(t testing.TB, bin, url string, budget time.Duration, extra ...string) []byte {
	t.Helper()
	return run(t, bin, url, budget+30*time.Second, append([]string{"--virtual-time-budget=" + strconv.FormatInt(budget.Milliseconds(), 10)}, extra...)...)
}

// FirstPaint loads url in real time, with no virtual time budget, and
// returns what --dump-dom printed or the flags' --screenshot kept as soon
// as the page has loaded, however long its event streams stay open:
// Chromium's --timeout stops the load at 2 s, so what a test sees is
// what the page showed within 2 s, its first paint. Scripts run unless
// extra disables them (--blink-settings=scriptEnabled=false).
func FirstPaint(t testing.TB, bin, url string, extra ...string) []byte {
	t.Helper()
	return run(t, bin, url, 30*time.Second, append([]string{"--timeout=2000"}, extra...)...)
}

// run runs bin headless on url with the flags, killing it after limit.
func run(t testing.TB, bin, url string, limit time.Duration, flags ...string) []byte {
	t.Helper()
	dir := t.TempDir()
	args := []string{
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-crash-reporter", "--hide-scrollbars",
		"--user-data-dir=" + filepath.Join(dir, "profile"),
	}
	args = append(append(args, flags...), url)
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "HOME="+dir)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			t.Fatalf("%s %s: hung: still running after %v (killed)\n%s", bin, strings.Join(args, " "), limit, stderr.String())
		}
		t.Fatalf("%s %s: %v\n%s", bin, strings.Join(args, " "), err, stderr.String())
	}
	return stdout.Bytes()
}
