package metrics

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func newTest(t testing.TB) (*Metrics, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := New(reg, allParts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return m, reg
}

func TestNilMetricsIsANoOp(t *testing.T) {
	var m *Metrics
	m.Decision("policy", "r", "DEFER")
	m.Classes([]ClassState{{Name: "x"}})
	m.Pool(PoolState{Busy: 1})
	m.PoolKill(KillIdle)
	m.PoolBusyTimeout()
	m.ThrottleWaiters(3)
	m.ThrottleGrant(time.Second)
	m.StoreOp("hit", time.Millisecond, errors.New("x"))
	m.Reload(true, time.Now())
}

func TestNewRefusesADoubleRegistration(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := New(reg, allParts); err != nil {
		t.Fatal(err)
	}
	if _, err := New(reg, allParts); err == nil {
		t.Fatal("second New on one registry: no error")
	}
}

func TestMetricNamesPassLint(t *testing.T) {
	_, reg := newTest(t)
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

func TestDecisions(t *testing.T) {
	m, reg := newTest(t)
	m.Decision("policy", "per-client", "DEFER")
	m.Decision("policy", "per-client", "DEFER")
	m.Decision("policy", "per-client", "DUNNO")
	m.Decision("anvil", "", "ok")
	want := `
# HELP sluice_decisions_total Decisions made, by door, rule and verdict.
# TYPE sluice_decisions_total counter
sluice_decisions_total{door="anvil",rule="",verdict="ok"} 1
sluice_decisions_total{door="policy",rule="per-client",verdict="DEFER"} 2
sluice_decisions_total{door="policy",rule="per-client",verdict="DUNNO"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "sluice_decisions_total"); err != nil {
		t.Fatal(err)
	}
}

func TestDecisionLabelSetsAreCapped(t *testing.T) {
	m, reg := newTest(t)
	for i := range MaxSeries + 50 {
		m.Decision("policy", fmt.Sprintf("rule%d", i), "DEFER")
	}
	n, err := testutil.GatherAndCount(reg, "sluice_decisions_total")
	if err != nil {
		t.Fatal(err)
	}
	if n != MaxSeries+1 {
		t.Fatalf("series = %d, want %d (cap plus the overflow series)", n, MaxSeries+1)
	}
	got := testutil.ToFloat64(m.decisions.vec.WithLabelValues(Overflow, Overflow, Overflow))
	if got != 50 {
		t.Fatalf("overflow series = %v, want 50", got)
	}
}

func TestLabelValuesAreMadeValid(t *testing.T) {
	m, reg := newTest(t)
	long := strings.Repeat("é", 40) // 80 bytes
	m.Decision("policy", long, "bad\xffbyte")
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "sluice_decisions_total" {
			continue
		}
		for _, lp := range mf.GetMetric()[0].GetLabel() {
			switch lp.GetName() {
			case "rule":
				if v := lp.GetValue(); v != strings.Repeat("é", 32) {
					t.Errorf("rule = %q (%d bytes), want 32 runes cut at a rune boundary", v, len(v))
				}
			case "verdict":
				if v := lp.GetValue(); v != "bad?byte" {
					t.Errorf("verdict = %q", v)
				}
			}
		}
		return
	}
	t.Fatal("no decisions gathered")
}

func TestClassesDropRemovedClassesAndUncappedCaps(t *testing.T) {
	m, reg := newTest(t)
	m.Classes([]ClassState{
		{Name: "local", Incoming: 2, Total: 3, IncomingCap: 10, TotalCap: 20},
		{Name: "rest", Incoming: 1, Total: 1},
	})
	want := `
# HELP sluice_class_cap_sessions A peer class's caps: incoming (refuse), total (queue) and reserve (its reservation of the MTA's sessions); absent when uncapped.
# TYPE sluice_class_cap_sessions gauge
sluice_class_cap_sessions{class="local",direction="incoming"} 10
sluice_class_cap_sessions{class="local",direction="total"} 20
# HELP sluice_class_sessions Open sessions of a peer class: incoming ones, and the total of incoming and outgoing.
# TYPE sluice_class_sessions gauge
sluice_class_sessions{class="local",direction="incoming"} 2
sluice_class_sessions{class="local",direction="total"} 3
sluice_class_sessions{class="rest",direction="incoming"} 1
sluice_class_sessions{class="rest",direction="total"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "sluice_class_sessions", "sluice_class_cap_sessions"); err != nil {
		t.Fatal(err)
	}
	// After a reload: "local" is gone and "rest" gained a cap.
	m.Classes([]ClassState{{Name: "rest", Incoming: 0, Total: 4, TotalCap: 5}})
	want = `
# HELP sluice_class_cap_sessions A peer class's caps: incoming (refuse), total (queue) and reserve (its reservation of the MTA's sessions); absent when uncapped.
# TYPE sluice_class_cap_sessions gauge
sluice_class_cap_sessions{class="rest",direction="total"} 5
# HELP sluice_class_sessions Open sessions of a peer class: incoming ones, and the total of incoming and outgoing.
# TYPE sluice_class_sessions gauge
sluice_class_sessions{class="rest",direction="incoming"} 0
sluice_class_sessions{class="rest",direction="total"} 4
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "sluice_class_sessions", "sluice_class_cap_sessions"); err != nil {
		t.Fatal(err)
	}
}

func TestPool(t *testing.T) {
	m, reg := newTest(t)
	m.Pool(PoolState{Stopped: 5, Idle: 2, Busy: 3, Queued: 1, QueueSize: 10, Activations: 7})
	m.Pool(PoolState{Stopped: 4, Idle: 2, Busy: 4, Queued: 0, QueueSize: 10, Activations: 9})
	m.Pool(PoolState{Stopped: 10, Activations: 1}) // a new pool: counts in full
	m.PoolKill(KillIdle)
	m.PoolKill(KillBusyTimeout)
	m.PoolKill("Worker has processed 500 requests") // free text: not a label
	m.PoolBusyTimeout()
	want := `
# HELP sluice_pool_activations_total Worker processes started.
# TYPE sluice_pool_activations_total counter
sluice_pool_activations_total 10
# HELP sluice_pool_busy_timeouts_total Requests whose worker did not answer within the busy timeout.
# TYPE sluice_pool_busy_timeouts_total counter
sluice_pool_busy_timeouts_total 1
# HELP sluice_pool_kills_total Worker processes told to exit, by reason.
# TYPE sluice_pool_kills_total counter
sluice_pool_kills_total{reason="_other"} 1
sluice_pool_kills_total{reason="busy_timeout"} 1
sluice_pool_kills_total{reason="idle"} 1
sluice_pool_kills_total{reason="io_error"} 0
sluice_pool_kills_total{reason="lifetime"} 0
sluice_pool_kills_total{reason="max_requests"} 0
sluice_pool_kills_total{reason="reread"} 0
# HELP sluice_pool_queue_length Requests waiting in the pool's queue for a free worker.
# TYPE sluice_pool_queue_length gauge
sluice_pool_queue_length 0
# HELP sluice_pool_queue_size The pool queue's capacity.
# TYPE sluice_pool_queue_size gauge
sluice_pool_queue_size 0
# HELP sluice_pool_slots Worker slots by state (stopped, idle, busy, killed).
# TYPE sluice_pool_slots gauge
sluice_pool_slots{state="busy"} 0
sluice_pool_slots{state="idle"} 0
sluice_pool_slots{state="killed"} 0
sluice_pool_slots{state="stopped"} 10
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"sluice_pool_activations_total", "sluice_pool_busy_timeouts_total", "sluice_pool_kills_total",
		"sluice_pool_queue_length", "sluice_pool_queue_size", "sluice_pool_slots"); err != nil {
		t.Fatal(err)
	}
}

func TestThrottleStoreAndReload(t *testing.T) {
	m, reg := newTest(t)
	m.ThrottleWaiters(4)
	m.ThrottleGrant(1500 * time.Millisecond)
	m.ThrottleGrant(-time.Second) // clamped to 0
	m.StoreOp("hit", 300*time.Microsecond, nil)
	m.StoreOp("hit", 2*time.Millisecond, errors.New("redis down"))
	m.StoreOp("acquire", 50*time.Microsecond, nil)
	m.StoreOp("acquire", time.Microsecond, fmt.Errorf("redis store: acquire: %w", fastFail(true)))
	m.StoreOp("undo", time.Microsecond, fastFail(false))
	m.Reload(true, time.Unix(1700000000, 500_000_000))
	m.Reload(false, time.Unix(1700000100, 0))

	check := func(name string, c prometheus.Collector, want float64) {
		t.Helper()
		if got := testutil.ToFloat64(c); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	check("waiters", m.throttleWaiters, 4)
	check("store errors hit", m.storeErrors.vec.WithLabelValues("hit"), 1)
	check("reloads ok", m.reloads.WithLabelValues(ReloadOK), 1)
	check("reloads failed", m.reloads.WithLabelValues(ReloadFailed), 1)
	check("last reload", m.lastReload, 1700000000.5)
	if n := testutil.CollectAndCount(m.storeErrors.vec); n != len(StoreOps) {
		t.Errorf("store error series = %d, want %d (one per operation, from the start)", n, len(StoreOps))
	}
	check("store errors acquire", m.storeErrors.vec.WithLabelValues("acquire"), 1)
	check("store fast failures acquire", m.storeFastFails.vec.WithLabelValues("acquire"), 1)
	check("store errors undo", m.storeErrors.vec.WithLabelValues("undo"), 1)
	check("store fast failures undo", m.storeFastFails.vec.WithLabelValues("undo"), 0)
	check("store fast failures hit", m.storeFastFails.vec.WithLabelValues("hit"), 0)
	if n := testutil.CollectAndCount(m.storeFastFails.vec); n != len(StoreOps) {
		t.Errorf("store fast failure series = %d, want %d (one per operation, from the start)", n, len(StoreOps))
	}

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]uint64{}
	sums := map[string]float64{}
	for _, mf := range mfs {
		for _, mt := range mf.GetMetric() {
			if h := mt.GetHistogram(); h != nil {
				name := mf.GetName()
				for _, lp := range mt.GetLabel() {
					name += "/" + lp.GetValue()
				}
				counts[name] = h.GetSampleCount()
				sums[name] = h.GetSampleSum()
			}
		}
	}
	if counts["sluice_throttle_grant_wait_seconds"] != 2 || sums["sluice_throttle_grant_wait_seconds"] != 1.5 {
		t.Errorf("grant histogram: count %d sum %v, want 2 and 1.5", counts["sluice_throttle_grant_wait_seconds"], sums["sluice_throttle_grant_wait_seconds"])
	}
	if counts["sluice_store_operation_seconds/hit"] != 2 || counts["sluice_store_operation_seconds/acquire"] != 2 {
		t.Errorf("store histograms: %v", counts)
	}
	for _, op := range StoreOps {
		if _, ok := counts["sluice_store_operation_seconds/"+op]; !ok {
			t.Errorf("no store histogram for %s: want one per operation, from the start", op)
		}
	}
}

func TestKillReasonOf(t *testing.T) {
	for msg, want := range map[string]string{
		"Worker has processed 500 requests":                   KillMaxRequests,
		"Worker has exceeded maximum lifetime of 300 seconds": KillLifetime,
		"Idle timeout": KillIdle,
		"Busy timeout": KillBusyTimeout,
		"New generation -- forcing reread of filter rules": KillReread,
		"Forcing reread of filter rules":                   KillReread,
		"Error talking to worker process":                  KillIOError,
		"EventTcp_ReadBuf failed":                          KillIOError,
		"something new":                                    Overflow,
	} {
		if got := KillReasonOf(msg); got != want {
			t.Errorf("KillReasonOf(%q) = %q, want %q", msg, got, want)
		}
	}
}

// BenchmarkDecision measures the hot path: one decision counted under a
// label set seen before, from many goroutines at once.
func BenchmarkDecision(b *testing.B) {
	m, _ := newTest(b)
	rules := []string{"per-client", "per-sender", "per-recipient-domain", "outbound"}
	verdicts := []string{"DUNNO", "DEFER"}
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			m.Decision("policy", rules[i&3], verdicts[i>>2&1])
			i++
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				m.Decision("policy", rules[i&3], verdicts[i>>2&1])
				i++
			}
		})
	})
	b.Run("nil", func(b *testing.B) {
		var m *Metrics
		b.ReportAllocs()
		for b.Loop() {
			m.Decision("policy", "per-client", "DEFER")
		}
	})
}

