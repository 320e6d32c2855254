package redis

import (
	"testing"
	"time"

	"sluice/internal/limiter"
)

// Marks in a real Redis: what one store sets another on the same Redis
// reads (as a second daemon would), Add only over an absent or expired
// mark, expiry by Redis, List of every live mark.
func TestMarks(t *testing.T) {
	srv := needServer(t)
	a := newTestStore(t, srv, Options{})
	b := newTestStore(t, srv, Options{KeyPrefix: a.prefix})
	ma, mb := a.Marks(), b.Marks()
	if ma == nil || mb == nil {
		t.Fatal("no marks on a Redis store")
	}
	var _ limiter.Marks = ma
	now := time.Now().Truncate(time.Millisecond)
	if err := ma.Put(ctx, "relay *", "limit", limiter.Mark{Value: 12, Since: now}); err != nil {
		t.Fatal(err)
	}
	m, ok, err := mb.Get(ctx, "relay *", "limit")
	if err != nil || !ok || m.Value != 12 || !m.Since.Equal(now) || !m.Expires.IsZero() {
		t.Fatalf("the other daemon reads %+v %v %v", m, ok, err)
	}
	until := now.Add(300 * time.Millisecond)
	if ok, err := ma.Add(ctx, "relay *", "suspend", limiter.Mark{Value: 1, Since: now, Expires: until}); !ok || err != nil {
		t.Fatalf("Add: %v %v", ok, err)
	}
	if ok, _ := mb.Add(ctx, "relay *", "suspend", limiter.Mark{Value: 2, Since: now, Expires: until}); ok {
		t.Fatal("the other daemon's Add over a live suspension succeeded")
	}
	list, err := mb.List(ctx)
	if err != nil || len(list) != 2 || list[0].Name != "limit" || list[1].Name != "suspend" || !list[1].Expires.Equal(until) {
		t.Fatalf("List: %+v %v", list, err)
	}
	time.Sleep(time.Until(until) + 50*time.Millisecond)
	if _, ok, _ := mb.Get(ctx, "relay *", "suspend"); ok {
		t.Fatal("an expired suspension is still there")
	}
	if ok, _ := mb.Add(ctx, "relay *", "suspend", limiter.Mark{Value: 2, Since: now}); !ok {
		t.Fatal("Add after the expiry refused")
	}
	if err := ma.Delete(ctx, "relay *", "limit"); err != nil {
		t.Fatal(err)
	}
	if list, _ := mb.List(ctx); len(list) != 1 || list[0].Value != 2 {
		t.Fatalf("after Delete: %+v", list)
	}
}
