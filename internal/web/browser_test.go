package web

import (
	"bytes"
	"context"
	"errors"
	"image"
	"image/png"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"sluice/internal/status"
	"strconv"
	"strings"
	"testing"
	"time"

	"sluice/internal/testutil/chromiumtest"
)

// The end-to-end tests load the status page in headless Chromium (the
// Debian package chromium; scripts/test.sh installs it) and read the DOM
// the page's script built from the live feed. SLUICE_CHROMIUM names
// another binary; SLUICE_ARTIFACTS is where the screenshot is kept.

// serveFake starts a web server over a fake, changing source on a
// loopback port (with the status page allowed there: the browser dials
// TCP) and returns the page's URL.
func serveFake(t *testing.T, o Options) string {
	t.Helper()
	if o.Source == nil {
		o.Source = newFakeSource()
	}
	o.StatusOnTCP = true
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
	bin := chromiumtest.Binary(t)
	// Streams end every 1.5 s so that the browser's virtual time can run
	// between them: a stream that never ends holds the page loading.
	url := serveFake(t, Options{StreamMaxAge: 1500 * time.Millisecond})

	dom := string(chromiumtest.Run(t, bin, url, 4*time.Second, "--dump-dom"))
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
	chromiumtest.Run(t, bin, url, 4*time.Second, "--window-size=1280,900", "--screenshot="+shot)
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
	bin := chromiumtest.Binary(t)
	url := serveFake(t, Options{MaxStreams: -1})
	dom := string(chromiumtest.Run(t, bin, url, 4*time.Second, "--dump-dom"))
	checkRendered(t, dom)
	if !strings.Contains(dom, `data-mode="polling"`) {
		t.Errorf("the page is not polling: %s", regexp.MustCompile(`<div class="live"[^>]*>`).FindString(dom))
	}
}

// serveFirstPaintOnly serves src's page on a loopback port with its event
// stream and /status.json held open and never answered, as a slow or
// stuck link would: whatever the browser shows came with the page itself.
func serveFirstPaintOnly(t *testing.T, src Source) string {
	t.Helper()
	s := New(Options{Source: src, StatusOnTCP: true})
	h := s.Handler()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/events" || r.URL.Path == "/status.json" {
			<-r.Context().Done()
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		ts.CloseClientConnections()
		ts.Close()
		s.Close()
	})
	return ts.URL + "/"
}

// pngImage decodes the PNG at path.
func pngImage(t *testing.T, path string) image.Image {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("no screenshot: %v", err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return img
}

// inkDiff is the share of pixels that differ between two screenshots of
// the same size.
func inkDiff(t *testing.T, a, b image.Image) float64 {
	t.Helper()
	if a.Bounds() != b.Bounds() {
		t.Fatalf("screenshots of %v and %v", a.Bounds(), b.Bounds())
	}
	r := a.Bounds()
	n := 0
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			if a.At(x, y) != b.At(x, y) {
				n++
			}
		}
	}
	return float64(n) / float64(r.Dx()*r.Dy())
}

// TestBrowserFirstPaint: with the event stream and /status.json never
// answering, headless Chromium, stopped 2 s after it starts loading,
// shows the doors, the classes, the facts and the pool (app.js drew them
// from the status in the page). The screenshot taken within those 2 s
// differs from one of a daemon with no doors and no classes where the
// data is drawn: a blank first paint ("connecting...") fails. What the
// server renders without any script is TestPageFirstPaint's (headless
// Chromium writes neither --dump-dom nor --screenshot with scripts off).
func TestBrowserFirstPaint(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test skipped in -short mode")
	}
	bin := chromiumtest.Binary(t)
	t.Parallel()
	url := serveFirstPaintOnly(t, newFakeSource())

	dom := string(chromiumtest.FirstPaint(t, bin, url, "--dump-dom"))
	for _, want := range []string{`data-class="relay-omega"`, `data-slot="11"`, `<b>policy</b>`, `<dd>v0.9.0-test</dd>`, "203.0.113.99", `<span id="live-text">snapshot · `} {
		if !strings.Contains(dom, want) {
			t.Errorf("the first paint lacks %s", want)
		}
	}
	if !regexp.MustCompile(`data-updated="\d{4}-`).MatchString(dom) {
		t.Error("app.js did not apply the status the page carries")
	}

	out := os.Getenv("SLUICE_ARTIFACTS")
	if out == "" {
		out = t.TempDir()
	} else if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	empty := serveFirstPaintOnly(t, SourceFunc(func() status.Status { return status.Status{Now: time.Now()} }))
	// The facts, the pool's 12 slots, the 4 classes' rows and meters, the
	// talkers, the refusals and the doors cover far more than 2% of the
	// page; the live indicator's time alone, far less.
	var shot string
	for _, c := range []struct{ name, flag string }{{"script", "--blink-settings=scriptEnabled=true"}} {
		shot = filepath.Join(out, "web-first-paint-"+c.name+".png")
		chromiumtest.FirstPaint(t, bin, url, c.flag, "--window-size=1280,900", "--screenshot="+shot)
		emptyShot := filepath.Join(t.TempDir(), "empty.png")
		chromiumtest.FirstPaint(t, bin, empty, c.flag, "--window-size=1280,900", "--screenshot="+emptyShot)
		if d := inkDiff(t, pngImage(t, shot), pngImage(t, emptyShot)); d < 0.02 {
			t.Errorf("%s: the first paint differs from an empty daemon's in %.2f%% of its pixels: is it blank? (%s)", c.name, 100*d, shot)
		} else {
			t.Logf("%s: %.1f%% of the pixels differ from an empty daemon's", c.name, 100*d)
		}
	}
	t.Logf("first paint: %s", shot)
}
