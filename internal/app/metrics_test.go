package app

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sluice/internal/metrics"
	"sluice/internal/throttle"
)

// TestMetricsSeries scrapes /metrics of sluice serve: no pool series
// without a multiplexor to read, the store error counters at 0 from the
// start (alerts on their increase work before the first error), and a
// throttle deferral counted as verdict "deferred", not "refused".
func TestMetricsSeries(t *testing.T) {
	dir := t.TempDir()
	path := writeConfig(t, dir, fmt.Sprintf(`state_dir = %q
[anvil]
enabled = false
[policy]
enabled = false
[milter]
enabled = false
[throttle]
listen = ["unix:throttle"]
[[throttle.policy]]
name = "tight"
match = ["*"]
limit = "1/3600s"
max_wait = "1s"
[web]
listen = ["inet:127.0.0.1:0"]
`, dir))
	d := startDaemon(t, path)
	base := webURL(t, d)

	start := scrapeMetrics(t, base)
	for name := range start {
		if strings.HasPrefix(name, "sluice_pool_") {
			t.Errorf("sluice serve without mux_socket serves %s", name)
		}
	}
	if f := start["sluice_store_errors_total"]; f == nil || len(f.Metric) != len(metrics.StoreOps) {
		t.Errorf("sluice_store_errors_total at start: %v, want one series per operation at 0", f)
	}
	if start["sluice_throttle_waiters"] == nil || start["sluice_config_reloads_total"] == nil {
		t.Error("throttle or config series missing")
	}

	send := func() throttle.Reply {
		tc, err := throttle.Dial("unix", filepath.Join(dir, "throttle"), 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer tc.Close()
		rep, err := tc.Acquire("mx.example.net")
		if err != nil {
			t.Fatal(err)
		}
		if rep.Defer == "" {
			if err := tc.Done(); err != nil {
				t.Fatal(err)
			}
		}
		return rep
	}
	if rep := send(); rep.Defer != "" {
		t.Fatalf("first send deferred: %+v", rep)
	}
	// The next slot is an hour away, past max_wait: deferred.
	if rep := send(); rep.Defer == "" {
		t.Fatalf("second send not deferred: %+v", rep)
	}
	after := scrapeMetrics(t, base)
	if f := after["sluice_store_errors_total"]; f == nil || len(f.Metric) != len(metrics.StoreOps) {
		t.Errorf("sluice_store_errors_total after traffic: %v, want the operations of metrics.StoreOps only", f)
	}
	for verdict, want := range map[string]float64{"ok": 1, "deferred": 1, "refused": 0} {
		if got := after.value("sluice_decisions_total", "door=throttle", "verdict="+verdict); got != want {
			t.Errorf("throttle decisions with verdict %s: %v, want %v", verdict, got, want)
		}
	}
}

// TestMetricsWithoutThrottle: with the throttle door closed, no throttle
// series.
func TestMetricsWithoutThrottle(t *testing.T) {
	dir := t.TempDir()
	path := writeConfig(t, dir, fmt.Sprintf(`state_dir = %q
[anvil]
enabled = false
[throttle]
enabled = false
[web]
listen = ["inet:127.0.0.1:0"]
`, dir))
	d := startDaemon(t, path)
	for name := range scrapeMetrics(t, webURL(t, d)) {
		if strings.HasPrefix(name, "sluice_throttle_") || strings.HasPrefix(name, "sluice_pool_") {
			t.Errorf("served %s", name)
		}
	}
}