const allParts = PartDecisions | PartClasses | PartPool | PartPoolEvents | PartThrottle | PartStore | PartConfig

// names returns the metric names reg serves.
func names(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, mf := range mfs {
		out = append(out, mf.GetName())
	}
	return strings.Join(out, " ")
}

// TestPartsServeOnlyTheirSeries: sluice mux serves the pool and no
// limiter, throttle or config series; sluice serve serves no pool series
// until it reads a pool, and never the kills only the multiplexor sees;
// the store error counters exist at 0 before any error.
func TestPartsServeOnlyTheirSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := New(reg, PartPool|PartPoolEvents); err != nil {
		t.Fatal(err)
	}
	got := names(t, reg)
	if got != "sluice_pool_activations_total sluice_pool_busy_timeouts_total sluice_pool_kills_total sluice_pool_queue_length sluice_pool_queue_size sluice_pool_slots" {
		t.Errorf("mux series: %s", got)
	}

	reg = prometheus.NewRegistry()
	m, err := New(reg, PartDecisions|PartClasses|PartStore|PartConfig)
	if err != nil {
		t.Fatal(err)
	}
	got = names(t, reg)
	if strings.Contains(got, "pool") || strings.Contains(got, "throttle") {
		t.Errorf("serve without pool and throttle: %s", got)
	}
	want := `
# HELP sluice_store_errors_total Limiter store operations that failed, by operation.
# TYPE sluice_store_errors_total counter
`
	for _, op := range []string{"acquire", "cancel", "hit", "peek", "release", "reserve", "undo"} {
		want += fmt.Sprintf("sluice_store_errors_total{op=%q} 0\n", op)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "sluice_store_errors_total"); err != nil {
		t.Error(err)
	}
	m.Pool(PoolState{Idle: 2, QueueSize: 5})
	m.Pool(PoolState{Idle: 3, QueueSize: 5})
	got = names(t, reg)
	if !strings.Contains(got, "sluice_pool_slots") || !strings.Contains(got, "sluice_pool_queue_size") || strings.Contains(got, "kills") || strings.Contains(got, "busy_timeouts") {
		t.Errorf("serve after reading a pool: %s", got)
	}
	if v := testutil.ToFloat64(m.poolSlots.WithLabelValues("idle")); v != 3 {
		t.Errorf("idle slots %v", v)
	}
}

