package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"sluice/internal/config"
	"sluice/internal/milter/miltest"
	"sluice/internal/milter/wire"
	"sluice/internal/status"
	"sluice/internal/testutil/logbuf"
)

// statusConfig is a daemon with its web server, policy and milter doors
// on unix sockets in dir: the class loopback capped at 2 incoming
// sessions, and the policy rule "r" allowing 2 messages a minute per
// sender.
func statusConfig(dir string) string {
	return fmt.Sprintf(`state_dir = %q
[[class]]
name = "loopback"
match = ["127.0.0.0/8"]
refuse = 2
[[class]]
name = "rest"
match = ["*"]
[anvil]
enabled = false
[policy]
listen = ["unix:policy"]
[[policy.rule]]
name = "r"
count = "messages"
key = ["sender"]
limit = ["2/60s exact"]
action = "DEFER_IF_PERMIT 4.7.1 slow down, {key}"
[milter]
listen = ["unix:milter"]
[web]
listen = ["unix:web"]
`, dir)
}

// startServe runs `sluice serve -c path` in-process until the test ends.
func startServe(t *testing.T, path string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	var errb logbuf.Buffer
	go func() { done <- Main(ctx, []string{"serve", "-c", path, "-grace", "5s"}, &bytes.Buffer{}, &errb) }()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("serve exited %d:\n%s", code, errb.String())
		}
	})
	until(t, "the daemon answering `sluice status`", func() (bool, string) {
		select {
		case code := <-done:
			done <- code
			t.Fatalf("serve exited %d:\n%s", code, errb.String())
		default:
		}
		code, out, errs := run("status", "-c", path)
		return code == 0, out + errs
	})
}

// until polls cond until it holds. The daemon's web server samples once
// a second, so `sluice status` follows the traffic by up to a sample; the
// bound only keeps a broken build from hanging.
func until(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	var last string
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(25 * time.Millisecond) {
		var ok bool
		if ok, last = cond(); ok {
			return
		}
	}
	t.Fatalf("%s never happened; last seen:\n%s", what, last)
}

