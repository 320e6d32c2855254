package storetest

import (
	"slices"
	"testing"
	"time"

	"sluice/internal/limiter"
)

// testKeysAndForget: Keys lists the keys under a prefix, whatever their
// algorithm or hash tag, and no other; Forget drops a key's counts (the
// next hit counts from one) and leaves the others alone.
func testKeysAndForget(t *testing.T, s limiter.Store) {
	a := exact("adm\x00{r\x00sender=a}\x000", 2, time.Minute)
	b := anvil("adm\x00{r\x00sender=b}\x000", 2, time.Minute, 0)
	other := exact("other", 2, time.Minute)
	for _, c := range []limiter.Check{a, a, b, other} {
		hit(t, s, at(0), 1, limiter.Leaky, c)
	}
	keys, err := s.Keys(ctx, at(time.Second), "adm\x00", 100)
	slices.Sort(keys)
	if err != nil || !slices.Equal(keys, []string{a.Key, b.Key}) {
		t.Fatalf("Keys = %q, %v; want %q and %q", keys, err, a.Key, b.Key)
	}
	if keys, _ := s.Keys(ctx, at(time.Second), "adm\x00", 1); len(keys) != 1 {
		t.Fatalf("Keys with max 1 = %q", keys)
	}
	if d := hit(t, s, at(time.Second), 1, limiter.Leaky, a)[0]; d.Allowed {
		t.Fatalf("a at 2/2 admitted: %+v", d)
	}
	n, err := s.Forget(ctx, at(time.Second), []string{a.Key, "never-hit"})
	if err != nil || n != 1 {
		t.Fatalf("Forget = %d, %v; want 1", n, err)
	}
	if d := hit(t, s, at(time.Second), 1, limiter.Leaky, a)[0]; !d.Allowed || d.Count != 1 {
		t.Fatalf("after Forget, a's hit = %+v; want allowed, count 1", d)
	}
	if d := hit(t, s, at(time.Second), 1, limiter.Leaky, b)[0]; d.Count != 2 {
		t.Fatalf("b's count after a's Forget = %d; want 2", d.Count)
	}
}
