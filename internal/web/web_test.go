package web

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"html"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"sluice/internal/clock"
	"sluice/internal/metrics"
	"sluice/internal/status"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			os.Stderr.WriteString("goleak: " + err.Error() + "\n")
			code = 1
		}
	}
	os.Exit(code)
}

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// newTestServer returns a Server over a fake source and fake clock, its
// handler served by an httptest server, and a client that leaves no idle
// connections behind.
func newTestServer(t *testing.T, o Options) (*Server, *httptest.Server, *http.Client) {
	t.Helper()
	if o.Source == nil {
		o.Source = newFakeSource()
	}
	if o.Clock == nil {
		o.Clock = clock.NewFake(t0)
	}
	s := New(o)
	ts := httptest.NewServer(s.Handler())
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	t.Cleanup(func() {
		s.Close()
		ts.Close()
		c.CloseIdleConnections()
	})
	return s, ts, c
}

func get(t *testing.T, c *http.Client, method, url string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

func TestStatusJSON(t *testing.T) {
	clk := clock.NewFake(t0)
	s, ts, c := newTestServer(t, Options{Clock: clk})
	s.sample()
	clk.Advance(2 * time.Second)
	s.sample()

	resp, body := get(t, c, "GET", ts.URL+"/status.json")
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q", ct)
	}
	if cc := resp.Header.Get("Cache-Control"); cc != "no-store" {
		t.Errorf("Cache-Control = %q", cc)
	}
	var st status.Status
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatalf("decoding: %v\n%s", err, body)
	}
	// The fake's second call: its figures for n=2.
	if st.Version != "v0.9.0-test" || st.Pool == nil || len(st.Pool.Slots) != 12 || len(st.Classes) != 4 {
		t.Fatalf("unexpected status: %+v", st)
	}
	if c := st.Classes[1]; c.Name != "relay-omega" || c.Incoming != 102 || c.IncomingCap != 400 || c.TotalCap != 500 {
		t.Errorf("class = %+v", c)
	}
	if d := st.Refusals[0]; d.Rule != "per-client" || d.Key != "203.0.113.99" || d.Count != 101 || d.Limit != 100 ||
		d.Algorithm != "smooth" || d.Verdict != "DEFER" || d.Period != "1m" {
		t.Errorf("refusal = %+v", d)
	}
	if len(st.History) != 2 {
		t.Fatalf("history = %+v, want 2 samples", st.History)
	}
	h := st.History[1]
	// Totals for n=1 and n=2: decisions 1038 -> 1078, refusals 12 -> 14, over 2 s.
	if h.T != t0.Add(2*time.Second).UnixMilli() || h.Decisions != 20 || h.Refusals != 1 || h.Slots != 12 || h.Busy != 4 {
		t.Errorf("sample = %+v", h)
	}
	if st.History[0].Decisions != 0 {
		t.Errorf("first sample has a rate without a previous one: %+v", st.History[0])
	}
	for _, secret := range []string{"hunter2", "p4ss"} {
		if strings.Contains(body, secret) {
			t.Errorf("status.json shows the secret %q", secret)
		}
	}
	if !strings.Contains(body, `redis://***@10.0.0.5:6379/0`) {
		t.Errorf("redacted address missing: %s", body)
	}

	resp, body = get(t, c, "HEAD", ts.URL+"/status.json")
	if resp.StatusCode != 200 || body != "" || resp.ContentLength <= 0 {
		t.Errorf("HEAD: status %d, body %q, length %d", resp.StatusCode, body, resp.ContentLength)
	}
}

