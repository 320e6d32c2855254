package limiter

import (
	"net/netip"
	"testing"
)

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
			got := FairShare(append([]int64(nil), tc.counts...), tc.budget)
			if got != tc.want {
				t.Fatalf("FairShare(%v, %d) = %d, want %d", tc.counts, tc.budget, got, tc.want)
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
