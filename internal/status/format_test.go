package status

import (
	"testing"
	"time"
)

func TestCountAndDuration(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 12345: "12,345", 1234567: "1,234,567", -1234: "-1,234"} {
		if got := Count(n); got != want {
			t.Errorf("Count(%d) = %q, want %q", n, got, want)
		}
	}
	for d, want := range map[time.Duration]string{-time.Second: "0s", 4 * time.Second: "4s", 3 * time.Minute: "3m",
		192 * time.Second: "3m12s", 2*time.Hour + 5*time.Minute: "2h05m", 76 * time.Hour: "3d4h",
		59 * time.Second: "59s", 61 * time.Second: "1m01s", 50 * time.Hour: "2d2h"} {
		if got := Duration(d); got != want {
			t.Errorf("Duration(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestMTATextShare(t *testing.T) {
	for _, c := range []struct {
		m    MTA
		want string
	}{
		{MTA{Open: 3}, "3 open / capacity unknown"},
		{MTA{Capacity: 100, Open: 30, Free: 70, Share: &Share{Budget: 80, Networks: 4, Sessions: 30, Largest: 20}},
			"30 open / 100 · 70 free · 4 networks hold 30 of 80 unreserved"},
		{MTA{Capacity: 100, Open: 81, Free: 19, Share: &Share{Budget: 80, Networks: 11, Sessions: 81, Largest: 8, PerNet: 7}},
			"81 open / 100 · 19 free · 11 networks hold 81 of 80 unreserved, shedding: 7 per network"},
		{MTA{Capacity: 100, Open: 81, Free: 19, Share: &Share{Budget: 80, Networks: 11, Sessions: 81, Largest: 8, PerNet: 7, Busy: 40}},
			"81 open / 100 · 19 free · 11 networks hold 81 of 80 unreserved, shedding: 7 per network, 40 busy networks"},
		{MTA{Capacity: 100, Open: 3, Free: 97, Share: &Share{Budget: 80, Networks: 2, Sessions: 3, Largest: 2, Busy: 1}},
			"3 open / 100 · 97 free · 2 networks hold 3 of 80 unreserved, 1 busy network"},
	} {
		if got := MTAText(&c.m); got != c.want {
			t.Errorf("MTAText(%+v) = %q, want %q", c.m, got, c.want)
		}
	}
}