func TestStatusJSONSamplesOnDemandBeforeServe(t *testing.T) {
	src := newFakeSource()
	_, ts, c := newTestServer(t, Options{Source: src})
	resp, body := get(t, c, "GET", ts.URL+"/status.json")
	if resp.StatusCode != 200 || !strings.Contains(body, `"relay-omega"`) {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	get(t, c, "GET", ts.URL+"/status.json")
	if n := src.Calls(); n != 1 {
		t.Errorf("Source called %d times for two requests, want 1 (served from the sample)", n)
	}
}

func TestStatusIsTrimmed(t *testing.T) {
	src := SourceFunc(func() status.Status {
		st := status.Status{Pool: &status.Pool{Slots: make([]status.Slot, 10)}}
		st.Talkers = make([]status.Talker, 9)
		st.Refusals = make([]status.Refusal, 9)
		return st
	})
	s, _, _ := newTestServer(t, Options{Source: src, MaxRows: 3, MaxSlots: 4})
	st := s.current().st
	if len(st.Talkers) != 3 || len(st.Refusals) != 3 || len(st.Pool.Slots) != 4 {
		t.Errorf("trimmed to %d talkers, %d refusals, %d slots; want 3, 3, 4", len(st.Talkers), len(st.Refusals), len(st.Pool.Slots))
	}
	if st.Now.IsZero() {
		t.Error("Now not filled in from the clock")
	}
}

// readEvent reads one server-sent event: its fields in order, up to the
// blank line.
func readEvent(t *testing.T, r *bufio.Reader) []string {
	t.Helper()
	var lines []string
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("reading event stream after %q: %v", lines, err)
		}
		line = strings.TrimSuffix(line, "\n")
		if line == "" {
			return lines
		}
		lines = append(lines, line)
	}
}

func TestEventsFraming(t *testing.T) {
	clk := clock.NewFake(t0)
	s, ts, c := newTestServer(t, Options{Clock: clk})
	s.sample()
	resp, err := c.Get(ts.URL + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type = %q", ct)
	}
	r := bufio.NewReader(resp.Body)
	if got := readEvent(t, r); len(got) != 1 || got[0] != "retry: 2000" {
		t.Fatalf("preamble = %q", got)
	}
	decode := func(ev []string, wantID string) status.Status {
		t.Helper()
		if len(ev) != 3 || ev[0] != "id: "+wantID || ev[1] != "event: status" || !strings.HasPrefix(ev[2], "data: {") {
			t.Fatalf("event = %q, want id: %s, event: status, data: {...}", ev, wantID)
		}
		var st status.Status
		if err := json.Unmarshal([]byte(strings.TrimPrefix(ev[2], "data: ")), &st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	first := decode(readEvent(t, r), "1")
	if len(first.History) != 1 || first.Pool == nil || len(first.Classes) != 4 {
		t.Fatalf("first event: %+v", first)
	}
	if s.Streams() != 1 {
		t.Errorf("Streams() = %d, want 1", s.Streams())
	}

	clk.Advance(time.Second)
	s.sample()
	second := decode(readEvent(t, r), "2")
	if len(second.History) != 1 || second.History[0].T != t0.Add(time.Second).UnixMilli() {
		t.Errorf("second event carries history %+v, want only the new sample", second.History)
	}
	if second.Classes[1].Incoming != first.Classes[1].Incoming+1 {
		t.Errorf("second event did not move: %d then %d", first.Classes[1].Incoming, second.Classes[1].Incoming)
	}

	// A viewer that missed frames gets every sample it has not seen.
	clk.Advance(time.Second)
	s.sample()
	clk.Advance(time.Second)
	s.sample()
	var got []int64
	for len(got) < 2 {
		ev := readEvent(t, r)
		st := decode(ev, strings.TrimPrefix(ev[0], "id: "))
		for _, h := range st.History {
			got = append(got, h.T)
		}
	}
	if want := []int64{t0.Add(2 * time.Second).UnixMilli(), t0.Add(3 * time.Second).UnixMilli()}; got[0] != want[0] || got[1] != want[1] {
		t.Errorf("samples %v, want %v", got, want)
	}
}

func TestEventsHeadDoesNotStream(t *testing.T) {
	s, ts, c := newTestServer(t, Options{})
	resp, body := get(t, c, "HEAD", ts.URL+"/events")
	if resp.StatusCode != 200 || body != "" || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Errorf("HEAD /events: %d %q %v", resp.StatusCode, body, resp.Header)
	}
	waitFor(t, "streams to close", func() bool { return s.Streams() == 0 })
}

// waitFor polls cond until it holds; the test's own deadline bounds it.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		if dl, ok := t.Deadline(); ok && time.Until(dl) < time.Second {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestEventStreamsAreCapped(t *testing.T) {
	s, ts, c := newTestServer(t, Options{MaxStreams: 2})
	open := func() (*http.Response, *bufio.Reader) {
		resp, err := c.Get(ts.URL + "/events")
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 200 {
			resp.Body.Close()
			t.Fatalf("stream refused: %d", resp.StatusCode)
		}
		r := bufio.NewReader(resp.Body)
		readEvent(t, r)
		readEvent(t, r)
		return resp, r
	}
	a, _ := open()
	b, _ := open()
	defer b.Body.Close()
	resp, body := get(t, c, "GET", ts.URL+"/events")
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("third stream: %d %q, want 503 with Retry-After", resp.StatusCode, body)
	}
	a.Body.Close()
	waitFor(t, "a stream slot to free", func() bool { return s.Streams() < 2 })
	d, _ := open()
	d.Body.Close()
}

