package app

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"sluice/internal/milter/wire"
	"sluice/internal/status"
	"sluice/internal/throttle"
)

// webConfig is a daemon with every door on a unix socket in dir except
// the web server, on a loopback port: the class loopback (127.0.0.0/8)
// capped at one incoming session, the policy rule "r" allowing 5
// messages a minute per sender, and the throttle policy "relays" for
// every key. The web listener serves the status page on TCP
// (status_on_inet). extra is appended (more [web] keys).
func webConfig(dir, extra string) string {
	return fmt.Sprintf(`state_dir = %q
[[class]]
name = "loopback"
match = ["127.0.0.0/8"]
refuse = 1
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
limit = ["5/60s exact"]
action = "DEFER_IF_PERMIT 4.7.1 slow down, {key}"
[throttle]
listen = ["unix:throttle"]
[[throttle.policy]]
name = "relays"
match = ["*"]
limit = "100/60s"
[milter]
listen = ["unix:milter"]
[web]
listen = ["inet:127.0.0.1:0"]
status_on_inet = true
%s`, dir, extra)
}

// webURL is the base URL of the daemon's web listener.
func webURL(t *testing.T, d *Daemon) string {
	t.Helper()
	for _, bl := range d.listeners {
		if bl.door == "web" {
			return "http://" + bl.l.Addr().String()
		}
	}
	t.Fatal("the daemon has no web listener")
	return ""
}

// httpGet fetches url and returns its body; any status but 200 fails the
// test.
func httpGet(t *testing.T, url string) []byte {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 30 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s: %s", url, resp.Status, b)
	}
	return b
}

// scrape is one reading of /metrics.
type scrape map[string]*dto.MetricFamily

func scrapeMetrics(t *testing.T, base string) scrape {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(httpGet(t, base+"/metrics"))))
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	return fams
}