// TestStatusLive: `sluice status` against a running daemon shows what
// the test drove through it: a held milter session against its class
// cap, and policy refusals with their explanation.
func TestStatusLive(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sluice.toml")
	if err := os.WriteFile(path, []byte(statusConfig(dir)), 0o644); err != nil {
		t.Fatal(err)
	}
	startServe(t, path)

	// Five messages from one sender against 2 a minute, by raw writes.
	c, err := net.Dial("unix", filepath.Join(dir, "policy"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	var actions []string
	for i := range 5 {
		fmt.Fprintf(c, "request=smtpd_access_policy\nprotocol_state=END-OF-MESSAGE\nclient_address=192.0.2.7\nsender=flood@example.org\ninstance=i%d\n\n", i)
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
		verb, _, _ := strings.Cut(strings.TrimPrefix(strings.TrimSpace(line), "action="), " ")
		actions = append(actions, verb)
	}
	if got := strings.Join(actions, " "); got != "DUNNO DUNNO DEFER_IF_PERMIT DEFER_IF_PERMIT DEFER_IF_PERMIT" {
		t.Fatalf("policy answers: %s", got)
	}
	// One milter session held open in the loopback class.
	m, err := miltest.Dial("unix", filepath.Join(dir, "milter"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	if err := m.Negotiate(6, wire.AllActions, wire.AllProtocol); err != nil {
		t.Fatal(err)
	}
	if rep, err := m.Command(&wire.Connect{Host: "[127.0.0.1]", Family: wire.FamilyInet, Port: 4711, Addr: "127.0.0.1"}); err != nil || rep.Code() != wire.RespContinue {
		t.Fatalf("milter CONNECT: %v %v", rep, err)
	}

	var out string
	until(t, "the status showing the held session", func() (bool, string) {
		var code int
		var errs string
		code, out, errs = run("status", "-c", path)
		return code == 0 && regexp.MustCompile(`(?m)^  loopback +1/2 +1/-$`).MatchString(out), out + errs
	})
	for _, re := range []string{
		`(?m)^sluice \S.* · up \d+s · config generation 1, loaded \d+s ago$`,
		`(?m)^store +memory · \d+ / 10,000,000 keys · healthy$`,
		`(?m)^traffic +6 decisions · 3 refused since start$`,
		`(?m)^doors +policy +unix:policy +1 conn$`,
		`(?m)^ +milter +unix:milter +1 conn$`,
		`(?m)^ +web +unix:web +0 conns$`,
		`(?m)^  rest +0/- +0/-$`,
		`(?m)^  sender=flood@example\.org +r +2/2 per 60s +\S+/min$`,
		`(?m)^  \d+s ago +policy +r +sender=flood@example\.org +2/2 per 60s +exact +DEFER_IF_PERMIT +DEFER_IF_PERMIT 4\.7\.1 slow down, sender=flood@example\.org$`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("output lacks %s:\n%s", re, out)
		}
	}
	t.Logf("sluice status:\n%s", out)
	if n := strings.Count(out, "ago  policy"); n != 3 {
		t.Errorf("%d policy refusals listed, want 3:\n%s", n, out)
	}
	if strings.Contains(out, "pool") || strings.Contains(out, "FAILED") {
		t.Errorf("a pool or a failed reload shown:\n%s", out)
	}

	// The same daemon named by its socket, and as JSON.
	code, raw, errs := run("status", "-json", "-u", "unix:"+filepath.Join(dir, "web"))
	if code != 0 {
		t.Fatalf("status -json -u: %d %s", code, errs)
	}
	var st status.Status
	if err := json.Unmarshal([]byte(raw), &st); err != nil {
		t.Fatalf("-json output: %v\n%s", err, raw)
	}
	if st.Version != versionString() || len(st.Classes) != 2 || st.Classes[0].IncomingCap != 2 || len(st.Refusals) != 3 {
		t.Errorf("-json: %+v", st)
	}
}

func TestStatusErrors(t *testing.T) {
	dir := t.TempDir()
	noWeb := filepath.Join(dir, "noweb.toml")
	if err := os.WriteFile(noWeb, []byte(fmt.Sprintf("state_dir = %q\n[web]\nlisten = []\n", dir)), 0o644); err != nil {
		t.Fatal(err)
	}
	down := filepath.Join(dir, "down.toml")
	if err := os.WriteFile(down, []byte(statusConfig(dir)), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		// No flags: the default runtime directory, this package's own
		// (privateDefaults), where nothing serves, whatever the host runs.
		{[]string{"status", "-t", "1s"}, 1, "cannot reach the daemon"},
		{[]string{"status", "-c", noWeb}, 1, "sluice status needs [web] listen in the config (" + noWeb + " has none)"},
		{[]string{"status", "-c", down}, 1, "sluice status: unix:" + filepath.Join(dir, "web") + ": dial unix"},
		{[]string{"status", "-c", down}, 1, "cannot reach the daemon"},
		{[]string{"status", "-u", "unix:" + filepath.Join(dir, "nothing")}, 1, "cannot reach the daemon"},
		{[]string{"status", "-u", "ftp://x"}, 1, `"ftp://x": want http://HOST:PORT, unix:PATH or inet:HOST:PORT`},
		{[]string{"status", "-c", filepath.Join(dir, "missing.toml")}, 1, "the configuration has errors"},
		{[]string{"status", "extra"}, 2, "unexpected arguments: extra"},
		{[]string{"status", "-t", "x"}, 2, "invalid value"},
	} {
		code, out, errs := run(c.args...)
		if code != c.code || !strings.Contains(errs, c.want) || out != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr:\n%s\nwant exit %d and %q", c.args, code, out, errs, c.code, c.want)
		}
	}
}

// TestStatusHTTPErrors: a web server that is not sluice's, or that
// answers an error, is reported as such.
func TestStatusHTTPErrors(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, reply := range []string{
			"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
			"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello",
		} {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_, _ = bufio.NewReader(c).ReadString('\n')
			_, _ = c.Write([]byte(reply))
			c.Close()
		}
	}()
	addr := l.Addr().String()
	if code, _, errs := run("status", "-u", "http://"+addr); code != 1 || !strings.Contains(errs, "GET /status.json: 404 Not Found") {
		t.Errorf("404: %d %s", code, errs)
	}
	if code, out, errs := run("status", "-json", "-u", "inet:"+addr); code != 1 || out != "" || !strings.Contains(errs, "inet:"+addr+" did not answer with a status") {
		t.Errorf("not JSON: %d %q %s", code, out, errs)
	}
	<-done
}

func TestStatusListenTarget(t *testing.T) {
	cfg := config.Default()
	cfg.StateDir = "/var/lib/sluice"
	cfg.RuntimeDir = "/run/sluice"
	for in, want := range map[string]string{
		"unix:web":           "unix:/run/sluice/web",
		"unix:/run/web.sock": "unix:/run/web.sock",
		"inet:127.0.0.1:80":  "http://127.0.0.1:80",
		"inet:0.0.0.0:8025":  "http://127.0.0.1:8025",
		"inet:[::]:8025":     "http://[::1]:8025",
		"inet:[::1]:8025":    "http://[::1]:8025",
		"inet:localhost:1":   "http://localhost:1",
	} {
		if got := listenTarget(cfg, in); got != want {
			t.Errorf("listenTarget(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestWriteStatus renders a status with every part: the pool line with
// its slot letters, busy and killed slots, a failed reload, a failing
// store, a full class, and text from peers with control characters.
func TestWriteStatus(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	st := status.Status{
		Version: "1.2.3",
		Now:     now,
		Started: now.Add(-(2*time.Hour + 5*time.Minute)),
		Reload:  status.Reload{Generation: 3, At: now.Add(-90 * time.Second), LastFailed: now.Add(-10 * time.Second)},
		Store:   &status.Store{Backend: "redis", Keys: 1234567},
		Doors:   []status.Door{{Name: "policy", Listen: []string{"unix:policy", "inet:127.0.0.1:10040"}, Conns: 12}},
		Pool: &status.Pool{
			Slots: []status.Slot{
				{State: status.SlotBusy, PID: 101, Cmd: "scan", Since: now.Add(-12 * time.Second), Tag: "scanning Q1\x1b[2J"},
				{State: status.SlotBusy, PID: 102, Cmd: "relayok", Since: now.Add(-time.Second)},
				{State: status.SlotIdle, PID: 103, Cmd: "scan"},
				{State: status.SlotStopped},
				{State: status.SlotKilled, PID: 105},
			},
			Queued: 1, QueueSize: 10, Msgs: 4321, Activations: 9,
		},
		Classes: []status.Class{{Name: "partners", Incoming: 20, Total: 25, IncomingCap: 20, TotalCap: 30}},
		Talkers: []status.Talker{{Rule: "rate", Key: "sender=a\tb@example.org", Count: 90, Limit: 100, Period: "1m", Rate: 1.5}},
		Refusals: []status.Refusal{{At: now.Add(-3 * time.Minute), Door: "milter", Rule: "class", Key: "partners", Count: 20, Limit: 20,
			Algorithm: "concurrency", Verdict: "421", Reply: "421 4.7.0 full\r\n"}},
		Totals: status.Totals{Decisions: 1000000, Refusals: 7},
	}
	var b bytes.Buffer
	writeStatus(&b, &st)
	out := b.String()
	for _, want := range []string{
		"sluice 1.2.3 · up 2h05m · config generation 3, loaded 1m30s ago\n",
		"!! the last reload FAILED 10s ago",
		"store    redis · 1,234,567 keys · FAILING\n",
		"traffic  1,000,000 decisions · 7 refused since start\n",
		"doors    policy  unix:policy, inet:127.0.0.1:10040  12 conns\n",
		"pool     2/5 busy  [BBISK]  2 busy · 1 idle · 1 stopped · 1 killed · queue 1/10 · 4,321 msgs · 9 activations\n",
		"           slot 0  B  pid 101  scan  12s  scanning Q1?[2J\n",
		"           slot 1  B  pid 102  relayok  1s\n",
		"           slot 4  K  pid 105\n",
		"  partners  20/20            25/30  FULL\n",
		"  sender=a?b@example.org  rate  90/100 per 1m  1.5/s\n",
		"  3m ago  milter  class  partners  20/20        concurrency  421      421 4.7.0 full??\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "\x1b") || strings.Contains(out, "slot 2") || strings.Contains(out, "slot 3") {
		t.Errorf("escape character or idle slots printed:\n%s", out)
	}

	// An empty status says so, part by part.
	b.Reset()
	writeStatus(&b, &status.Status{Now: now})
	for _, want := range []string{"classes: none", "top talkers: nobody is talking", "recent refusals: none"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("empty status lacks %q:\n%s", want, b.String())
		}
	}
}

// Rows past the limit of a section are counted, not printed.
func TestWriteStatusLongLists(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	st := status.Status{Now: now}
	for i := range statusTalkers + 2 {
		st.Talkers = append(st.Talkers, status.Talker{Rule: "rate", Key: fmt.Sprintf("k%02d", i), Count: 1, Limit: 9, Period: "1m"})
	}
	for i := range statusRefusals + 1 {
		st.Refusals = append(st.Refusals, status.Refusal{At: now, Door: "policy", Rule: fmt.Sprintf("r%02d", i), Key: "k"})
	}
	var b bytes.Buffer
	writeStatus(&b, &st)
	out := b.String()
	for _, want := range []string{
		`(?m)^  k09 .*\n  … 2 more \(sluice status -json\) *\n\nrecent refusals`,
		`(?m)^  0s ago +policy +r09 .*\n  … 1 more \(sluice status -json\) *\n$`,
	} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("lacks %s:\n%s", want, out)
		}
	}
	for _, bad := range []string{"k10", "r10"} {
		if strings.Contains(out, bad) {
			t.Errorf("%s printed past the limit:\n%s", bad, out)
		}
	}
}

func TestStatusFormatting(t *testing.T) {
	for r, want := range map[float64]string{0: "0/s", 2.25: "2.2/s", 0.5: "30.0/min", 0.001: "3.6/h"} {
		if got := rateText(r); got != want {
			t.Errorf("rateText(%v) = %q, want %q", r, got, want)
		}
	}
}

// TestCheckPrintsMilterAndWeb: `sluice check` shows the [milter] and
// [web] sections as understood (the host directories of full.toml moved
// to the test's own: hostFreeConfig).
func TestCheckPrintsMilterAndWeb(t *testing.T) {
	cfg, moved := hostFreeConfig(t, "../config/testdata/good/full.toml")
	code, out, errs := run("check", "-c", cfg)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{
		"milter service: unix:/var/spool/postfix/sluice/milter, inet:127.0.0.1:8891 (sockets mode 0660, group root)\n",
		"at most 10000 sessions; 32 workers run the rules, 2048 events may wait (then: tempfail); idle sessions end after 15m0s; packets up to 1048576 bytes\n",
		"told at CONNECT: 421 4.7.0 class {class} is full ({sessions}/{refuse}); try again later\n",
		"the [[policy.rule]] tables also apply at the milter's stages",
		"web status page: inet:127.0.0.1:8025\n",
		"serves /, /status.json and /metrics (Prometheus)\n",
		"at most 16 live streams; more pages poll /status.json\n",
		"worker pool: asks the multiplexor at /var/spool/MIMEDefang/mimedefang-multiplexor.sock\n",
	} {
		if want = moved.Replace(want); !strings.Contains(out, want) {
			t.Errorf("check output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "is not loopback") {
		t.Errorf("a loopback listener flagged:\n%s", out)
	}

	dir := t.TempDir()
	p := filepath.Join(dir, "s.toml")
	body := fmt.Sprintf("state_dir = %q\n[milter]\nenabled = false\n[web]\nlisten = [\"inet:0.0.0.0:8025\", \"unix:web\"]\nmetrics = false\nmax_streams = 0\n", dir)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs = run("check", "-c", p)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{
		"\nmilter service: off\n",
		"web status page: inet:0.0.0.0:8025, unix:web (sockets mode 0660)\n",
		"!! inet:0.0.0.0:8025 is not loopback",
		"serves / and /status.json; /metrics off\n",
		"live streams off: pages poll /status.json\n",
		"worker pool: none shown (no mux_socket)\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("check output lacks %q:\n%s", want, out)
		}
	}
	if err := os.WriteFile(p, []byte(fmt.Sprintf("state_dir = %q\n[web]\nlisten = []\n", dir)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, out, _ = run("check", "-c", p); !strings.Contains(out, "web status page: off (no [web] listen; `sluice status` needs one)") {
		t.Errorf("check without [web]:\n%s", out)
	}
}