func TestEventStreamsDisabled(t *testing.T) {
	_, ts, c := newTestServer(t, Options{MaxStreams: -1})
	if resp, _ := get(t, c, "GET", ts.URL+"/events"); resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("status %d, want 503", resp.StatusCode)
	}
}

func TestEventStreamEndsAfterMaxAge(t *testing.T) {
	clk := clock.NewFake(t0)
	_, ts, c := newTestServer(t, Options{Clock: clk, StreamMaxAge: time.Minute})
	resp, err := c.Get(ts.URL + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	readEvent(t, r)
	readEvent(t, r)
	waitFor(t, "the stream's timer", func() bool { return clk.Timers() == 1 })
	clk.Advance(time.Minute)
	if b, err := io.ReadAll(r); err != nil || len(b) != 0 {
		t.Fatalf("after max age: %q, %v; want a clean end", b, err)
	}
}

func TestOnlyGetAndHead(t *testing.T) {
	reg := prometheus.NewRegistry()
	_, ts, c := newTestServer(t, Options{Gatherer: reg})
	for _, path := range []string{"/", "/status.json", "/events", "/metrics", "/app.js", "/nowhere"} {
		for _, m := range []string{"POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE"} {
			resp, _ := get(t, c, m, ts.URL+path)
			if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET, HEAD" {
				t.Errorf("%s %s: %d, Allow %q; want 405, GET, HEAD", m, path, resp.StatusCode, resp.Header.Get("Allow"))
			}
		}
	}
}

func TestSecurityHeaders(t *testing.T) {
	_, ts, c := newTestServer(t, Options{Gatherer: prometheus.NewRegistry()})
	for _, path := range []string{"/", "/status.json", "/metrics", "/app.js", "/style.css", "/favicon.svg", "/nowhere"} {
		resp, _ := get(t, c, "GET", ts.URL+path)
		h := resp.Header
		if csp := h.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") {
			t.Errorf("%s: Content-Security-Policy %q", path, csp)
		}
		if h.Get("X-Content-Type-Options") != "nosniff" || h.Get("X-Frame-Options") != "DENY" || h.Get("Referrer-Policy") != "no-referrer" {
			t.Errorf("%s: headers %v", path, h)
		}
	}
}

func TestPagesAndAssets(t *testing.T) {
	_, ts, c := newTestServer(t, Options{})
	resp, body := get(t, c, "GET", ts.URL+"/")
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/html; charset=utf-8" || resp.Header.Get("Cache-Control") != "no-store" || body == "" {
		t.Errorf("GET /: %d %q %q, %d bytes", resp.StatusCode, resp.Header.Get("Content-Type"), resp.Header.Get("Cache-Control"), len(body))
	}
	if head, hbody := get(t, c, "HEAD", ts.URL+"/"); head.StatusCode != 200 || hbody != "" || head.ContentLength != int64(len(body)) {
		t.Errorf("HEAD /: %d, %d bytes, length %d", head.StatusCode, len(hbody), head.ContentLength)
	}
	for path, ctype := range map[string]string{
		"/app.js":      "text/javascript; charset=utf-8",
		"/style.css":   "text/css; charset=utf-8",
		"/favicon.svg": "image/svg+xml",
	} {
		resp, body := get(t, c, "GET", ts.URL+path)
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != ctype || body == "" {
			t.Errorf("GET %s: %d %q, %d bytes", path, resp.StatusCode, resp.Header.Get("Content-Type"), len(body))
			continue
		}
		etag := resp.Header.Get("ETag")
		req, _ := http.NewRequest("GET", ts.URL+path, nil)
		req.Header.Set("If-None-Match", etag)
		resp2, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp2.Body.Close()
		if etag == "" || resp2.StatusCode != http.StatusNotModified {
			t.Errorf("GET %s with If-None-Match %q: %d, want 304", path, etag, resp2.StatusCode)
		}
		head, hbody := get(t, c, "HEAD", ts.URL+path)
		if head.StatusCode != 200 || hbody != "" || head.ContentLength != int64(len(body)) {
			t.Errorf("HEAD %s: %d, %d bytes, length %d", path, head.StatusCode, len(hbody), head.ContentLength)
		}
	}
	for _, path := range []string{"/index.html", "/assets/app.js", "/nowhere", "/metrics"} {
		if resp, _ := get(t, c, "GET", ts.URL+path); resp.StatusCode != 404 {
			t.Errorf("GET %s: %d, want 404", path, resp.StatusCode)
		}
	}
}