// TestOperationsDocListsEverySeries: docs/operations.md's metrics table
// names exactly the series sluice serves.
func TestOperationsDocListsEverySeries(t *testing.T) {
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	inDoc := map[string]bool{}
	for _, line := range strings.Split(string(doc), "\n") {
		if strings.HasPrefix(line, "| `sluice_") {
			for _, m := range regexp.MustCompile("`(sluice_[a-z_]+)`").FindAllStringSubmatch(strings.SplitN(line, "|", 3)[1], -1) {
				inDoc[m[1]] = true
			}
		}
	}
	m, _ := newTest(t)
	var served []string
	for _, cs := range m.collectors() {
		for _, c := range cs {
			ch := make(chan *prometheus.Desc, 8)
			c.Describe(ch)
			close(ch)
			for d := range ch {
				served = append(served, regexp.MustCompile(`fqName: "([^"]+)"`).FindStringSubmatch(d.String())[1])
			}
		}
	}
	if len(served) < 15 {
		t.Fatalf("only %d series: %v", len(served), served)
	}
	for _, name := range served {
		if !inDoc[name] {
			t.Errorf("%s is not in docs/operations.md's metrics table", name)
		}
		delete(inDoc, name)
	}
	for name := range inDoc {
		t.Errorf("docs/operations.md lists %s, which sluice does not serve", name)
	}
}

