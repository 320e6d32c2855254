package hist

import (
	"testing"
	"time"
)

func TestHistQuantile(t *testing.T) {
	var h Hist
	for i := 1; i <= 100; i++ {
		h.Record(time.Duration(i))
	}
	if got := h.Quantile(0.5); got != 50 {
		t.Errorf("p50 = %v, want 50ns", got)
	}
	if got := h.Quantile(0.99); got != 99 {
		t.Errorf("p99 = %v, want 99ns", got)
	}
	for _, v := range []time.Duration{255, 256, 1000, 12345, time.Millisecond, 3 * time.Second, time.Hour} {
		var h Hist
		h.Record(v)
		got := h.Quantile(0.5)
		if got < v || float64(got-v) > float64(v)/histSub {
			t.Errorf("record(%d): quantile = %d, want within 1/%d above", v, got, histSub)
		}
	}
}

func TestQuantiles(t *testing.T) {
	var h Hist
	for i := 1; i <= 1000; i++ {
		h.Record(time.Duration(i))
	}
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 500}, {0.99, 990}, {0.999, 999}, {1, 1000}} {
		got := h.Quantile(tc.q)
		if got < tc.want || float64(got-tc.want) > float64(tc.want)/histSub {
			t.Errorf("quantile(%v) = %d, want %d (within 1/%d above)", tc.q, got, tc.want, histSub)
		}
	}
	// A single slow outlier among 1,000 fast requests shows at p999 only.
	h = Hist{}
	for range 999 {
		h.Record(100 * time.Microsecond)
	}
	h.Record(50 * time.Millisecond)
	if p99 := h.Quantile(0.99); p99 > 101*time.Microsecond {
		t.Errorf("p99 = %v, want about 100µs", p99)
	}
	if p999 := h.Quantile(0.999); p999 > 101*time.Microsecond {
		t.Errorf("p999 of 1000 = %v, want the 999th value (100µs)", p999)
	}
	h.Record(50 * time.Millisecond)
	if p999 := h.Quantile(0.999); p999 < 50*time.Millisecond {
		t.Errorf("p999 with 2 of 1001 slow = %v, want 50ms", p999)
	}
}
