package app

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"sluice/internal/limiter"
	"sluice/internal/metrics"
	"sluice/internal/store/memory"
)

// TestInstrumentedStoreTimesFromNow: an operation is timed from the now
// the limiter read before the call (its monotonic reading), and from a
// clock read of its own when now has none (a fake clock's).
func TestInstrumentedStoreTimesFromNow(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, metrics.PartStore)
	if err != nil {
		t.Fatal(err)
	}
	mem := memory.New(memory.Options{})
	defer mem.Close()
	s := instrumentedStore{Store: mem, m: m}
	checks := []limiter.Check{{Key: "k", Limit: limiter.Limit{Algorithm: limiter.Smooth, N: 10, Period: time.Minute}}}
	out := make([]limiter.Decision, 1)

	// A now read 200 ms before the call: the operation took at least that.
	if err := s.Hit(context.Background(), time.Now().Add(-200*time.Millisecond), 1, limiter.Leaky, checks, out); err != nil {
		t.Fatal(err)
	}
	if n, sum := hitSeconds(t, reg); n != 1 || sum < 0.2 {
		t.Fatalf("after a hit whose now is 200 ms old: %d observations, %.3f s in all; want 1, >= 0.2", n, sum)
	}
	// The same now without its monotonic reading: timed by the clock.
	if err := s.Hit(context.Background(), time.Now().Add(-200*time.Millisecond).Round(0), 1, limiter.Leaky, checks, out); err != nil {
		t.Fatal(err)
	}
	if n, sum := hitSeconds(t, reg); n != 2 || sum >= 0.4 {
		t.Fatalf("after a hit whose now has no monotonic reading: %d observations, %.3f s in all; want 2, < 0.4", n, sum)
	}
}

// hitSeconds returns the count and sum of sluice_store_operation_seconds
// for op "hit".
func hitSeconds(t *testing.T, reg *prometheus.Registry) (uint64, float64) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "sluice_store_operation_seconds" {
			continue
		}
		for _, mm := range mf.GetMetric() {
			if labelIs(mm, "op", "hit") {
				h := mm.GetHistogram()
				return h.GetSampleCount(), h.GetSampleSum()
			}
		}
	}
	return 0, 0
}

func labelIs(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}