// fastFail is a store error that says whether it was a fast failure.
type fastFail bool

func (f fastFail) Error() string  { return "fast fail" }
func (f fastFail) FastFail() bool { return bool(f) }

// TestMTAShare: the fair share's figures are set with a capacity and
// dropped without one.
func TestMTAShare(t *testing.T) {
	m, reg := newTest(t)
	m.MTA(MTAState{Capacity: 100, Open: 81, Free: 19, Share: &ShareState{Budget: 80, Networks: 11, Sessions: 81, Largest: 8, PerNet: 7, Busy: 12}})
	want := `
# HELP sluice_mta_share The fair share of the classes without a reservation: budget (the sessions they hold before each network is held to a share), networks and sessions (theirs), largest (one network's most), per_net (the share now, 0 while everyone fits), busy_networks (networks refused a session, or admitted one beyond their first, in the last minute: past the budget they get none); absent without a capacity.
# TYPE sluice_mta_share gauge
sluice_mta_share{figure="budget"} 80
sluice_mta_share{figure="largest"} 8
sluice_mta_share{figure="networks"} 11
sluice_mta_share{figure="per_net"} 7
sluice_mta_share{figure="busy_networks"} 12
sluice_mta_share{figure="sessions"} 81
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "sluice_mta_share"); err != nil {
		t.Fatal(err)
	}
	m.MTA(MTAState{Open: 3})
	if n := testutil.CollectAndCount(m.mtaShare); n != 0 {
		t.Fatalf("%d share series without a capacity", n)
	}
}
