package limiter_test

import (
	"strings"
	"testing"

	"sluice/internal/hostmask"
	"sluice/internal/limiter"
)

// TestReserveAdmits is the admission arithmetic: classes "known"
// (reserve 10) and "partners" (reserve 5) and the catch-all "*" (none),
// over a capacity of 50.
func TestReserveAdmits(t *testing.T) {
	cs, err := limiter.NewClasses([]limiter.Class{
		{Name: "known", Masks: masks("192.0.2.0/24"), Reserve: 10},
		{Name: "partners", Masks: masks("198.51.100.0/24"), Reserve: 5},
		{Name: "rest", Masks: masks("*")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := cs.Reserved(); got != 15 {
		t.Errorf("Reserved = %d, want 15", got)
	}
	cases := []struct {
		name     string
		class    int
		held     []int64 // with the new session counted
		capacity int64
		want     bool
		claimed  int64
		unused   int64
	}{
		{"empty MTA, first stranger", 2, []int64{0, 0, 1}, 50, true, 16, 15},
		{"strangers up to capacity minus the reservations", 2, []int64{0, 0, 35}, 50, true, 50, 15},
		{"one stranger more eats a reservation", 2, []int64{0, 0, 36}, 50, false, 51, 15},
		{"a known peer within its reservation while strangers hold the rest", 0, []int64{10, 0, 35}, 50, true, 50, 5},
		{"known within its reservation, even over capacity", 0, []int64{10, 5, 40}, 50, true, 55, 0},
		{"known beyond its reservation needs free sessions", 0, []int64{11, 0, 35}, 50, false, 51, 5},
		{"known beyond its reservation with room", 0, []int64{11, 0, 30}, 50, true, 46, 5},
		{"strangers use what known leaves beyond the reservations", 2, []int64{3, 5, 35}, 50, true, 50, 7},
		{"partners' reservation in use frees nothing for strangers", 2, []int64{0, 5, 36}, 50, false, 51, 10},
		{"unknown capacity admits everything", 2, []int64{0, 0, 1000}, 0, true, 1015, 15},
		{"a short count list counts as no sessions", 2, []int64{0, 0, 35}, 50, true, 50, 15},
		{"class out of range admits", 7, []int64{0, 0, 99}, 50, true, 114, 15},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := cs.Admits(c.class, c.held, c.capacity); got != c.want {
				t.Errorf("Admits(%d, %v, %d) = %v, want %v", c.class, c.held, c.capacity, got, c.want)
			}
			if got := cs.Claimed(c.held); got != c.claimed {
				t.Errorf("Claimed(%v) = %d, want %d", c.held, got, c.claimed)
			}
			if got := cs.Unused(c.held); got != c.unused {
				t.Errorf("Unused(%v) = %d, want %d", c.held, got, c.unused)
			}
		})
	}
}

// TestReserveGuarantee drives sessions in every order a small table
// allows and checks the promise: a class never gets fewer than its
// reservation, and the sessions admitted beyond reservations never push
// the claims over the capacity.
func TestReserveGuarantee(t *testing.T) {
	cs, err := limiter.NewClasses([]limiter.Class{
		{Name: "a", Masks: masks("192.0.2.0/24"), Reserve: 2},
		{Name: "b", Masks: masks("198.51.100.0/24"), Reserve: 1},
		{Name: "rest", Masks: masks("*")},
	})
	if err != nil {
		t.Fatal(err)
	}
	const capacity = 5
	// Every sequence of 8 arrivals over the 3 classes (3^8 of them), with
	// a departure of the catch-all's sessions never: the flood holds.
	seq := make([]int, 8)
	var walk func(depth int)
	walk = func(depth int) {
		if depth == len(seq) {
			held := make([]int64, 3)
			for _, c := range seq {
				held[c]++
				if !cs.Admits(c, held, capacity) {
					held[c]--
					if held[c] < cs.All()[c].Reserve {
						t.Fatalf("%v: class %d refused at %d sessions, below its reservation", seq, c, held[c])
					}
				}
				if claimed := cs.Claimed(held); claimed > capacity {
					t.Fatalf("%v: claims %d over the capacity %d (held %v)", seq, claimed, capacity, held)
				}
			}
			return
		}
		for c := range 3 {
			seq[depth] = c
			walk(depth + 1)
		}
	}
	walk(0)
}

func TestReserveTable(t *testing.T) {
	cs, err := limiter.NewClasses([]limiter.Class{
		{Name: "known", Masks: masks("192.0.2.0/24"), Refuse: 20, Reserve: 10},
		{Name: "rest", Masks: masks("*")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if tab := cs.Table(); !strings.Contains(tab, "reserve") || !strings.Contains(tab, "known                 20       -      10  192.0.2.0/24") {
		t.Errorf("table:\n%s", tab)
	}
	if _, err := limiter.NewClasses([]limiter.Class{{Name: "rest", Masks: masks("*"), Reserve: -1}}); err == nil {
		t.Error("a negative reservation was accepted")
	}
	if i := cs.Index(cs.Match(hostmask.Peer{})); i != 1 {
		t.Errorf("Index of the catch-all = %d", i)
	}
}