// TestPageFirstPaint: the page as served already shows the newest
// sample's facts, classes and doors (a tool that runs no script sees
// them), carries the whole status for app.js, and escapes what peers and
// configurations chose.
func TestPageFirstPaint(t *testing.T) {
	src := SourceFunc(func() status.Status {
		st := newFakeSource().Status()
		st.Classes = append(st.Classes, status.Class{Name: `<b>"evil"</b>`, Incoming: 1234, IncomingCap: 1500})
		return st
	})
	_, ts, c := newTestServer(t, Options{Source: src})
	_, body := get(t, c, "GET", ts.URL+"/")
	for _, want := range []string{
		`<tr data-class="relay-omega"><td class="mono">relay-omega</td><td class="in"><div class="meter"><div class="bar"><span></span></div><span class="fig">101 / 400</span></div></td><td class="total"><div class="meter"><div class="bar"><span></span></div><span class="fig">141 / 500</span></div></td></tr>`,
		`<tr data-class="bulk-senders"><td class="mono">bulk-senders</td><td class="in"><div class="meter"><div class="bar hot"><span></span></div><span class="fig">38 / 40</span></div>`,
		`<div class="bar nocap"><span></span></div><span class="fig">5 / ∞</span>`,
		`<span class="fig">1,234 / 1,500</span>`,
		`<td class="mono">&lt;b&gt;&#34;evil&#34;&lt;/b&gt;</td>`,
		`<span class="door"><b>policy</b> 127.0.0.1:10031 · 7 conn</span>`,
		`<span class="door"><b>redis</b> redis://***@10.0.0.5:6379/0 · 0 conn</span>`,
		`<div><dt>version</dt><dd>v0.9.0-test</dd></div>`,
		`<div><dt>up</dt><dd>1d2h</dd></div>`,
		`<div><dt>config</dt><dd>gen 3, 40m01s ago</dd></div>`,
		`<div><dt>store</dt><dd>redis, 12,001 / 100,000 keys</dd></div>`,
		`<span id="live-text">snapshot `,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the served page lacks %s", want)
		}
	}
	if strings.Contains(body, "No classes.</p>") && !strings.Contains(body, `id="classes-empty" hidden>`) {
		t.Error(`the page says "No classes." beside its classes`)
	}
	for _, secret := range []string{"hunter2", "p4ss", "<b>\"evil"} {
		if strings.Contains(body, secret) {
			t.Errorf("the page holds %q", secret)
		}
	}
	m := regexp.MustCompile(`<body data-initial="([^"]*)">`).FindStringSubmatch(body)
	if m == nil {
		t.Fatal("no data-initial on the body")
	}
	var st status.Status
	if err := json.Unmarshal([]byte(html.UnescapeString(m[1])), &st); err != nil {
		t.Fatalf("data-initial is not the status: %v", err)
	}
	if len(st.Classes) != 5 || st.Pool == nil || len(st.Pool.Slots) != 12 || len(st.History) != 1 {
		t.Errorf("data-initial's status: %d classes, pool %v, %d samples", len(st.Classes), st.Pool != nil, len(st.History))
	}
}

