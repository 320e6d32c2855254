package limiter

import (
	"math/rand/v2"
	"net/netip"
	"testing"
)

// TestFairShare: the max-min share of budget among networks holding
// counts sessions each.
func TestFairShare(t *testing.T) {
	flood := func(n int, each int64, extra ...int64) []int64 {
		c := make([]int64, 0, n+len(extra))
		for range n {
			c = append(c, each)
		}
		return append(c, extra...)
	}
	for _, tc := range []struct {
		name   string
		counts []int64
		budget int64
		want   int64
	}{
		{"no networks", nil, 10, 0},
		{"all fit", []int64{3, 2, 1}, 10, 0},
		{"exactly fit", []int64{5, 5}, 10, 0},
		{"no budget", []int64{5, 5}, 0, 0},
		{"two equal over", []int64{6, 5}, 10, 5},
		{"small keeps, surplus to big", []int64{1, 20}, 10, 9},
		{"three small keep theirs", []int64{1, 1, 1, 30}, 10, 7},
		{"flood at the budget, newcomer", flood(10, 8, 1), 80, 7},
		{"flood at the budget, flooder's next", flood(9, 8, 9), 80, 8},
		{"50 networks flood a budget of 80", flood(50, 4), 80, 1},
		{"50 networks and a newcomer", flood(50, 2, 1), 80, 1},
		{"more networks than the budget: at least 1", flood(200, 1), 80, 1},
		{"uneven", []int64{2, 3, 10, 10}, 15, 5},
		{"uneven, remainder floored", []int64{2, 3, 10, 10}, 16, 5},
		{"uneven, more room", []int64{2, 3, 10, 10}, 19, 7},
		{"negative counts as 0", []int64{-3, 12}, 10, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := FairShareHist(hist(tc.counts), tc.budget)
			if got != tc.want {
				t.Fatalf("FairShareHist(%v (from %v), %d) = %d, want %d", hist(tc.counts), tc.counts, tc.budget, got, tc.want)
			}
			if got == 0 {
				return
			}
			// The share is max-min: at s it fits, at s+1 it does not
			// (unless s is the floor of 1).
			fit := func(s int64) int64 {
				var n int64
				for _, c := range tc.counts {
					n += min(max(c, 0), s)
				}
				return n
			}
			if got > 1 && fit(got) > tc.budget {
				t.Fatalf("share %d: %d sessions over the budget %d", got, fit(got), tc.budget)
			}
			if fit(got+1) <= tc.budget {
				t.Fatalf("share %d is not the largest: %d still fits %d", got, got+1, tc.budget)
			}
		})
	}
}

func TestShareBudget(t *testing.T) {
	for _, tc := range []struct{ capacity, reserved, excess, want int64 }{
		{0, 0, 0, 0},
		{-1, 0, 0, 0},
		{100, 0, 0, 80},
		{100, 20, 0, 64},
		{100, 20, 4, 60},
		{100, 20, -4, 64},
		{3, 0, 0, 2},
		{1, 0, 0, 1},
		{100, 20, 500, 1},
	} {
		if got := ShareBudget(tc.capacity, tc.reserved, tc.excess); got != tc.want {
			t.Errorf("ShareBudget(%d, %d, %d) = %d, want %d", tc.capacity, tc.reserved, tc.excess, got, tc.want)
		}
	}
}

func TestShareNet(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"192.0.2.77", "192.0.2.0/24"},
		{"::ffff:192.0.2.77", "192.0.2.0/24"},
		{"2001:db8:1:2:3::4", "2001:db8:1::/48"},
	} {
		got, ok := ShareNet(netip.MustParseAddr(tc.in))
		if !ok || got.String() != tc.want {
			t.Errorf("ShareNet(%s) = %v, %v; want %s", tc.in, got, ok, tc.want)
		}
	}
	if _, ok := ShareNet(netip.Addr{}); ok {
		t.Error("ShareNet(invalid) ok")
	}
	for _, tc := range []struct{ in, want string }{
		{"2001:db8:1:2::/84", "2001:db8:1::/48"},
		{"2001:db8::/32", "2001:db8::/32"},
		{"192.0.2.128/25", "192.0.2.0/24"},
		{"10.0.0.0/8", "10.0.0.0/8"},
	} {
		got, ok := ShareNetOf(netip.MustParsePrefix(tc.in))
		if !ok || got.String() != tc.want {
			t.Errorf("ShareNetOf(%s) = %v, %v; want %s", tc.in, got, ok, tc.want)
		}
	}
}

// hist turns counts into FairShareHist's histogram.
func hist(counts []int64) []int64 {
	var h []int64
	for _, c := range counts {
		if c <= 0 {
			continue
		}
		for int64(len(h)) <= c {
			h = append(h, 0)
		}
		h[c]++
	}
	return h
}

// TestFairShareByDefinition: on random small populations the share is
// the definition's, found by trying every s.
func TestFairShareByDefinition(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 5000 {
		counts := make([]int64, r.IntN(12))
		var sum int64
		for i := range counts {
			counts[i] = 1 + r.Int64N(9)
			sum += counts[i]
		}
		budget := r.Int64N(60)
		var want int64
		if budget > 0 && sum > budget {
			want = 1
			for s := int64(2); s <= 10; s++ {
				var n int64
				for _, c := range counts {
					n += min(c, s)
				}
				if n <= budget {
					want = s
				}
			}
		}
		if got := FairShareHist(hist(counts), budget); got != want {
			t.Fatalf("counts %v budget %d: %d, want %d", counts, budget, got, want)
		}
	}
}
