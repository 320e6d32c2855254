package web

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The end-to-end tests load the status page in headless Chromium (the
// Debian package chromium; scripts/test.sh installs it) and read the DOM
// the page's script built from the live feed. SLUICE_CHROMIUM names
// another binary; SLUICE_ARTIFACTS is where the screenshot is kept.

func chromiumPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("SLUICE_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"/usr/bin/chromium", "chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("SKIPPING the browser test: no chromium found (apt-get install chromium, or set SLUICE_CHROMIUM)")
	return ""
}

// serveFake starts a web server over a fake, changing source on a
// loopback port and returns the page's URL.
func serveFake(t *testing.T, o Options) string {
	t.Helper()
	if o.Source == nil {
		o.Source = newFakeSource()
	}
	s := New(o)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(l) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if err := <-done; !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	})
	return "http://" + l.Addr().String() + "/"
}

// chromium runs the headless browser on url with extra flags and returns
// its standard output. The virtual time budget lets the page's timers and
// reconnects run without the test waiting on the wall clock; the context
// only guards against a hung browser.
func chromium(t *testing.T, bin, url string, extra ...string) []byte {
	t.Helper()
	dir := t.TempDir()
	args := []string{
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-crash-reporter", "--hide-scrollbars",
		"--user-data-dir=" + filepath.Join(dir, "profile"),
		"--virtual-time-budget=4000",
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

// checkRendered asserts that dom shows the fake's figures, which only the
// page's script can have put there.
func checkRendered(t *testing.T, dom string) {
	t.Helper()
	static := string(assets["index.html"].body)
	for _, s := range []string{`data-slot="11"`, "relay-omega", "203.0.113.7", "203.0.113.99", "scan /var/spool/MIMEDefang/mdefang-Q"} {
		if strings.Contains(static, s) {
			t.Fatalf("the static page already holds %q: the test proves nothing", s)
		}
		if !strings.Contains(dom, s) {
			t.Errorf("rendered page lacks %q", s)
		}
	}
	slots := regexp.MustCompile(`<div class="slot" data-slot="\d+" data-state="[SIBK]">`).FindAllString(dom, -1)
	if len(slots) != 12 {
		t.Errorf("rendered %d slot bars, want 12", len(slots))
	}
	cells := regexp.MustCompile(`<span class="cell [SIBK]"`).FindAllString(dom, -1)
	if len(cells) != 12 {
		t.Errorf("rendered %d slot cells in the strip, want 12", len(cells))
	}
	// relay-omega's incoming count is 100 + the number of samples taken:
	// it moves, and its cap is 400.
	m := regexp.MustCompile(`data-class="relay-omega">.*?<span class="fig">(\d+) / 400</span>`).FindStringSubmatch(dom)
	if m == nil {
		t.Errorf("no relay-omega occupancy against its cap 400 in the page")
	} else if n, _ := strconv.Atoi(m[1]); n <= 100 {
		t.Errorf("relay-omega shows %d incoming, want more than 100", n)
	}
	if !regexp.MustCompile(`data-class="default">.*?<span class="fig">\d+ / ∞</span>`).MatchString(dom) {
		t.Error("the uncapped class does not show ∞")
	}
	if !regexp.MustCompile(`<span class="verdict defer">DEFER</span>`).MatchString(dom) ||
		!strings.Contains(dom, ">smooth<") || !strings.Contains(dom, "101 / 100 per 1m") {
		t.Error("the deferral's explanation (count / limit, algorithm, verdict) is missing")
	}
	if !regexp.MustCompile(`data-updated="\d{4}-`).MatchString(dom) {
		t.Error("the page never applied a status")
	}
	for _, secret := range []string{"hunter2", "p4ss"} {
		if strings.Contains(dom, secret) {
			t.Errorf("the page shows the secret %q", secret)
		}
	}
}

func TestBrowserRendersLiveStatus(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test skipped in -short mode")
	}
	bin := chromiumPath(t)
	// Streams end every 1.5 s so that the browser's virtual time can run
	// between them: a stream that never ends holds the page loading.
	url := serveFake(t, Options{StreamMaxAge: 1500 * time.Millisecond})

	dom := string(chromium(t, bin, url, "--dump-dom"))
	checkRendered(t, dom)
	if !regexp.MustCompile(`data-mode="(live|wait)"`).MatchString(dom) {
		t.Errorf("the page did not use the event stream: %s", regexp.MustCompile(`<div class="live"[^>]*>`).FindString(dom))
	}

	out := os.Getenv("SLUICE_ARTIFACTS")
	if out == "" {
		out = t.TempDir()
	} else if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	shot := filepath.Join(out, "web-status.png")
	chromium(t, bin, url, "--window-size=1280,900", "--screenshot="+shot)
	b, err := os.ReadFile(shot)
	if err != nil {
		t.Fatalf("no screenshot: %v", err)
	}
	if !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("%s is not a PNG", shot)
	}
	t.Logf("screenshot of the status page: %s", shot)
}

func TestBrowserFallsBackToPolling(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test skipped in -short mode")
	}
	bin := chromiumPath(t)
	url := serveFake(t, Options{MaxStreams: -1})
	dom := string(chromium(t, bin, url, "--dump-dom"))
	checkRendered(t, dom)
	if !strings.Contains(dom, `data-mode="polling"`) {
		t.Errorf("the page is not polling: %s", regexp.MustCompile(`<div class="live"[^>]*>`).FindString(dom))
	}
}