// The page must load nothing from elsewhere: no CDN, no external font, no
// inline script or style (which the CSP would block anyway).
func TestAssetsAreSelfContained(t *testing.T) {
	ext := regexp.MustCompile(`(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}`)
	for name, a := range assets {
		for _, m := range ext.FindAllString(string(a.body), -1) {
			if m != "http://www.w3.org" { // the SVG namespace name, never fetched
				t.Errorf("%s refers to %q", name, m)
			}
		}
	}
	html := string(assets["index.html"].body)
	if strings.Contains(html, "<style") || strings.Contains(html, "style=") || regexp.MustCompile(`<script(?:\s[^>]*)?>[^<]`).MatchString(html) {
		t.Error("index.html has inline style or script")
	}
	for _, s := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "eval(", "document.write"} {
		if strings.Contains(string(assets["app.js"].body), s) {
			t.Errorf("app.js uses %s", s)
		}
	}
}

func TestMetricsEndpoint(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.PartDecisions)
	if err != nil {
		t.Fatal(err)
	}
	m.Decision("policy", "per-client", "DEFER")
	_, ts, c := newTestServer(t, Options{Gatherer: reg})
	resp, body := get(t, c, "GET", ts.URL+"/metrics")
	if resp.StatusCode != 200 || !strings.Contains(body, `sluice_decisions_total{door="policy",rule="per-client",verdict="DEFER"} 1`) {
		t.Fatalf("GET /metrics: %d\n%s", resp.StatusCode, body)
	}
}

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"redis://sluice:hunter2@10.0.0.5:6379/0": "redis://***@10.0.0.5:6379/0",
		"rediss://:pw@host:6380":                 "rediss://***@host:6380",
		"user:secret@host:6379":                  "***@host:6379",
		"127.0.0.1:10023":                        "127.0.0.1:10023",
		"unix:/run/sluice/policy.sock":           "unix:/run/sluice/policy.sock",
		"4.7.1 <bob@example.com>: rate limited":  "4.7.1 <bob@example.com>: rate limited",
		"see redis://a:b@x and redis://c:d@y":    "see redis://***@x and redis://***@y",
	} {
		if got := Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestHistoryRingKeepsTheNewest(t *testing.T) {
	clk := clock.NewFake(t0)
	s, _, _ := newTestServer(t, Options{Clock: clk, History: 3})
	for range 5 {
		s.sample()
		clk.Advance(time.Second)
	}
	h := s.current().hist
	if len(h) != 3 {
		t.Fatalf("history holds %d samples, want 3", len(h))
	}
	for i, smp := range h {
		if want := t0.Add(time.Duration(i+2) * time.Second).UnixMilli(); smp.T != want {
			t.Errorf("sample %d at %d, want %d", i, smp.T, want)
		}
	}
}

func TestRateAfterCountersReset(t *testing.T) {
	if got := rate(5, 100, 1); got != 5 {
		t.Errorf("rate after a reset = %v, want 5", got)
	}
	if got := rate(130, 100, 2); got != 15 {
		t.Errorf("rate = %v, want 15", got)
	}
}

func TestSamplerFollowsTheClock(t *testing.T) {
	clk := clock.NewFake(t0)
	src := newFakeSource()
	s := New(Options{Source: src, Clock: clk})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(l) }()
	for i := 1; i <= 3; i++ {
		waitFor(t, "the sampler's timer", func() bool { return clk.Timers() == 1 && src.Calls() == i })
		clk.Advance(time.Second)
	}
	waitFor(t, "the fourth sample", func() bool { return src.Calls() == 4 })
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, ErrServerClosed) {
		t.Fatalf("Serve returned %v, want ErrServerClosed", err)
	}
	if n := len(s.current().hist); n != 4 {
		t.Errorf("history holds %d samples, want 4", n)
	}
	if clk.Timers() != 0 {
		t.Error("the sampler's timer is still armed after Shutdown")
	}
}

