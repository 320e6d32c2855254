package app

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sluice/internal/clock"
	"sluice/internal/config"
	"sluice/internal/governor"
	"sluice/internal/limiter"
	"sluice/internal/store/memory"
	"sluice/internal/throttle"
)

// TestThrottleSharedFromConfig: what docs/config.md and docs/throttle.md
// say of [[throttle.policy]] shared, from the configuration text to the
// slots granted: with shared = true every key the policy matches books
// from one budget (the third key of a 2/10s policy waits a period); without
// it each key has its own (every key sends at once).
func TestThrottleSharedFromConfig(t *testing.T) {
	cfg, errs := config.Parse([]byte(`
[[throttle.policy]]
name = "smarthost"
match = ["*.relay.example"]
limit = "2/10s"
shared = true

[[throttle.policy]]
name = "each"
match = ["*"]
limit = "2/10s"
`), "shared.toml")
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	store := memory.New(memory.Options{})
	t.Cleanup(func() { store.Close() })
	clk := clock.NewFake(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	lim := limiter.New(limiter.Options{Store: store, Clock: clk, Logger: slog.New(slog.DiscardHandler)})
	log := slog.New(slog.DiscardHandler)
	g, err := buildGovernor(cfg, lim, limiter.NewWaiters(lim), governor.NewRefusalLog(log, clk, 100), nil, nil, nil, nil, log)
	if err != nil {
		t.Fatal(err)
	}
	wait := func(key string) time.Duration {
		t.Helper()
		gr, err := g.ThrottleAcquire(context.Background(), key)
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		return gr.At.Sub(clk.Now())
	}
	for _, key := range []string{"a.relay.example", "b.relay.example"} {
		if d := wait(key); d != 0 {
			t.Errorf("shared: %s waits %s, want none (the budget has room)", key, d)
		}
	}
	if d := wait("c.relay.example"); d < 10*time.Second {
		t.Errorf("shared: the third key waits %s, want a period (one budget for the policy)", d)
	}
	for _, key := range []string{"a.example", "a.example", "b.example", "c.example"} {
		if d := wait(key); d != 0 {
			t.Errorf("not shared: %s waits %s, want none (a budget per key)", key, d)
		}
	}
}

// TestThrottleBanSuspendsAndResumes: one sender's result matching a ban
// sign suspends the key: the sender that was granted a later slot is told
// to defer while it sleeps, the senders waiting for a concurrency slot
// are told to defer, a new sender defers at once; the ban's permanent
// failure is reported back as temporary, a user unknown is not. With
// adapt the limit drops to half, the marks file keeps it, and after the
// cool-off the key sends again at the learned limit. corroborate = 1: one
// send decides (TestThrottleBanSharedThroughRedis takes the default).
func TestThrottleBanSuspendsAndResumes(t *testing.T) {
	dir := t.TempDir()
	d := startDaemon(t, writeConfig(t, dir, fmt.Sprintf(`state_dir = %q
[anvil]
enabled = false
[policy]
enabled = false
[throttle]
listen = ["unix:throttle"]
[[throttle.policy]]
name = "relay"
match = ["*"]
limit = "4/1s"
concurrency = 2
shared = true
max_wait = "1m"
ban_signs = ["too many"]
cool_off = "2s"
adapt = true
corroborate = 1
[web]
listen = ["inet:127.0.0.1:0"]
metrics = true
`, dir)))
	sock := filepath.Join(dir, "throttle")
	acquire := func(key string) (*throttle.Client, throttle.Reply) {
		t.Helper()
		cl, err := throttle.Dial("unix", sock, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		rep, err := cl.Acquire(key)
		if err != nil {
			t.Fatal(err)
		}
		return cl, rep
	}
	report := func(cl *throttle.Client, rep string) string {
		t.Helper()
		lines, err := throttle.ParseQmailReport([]byte(rep))
		if err != nil {
			t.Fatal(err)
		}
		r, _ := throttle.ResultFromQmail(lines)
		v, err := cl.Report(r, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		cl.Close()
		return v
	}
	const (
		delivered = "r\x00K127.0.0.1 accepted message.\nRemote host said: 250 ok\n\x00"
		unknown   = "h127.0.0.1 does not like recipient.\nRemote host said: 550 5.1.1 user unknown\n\x00DGiving up on 127.0.0.1.\n\x00"
		banned    = "DConnected to 127.0.0.1 but sender was rejected.\nRemote host said: 554 5.7.1 too many messages\n\x00"
	)
	for i := range 2 {
		cl, rep := acquire(fmt.Sprintf("d%d.example", i))
		if rep.Defer != "" {
			t.Fatal(rep.Defer)
		}
		if v := report(cl, delivered); v != ".." {
			t.Fatalf("delivered: verdict %q", v)
		}
	}
	cl, _ := acquire("u.example")
	if v := report(cl, unknown); v != ".." {
		t.Fatalf("user unknown: verdict %q, want both kept", v)
	}
	ban, _ := acquire("b.example")
	later, rep := acquire("later.example") // the fifth slot: a period on
	if rep.Defer != "" || !rep.At.After(time.Now()) {
		t.Fatalf("the fifth sender: %+v, want a slot to come", rep)
	}
	revoked, stop := later.Watch()
	queued := make(chan string, 2)
	for i := range 2 { // both concurrency slots are held: these wait
		go func() {
			c, err := throttle.Dial("unix", sock, 5*time.Second)
			if err != nil {
				queued <- err.Error()
				return
			}
			defer c.Close()
			r, err := c.Acquire(fmt.Sprintf("q%d.example", i))
			if err != nil {
				queued <- err.Error()
				return
			}
			queued <- "defer: " + r.Defer
		}()
	}
	eventuallyTrue(t, func() bool { return d.throttleWaiting.Load() == 2 }, "both senders waiting for a concurrency slot")
	start := time.Now()
	if v := report(ban, banned); v != "T" {
		t.Fatalf("the ban's D: verdict %q, want T", v)
	}
	var why string
	select {
	case why = <-revoked:
	case <-time.After(10 * time.Second):
		t.Fatal("the sender sleeping until its slot was not told to defer")
	}
	stop()
	later.Close() // as sluice throttle does: the slot goes back
	t.Logf("the sleeping sender was told to defer %s after the ban: %s", time.Since(start), why)
	for range 2 {
		var q string
		select {
		case q = <-queued:
		case <-time.After(10 * time.Second):
			t.Fatal("a sender waiting for a concurrency slot was not told to defer")
		}
		if !strings.HasPrefix(q, "defer: ") || !strings.Contains(q, "suspended until") {
			t.Errorf("a queued sender: %q, want a deferral for the suspension", q)
		}
	}
	t.Logf("the queued senders deferred %s after the ban", time.Since(start))
	c2, rep := acquire("new.example")
	c2.Close()
	if !strings.Contains(rep.Defer, "suspended until") {
		t.Fatalf("a new sender during the cool-off: %+v, want a deferral", rep)
	}
	if ks := d.Status().ThrottleKeys; len(ks) != 1 || ks[0].Key != "relay *" || !ks[0].SuspendedUntil.After(time.Now()) || ks[0].Limit != 2 || ks[0].Configured != 4 || ks[0].Bans != 1 {
		t.Errorf("the status's throttle keys: %+v, want relay * suspended, learned limit 2 of 4, 1 ban", ks)
	}
	families, err := d.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		if strings.HasPrefix(f.GetName(), "sluice_throttle_key_") {
			for _, m := range f.GetMetric() {
				got[f.GetName()+" "+m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
			}
		}
	}
	if got["sluice_throttle_key_limit relay *"] != 2 || got["sluice_throttle_key_bans relay *"] != 1 || got["sluice_throttle_key_suspended_seconds relay *"] <= 0 {
		t.Errorf("the throttle key metrics: %v", got)
	}
	marks, err := limiter.NewMemoryMarks(filepath.Join(dir, "throttle.marks"), nil)
	if err != nil {
		t.Fatal(err)
	}
	m, ok, _ := marks.Get(context.Background(), "relay *", "limit")
	if !ok || m.Value != 2 {
		t.Fatalf("the learned limit in the marks file: %+v %v, want 2 (half of the configured 4)", m, ok)
	}
	s, ok, _ := marks.Get(context.Background(), "relay *", "suspend")
	if !ok {
		t.Fatal("no suspension in the marks file")
	}
	time.Sleep(time.Until(s.Expires))
	a, ra := acquire("after.example")
	defer a.Close()
	b, rb := acquire("after2.example")
	b.Close()
	c3, rc := acquire("after3.example")
	defer c3.Close()
	if ra.Defer != "" || rb.Defer != "" || rc.Defer != "" {
		t.Fatalf("after the cool-off: %+v %+v %+v, want slots", ra, rb, rc)
	}
	if gap := rc.At.Sub(ra.At); gap < 1250*time.Millisecond {
		t.Errorf("after the cool-off the third slot %s after the first, want a period with margin (the learned limit is 2)", gap)
	}
}

// TestThrottleBanSharedThroughRedis: two daemons on one Redis share a
// key's suspension and the signs that corroborate a ban: one send's ban
// reported to the first suspends nothing (its own failure is made
// temporary); a second send's, reported to the other daemon, corroborates
// it, and the key is suspended on both: a sender sleeping until its slot
// on the second is told to defer (it polls the marks while senders
// wait), and a new sender there defers at once.
func TestThrottleBanSharedThroughRedis(t *testing.T) {
	srv := startRedis(t)
	door := `[policy]
enabled = false
[throttle]
listen = ["unix:throttle"]
[[throttle.policy]]
name = "relay"
match = ["*"]
limit = "3/1s"
shared = true
max_wait = "1m"
ban_signs = ["too many"]
cool_off = "1h"
adapt = true
`
	paths := []string{
		redisStoreConfig(t, fmt.Sprintf("addrs = [%q]\nkey_prefix = \"ban:\"\n", srv.Addr()), door),
		redisStoreConfig(t, fmt.Sprintf("addrs = [%q]\nkey_prefix = \"ban:\"\n", srv.Addr()), door),
	}
	var socks []string
	var ds []*Daemon
	for _, p := range paths {
		ds = append(ds, startDaemon(t, p))
		socks = append(socks, filepath.Join(filepath.Dir(p), "throttle"))
	}
	acquire := func(sock, key string) (*throttle.Client, throttle.Reply) {
		t.Helper()
		cl, err := throttle.Dial("unix", sock, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		rep, err := cl.Acquire(key)
		if err != nil {
			t.Fatal(err)
		}
		return cl, rep
	}
	a1, _ := acquire(socks[0], "a.example")
	if v, err := a1.Report([]throttle.ResultLine{{Kind: 'r'}, {Kind: 'K', Text: "ok"}}, 5*time.Second); err != nil || v != ".." {
		t.Fatalf("delivered: %q %v", v, err)
	}
	a1.Close()
	ban, _ := acquire(socks[0], "b.example")
	ban2, _ := acquire(socks[1], "b2.example")
	sleeper, rep := acquire(socks[1], "c.example") // the fourth slot, a period on
	if rep.Defer != "" || !rep.At.After(time.Now()) {
		t.Fatalf("the second daemon's sender: %+v, want a slot to come", rep)
	}
	revoked, stop := sleeper.Watch()
	defer stop()
	banned := []throttle.ResultLine{{Kind: 'D', Text: "Connected to 127.0.0.1 but sender was rejected. Remote host said: 554 too many"}}
	if v, err := ban.Report(banned, 5*time.Second); err != nil || v != "T" {
		t.Fatalf("the first ban: %q %v", v, err)
	}
	ban.Close()
	for i, d := range ds {
		if ks := d.Status().ThrottleKeys; len(ks) != 0 {
			t.Fatalf("daemon %d after one send's ban: throttle keys %+v, want none (not corroborated)", i+1, ks)
		}
	}
	if v, err := ban2.Report(banned, 5*time.Second); err != nil || v != "T" {
		t.Fatalf("the second ban: %q %v", v, err)
	}
	ban2.Close()
	start := time.Now()
	select {
	case why := <-revoked:
		t.Logf("the other daemon's sleeping sender told to defer %s after the ban: %s", time.Since(start), why)
	case <-time.After(10 * time.Second):
		t.Fatal("the other daemon's sleeping sender was not told to defer")
	}
	c, rep := acquire(socks[1], "d.example")
	c.Close()
	if !strings.Contains(rep.Defer, "suspended until") {
		t.Fatalf("a new sender on the other daemon: %+v, want a deferral", rep)
	}
}