// value is the counter or gauge value, or the histogram's sample count,
// of the series of name whose labels include want ("k=v" pairs); 0 when
// there is none.
func (s scrape) value(name string, want ...string) float64 {
	f := s[name]
	if f == nil {
		return 0
	}
	var sum float64
next:
	for _, m := range f.Metric {
		for _, kv := range want {
			k, v, _ := strings.Cut(kv, "=")
			found := false
			for _, lp := range m.Label {
				if lp.GetName() == k && lp.GetValue() == v {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			sum += m.Counter.GetValue()
		case m.Gauge != nil:
			sum += m.Gauge.GetValue()
		case m.Histogram != nil:
			sum += float64(m.Histogram.GetSampleCount())
		}
	}
	return sum
}

// getStatus reads /status.json.
func getStatus(t *testing.T, base string) status.Status {
	t.Helper()
	var st status.Status
	if err := json.Unmarshal(httpGet(t, base+"/status.json"), &st); err != nil {
		t.Fatalf("/status.json: %v", err)
	}
	return st
}

// eventually polls cond until it holds. The web server samples the
// daemon once a second, so what /metrics' gauges and /status.json show
// follows the traffic by up to a sample; the bound only keeps a broken
// build from hanging.
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	var last string
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(25 * time.Millisecond) {
		var ok bool
		if ok, last = cond(); ok {
			return
		}
	}
	t.Fatalf("%s never happened; last seen: %s", what, last)
}

// drivePolicy asks the policy door n times for sender over one
// connection and counts the answers' verbs.
func drivePolicy(t *testing.T, sock, sender string, n int) map[string]int {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	verbs := map[string]int{}
	for i := range n {
		verb, err := policyAsk(c, r, sender, fmt.Sprintf("w%d", i))
		if err != nil {
			t.Fatal(err)
		}
		verbs[verb]++
	}
	return verbs
}

// TestMetricsUnderLoad drives every door of a running daemon and scrapes
// /metrics over HTTP before and after: each counter moves by exactly
// what was driven, the class gauge follows held milter sessions, store
// operations are timed, and reloads are counted. /status.json shows the
// same traffic as talkers, refusals and class occupancy.
func TestMetricsUnderLoad(t *testing.T) {
	dir := t.TempDir()
	path := writeConfig(t, dir, webConfig(dir, ""))
	d := startDaemon(t, path)
	base := webURL(t, d)

	before := scrapeMetrics(t, base)
	if got := before.value("sluice_config_reloads_total", "result=success"); got != 1 {
		t.Errorf("reloads_total{success} at start = %v, want 1 (the initial load)", got)
	}
	if got := before.value("sluice_config_last_reload_success_timestamp_seconds"); got < float64(d.started.Unix()) {
		t.Errorf("last_reload_success_timestamp_seconds at start = %v, want the start time %d", got, d.started.Unix())
	}

	// Policy: 8 messages from one sender against 5 a minute.
	verbs := drivePolicy(t, filepath.Join(dir, "policy"), "flood@example.org", 8)
	if verbs["DUNNO"] != 5 || verbs["DEFER_IF_PERMIT"] != 3 {
		t.Fatalf("policy answers %v, want 5 DUNNO and 3 DEFER_IF_PERMIT", verbs)
	}
	// Milter: the loopback class holds its one session; a second is
	// refused at CONNECT.
	msock := filepath.Join(dir, "milter")
	if _, r := dialMilter(t, msock, "[127.0.0.1]", "127.0.0.1"); r.Code() != wire.RespContinue {
		t.Fatalf("first milter session: %s", replyText(r))
	}
	if _, r := dialMilter(t, msock, "[127.0.0.2]", "127.0.0.2"); !strings.HasPrefix(replyText(r), "421 4.7.0 Too many sessions from class loopback (1/1)") {
		t.Fatalf("second milter session: %s", replyText(r))
	}
	// Throttle: one grant, used.
	tc, err := throttle.Dial("unix", filepath.Join(dir, "throttle"), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := tc.Acquire("mx.example.net")
	if err != nil || rep.Defer != "" {
		tc.Close()
		t.Fatalf("throttle: %+v %v", rep, err)
	}
	if err := tc.Done(); err != nil {
		t.Fatal(err)
	}

	// The class gauge is set by the web server's sampler: wait for it.
	var after scrape
	eventually(t, "the class gauge showing the held session", func() (bool, string) {
		after = scrapeMetrics(t, base)
		n := after.value("sluice_class_sessions", "class=loopback", "direction=incoming")
		return n == 1, fmt.Sprintf("sluice_class_sessions{class=loopback,direction=incoming} = %v", n)
	})
	delta := func(name string, labels ...string) float64 {
		return after.value(name, labels...) - before.value(name, labels...)
	}
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"sluice_decisions_total", []string{"door=policy", "rule=r", "verdict=ok"}, 5},
		{"sluice_decisions_total", []string{"door=policy", "rule=r", "verdict=refused"}, 3},
		{"sluice_decisions_total", []string{"door=milter", "rule=class", "verdict=ok"}, 1},
		{"sluice_decisions_total", []string{"door=milter", "rule=class", "verdict=refused"}, 1},
		{"sluice_decisions_total", []string{"door=throttle", "rule=relays", "verdict=ok"}, 1},
		{"sluice_decisions_total", nil, 11},
		{"sluice_throttle_grant_wait_seconds", nil, 1},
		{"sluice_store_operation_seconds", []string{"op=hit"}, 8},
		{"sluice_store_operation_seconds", []string{"op=reserve"}, 1},
		{"sluice_store_errors_total", nil, 0},
	} {
		if got := delta(c.name, c.labels...); got != c.want {
			t.Errorf("%s%v grew by %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	// Two CONNECTs asked for a class slot (one got it); the throttle
	// send may or may not have taken its own.
	if got := delta("sluice_store_operation_seconds", "op=acquire"); got < 2 {
		t.Errorf("store acquire operations grew by %v, want at least 2", got)
	}
	if got := after.value("sluice_class_cap_sessions", "class=loopback", "direction=incoming"); got != 1 {
		t.Errorf("sluice_class_cap_sessions{loopback,incoming} = %v, want 1", got)
	}
	if got := after.value("sluice_class_cap_sessions", "class=rest"); got != 0 {
		t.Errorf("the uncapped class has a cap series: %v", got)
	}

	// /status.json shows the same traffic.
	var st status.Status
	eventually(t, "the status showing the traffic", func() (bool, string) {
		st = getStatus(t, base)
		return st.Totals.Decisions >= 11 && len(st.Classes) == 2 && st.Classes[0].Incoming == 1,
			fmt.Sprintf("totals %+v classes %+v", st.Totals, st.Classes)
	})
	if st.Totals.Decisions != 11 || st.Totals.Refusals != 4 {
		t.Errorf("totals %+v, want 11 decisions and 4 refusals", st.Totals)
	}
	if c := st.Classes[0]; c != (status.Class{Name: "loopback", Incoming: 1, Total: 1, IncomingCap: 1}) {
		t.Errorf("class loopback: %+v", c)
	}
	if len(st.Talkers) == 0 || st.Talkers[0].Rule != "r" || st.Talkers[0].Key != "sender=flood@example.org" ||
		st.Talkers[0].Limit != 5 || st.Talkers[0].Period != "60s" || st.Talkers[0].Count < 5 {
		t.Errorf("top talker: %+v, want sender=flood@example.org under r at 5 per 60s", st.Talkers)
	}
	if len(st.Refusals) != 4 {
		t.Fatalf("refusals: %+v, want 4", st.Refusals)
	}
	if d := st.Refusals[0]; d.Door != "milter" || d.Rule != "class" || d.Key != "loopback" || d.Count != 1 || d.Limit != 1 ||
		d.Algorithm != "concurrency" || d.Verdict != "421" || !strings.HasPrefix(d.Reply, "421 4.7.0 Too many sessions from class loopback") {
		t.Errorf("newest refusal: %+v, want the milter class refusal", d)
	}
	for _, d := range st.Refusals[1:] {
		if d.Door != "policy" || d.Rule != "r" || d.Key != "sender=flood@example.org" || d.Limit != 5 || d.Period != "60s" ||
			d.Algorithm != "exact" || d.Verdict != "DEFER_IF_PERMIT" || d.Reply != "DEFER_IF_PERMIT 4.7.1 slow down, sender=flood@example.org" {
			t.Errorf("policy refusal: %+v", d)
		}
	}
	var doors []string
	for _, dr := range st.Doors {
		doors = append(doors, dr.Name)
	}
	if strings.Join(doors, " ") != "policy throttle milter web control" {
		t.Errorf("doors %v", doors)
	}

	// Reloads: a good file and a broken one.
	if err := d.Reload(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("[web]\nbogus = 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := d.Reload(); err == nil {
		t.Fatal("a broken file reloaded")
	}
	final := scrapeMetrics(t, base)
	if got := final.value("sluice_config_reloads_total", "result=success") - after.value("sluice_config_reloads_total", "result=success"); got != 1 {
		t.Errorf("successful reloads grew by %v, want 1", got)
	}
	if got := final.value("sluice_config_reloads_total", "result=failure") - after.value("sluice_config_reloads_total", "result=failure"); got != 1 {
		t.Errorf("failed reloads grew by %v, want 1", got)
	}
	eventually(t, "the status showing the reloads", func() (bool, string) {
		st = getStatus(t, base)
		return st.Reload.Generation == 2 && st.Reload.LastFailed.After(st.Reload.At), fmt.Sprintf("%+v", st.Reload)
	})
}

// TestWebWithoutMetrics: metrics = false serves the page and the status
// but no /metrics.
func TestWebWithoutMetrics(t *testing.T) {
	dir := t.TempDir()
	d := startDaemon(t, writeConfig(t, dir, webConfig(dir, "metrics = false\n")))
	base := webURL(t, d)
	if st := getStatus(t, base); len(st.Classes) != 2 {
		t.Errorf("status classes %+v", st.Classes)
	}
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("/metrics with metrics = false: %s", resp.Status)
	}
}
