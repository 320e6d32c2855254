package cputime

import "testing"

// TestNowGrows: busy work shows in the CPU time.
func TestNowGrows(t *testing.T) {
	start := Now()
	x := 0
	for i := range 50_000_000 {
		x += i ^ x
	}
	if Now() <= start {
		t.Fatalf("CPU time did not grow over a busy loop (%d)", x)
	}
}