func TestShutdownEndsStreams(t *testing.T) {
	s := New(Options{Source: newFakeSource(), StatusOnTCP: true})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(l) }()
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	defer c.CloseIdleConnections()
	var bodies []io.ReadCloser
	for range 3 {
		resp, err := c.Get("http://" + l.Addr().String() + "/events")
		if err != nil {
			t.Fatal(err)
		}
		r := bufio.NewReader(resp.Body)
		readEvent(t, r)
		readEvent(t, r)
		bodies = append(bodies, resp.Body)
	}
	// Shutdown must not wait for the viewers: the streams end by themselves.
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if err := <-done; !errors.Is(err, ErrServerClosed) {
		t.Fatalf("Serve returned %v", err)
	}
	for _, b := range bodies {
		if _, err := io.ReadAll(b); err != nil {
			t.Errorf("stream did not end cleanly: %v", err)
		}
		b.Close()
	}
	if s.Streams() != 0 {
		t.Errorf("%d streams still counted", s.Streams())
	}
	// Serving again after Shutdown is refused.
	l2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Serve(l2); !errors.Is(err, ErrServerClosed) {
		t.Errorf("Serve after Shutdown: %v", err)
	}
	runtime.Gosched()
}

// The server's ReadTimeout must not end an event stream: the connection's
// background read would hit the deadline and cancel the request.
func TestEventStreamOutlivesReadTimeout(t *testing.T) {
	clk := clock.NewFake(t0)
	s := New(Options{Source: newFakeSource(), Clock: clk, StatusOnTCP: true})
	s.srv.ReadTimeout = 50 * time.Millisecond
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(l) }()
	defer func() {
		s.Close()
		<-done
	}()
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	defer c.CloseIdleConnections()
	resp, err := c.Get("http://" + l.Addr().String() + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	readEvent(t, r)
	readEvent(t, r)
	time.Sleep(4 * s.srv.ReadTimeout) // well past the read deadline
	s.sample()
	if ev := readEvent(t, r); len(ev) != 3 || ev[1] != "event: status" {
		t.Fatalf("after the read timeout: %q", ev)
	}
}

// TestStatusJSONIsFresh: /status.json shows what the daemon did since the
// last sample (sluice status lagged the decisions by up to a sample), yet
// viewers asking within Options.Fresh share one status.
func TestStatusJSONIsFresh(t *testing.T) {
	clk := clock.NewFake(t0)
	src := newFakeSource()
	s, ts, c := newTestServer(t, Options{Source: src, Clock: clk})
	s.sample() // the fake's call 1: relay-omega has 101 incoming
	decode := func() status.Status {
		t.Helper()
		_, body := get(t, c, "GET", ts.URL+"/status.json")
		var st status.Status
		if err := json.Unmarshal([]byte(body), &st); err != nil {
			t.Fatalf("decoding: %v\n%s", err, body)
		}
		return st
	}
	if st := decode(); st.Classes[1].Incoming != 101 || src.Calls() != 1 {
		t.Fatalf("at the sample's instant: incoming %d after %d calls, want the sample's 101 after 1", st.Classes[1].Incoming, src.Calls())
	}
	clk.Advance(100 * time.Millisecond)
	st := decode()
	if st.Classes[1].Incoming != 102 || src.Calls() != 2 {
		t.Fatalf("100 ms after the sample: incoming %d after %d calls, want a fresh 102 after 2", st.Classes[1].Incoming, src.Calls())
	}
	if len(st.History) != 1 {
		t.Errorf("the fresh status carries %d history samples, want the sampler's 1", len(st.History))
	}
	decode()
	clk.Advance(99 * time.Millisecond)
	decode()
	if n := src.Calls(); n != 2 {
		t.Errorf("Source called %d times, want 2: requests within Fresh of a fresh status share it", n)
	}
}

// TestPagePoolError: a pool the daemon cannot read shows on the page as
// the reason and what to change, in the first paint.
func TestPagePoolError(t *testing.T) {
	src := SourceFunc(func() status.Status {
		return status.Status{PoolError: "cannot read the multiplexor's pool at /x: permission denied; start it with -a PATH"}
	})
	_, ts, c := newTestServer(t, Options{Source: src})
	_, body := get(t, c, "GET", ts.URL+"/")
	if !strings.Contains(body, `<p class="note bad" id="pool-error">cannot read the multiplexor&#39;s pool at /x: permission denied; start it with -a PATH</p>`) {
		t.Errorf("the page does not show the pool's error:\n%s", body)
	}
	_, body = get(t, c, "GET", ts.URL+"/status.json")
	if !strings.Contains(body, `"pool_error":"cannot read the multiplexor's pool at /x`) {
		t.Errorf("status.json lacks pool_error: %s", body)
	}
}
