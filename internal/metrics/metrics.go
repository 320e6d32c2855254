// Package metrics holds sluice's Prometheus collectors: one Metrics value,
// registered on an injected Registerer, with small typed methods that the
// wiring calls and that cost nothing on a nil *Metrics.
//
// Label values are bounded: doors, rules, verdicts, classes, store
// operations and reload results come from code or config, never from a
// peer, and each label set is capped (see MaxSeries) so a misuse cannot
// grow the registry without end. Client addresses and keys are never
// labels.
package metrics

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
)

// Namespace prefixes every metric name.
const Namespace = "sluice"

// MaxSeries caps the distinct label sets of each labelled metric. Past
// it, new label sets are counted under the value Overflow.
const MaxSeries = 1000

// Overflow replaces a label value once MaxSeries label sets exist, and a
// kill reason outside the known ones.
const Overflow = "_other"

// maxLabelLen cuts label values, as config names could be long.
const maxLabelLen = 64

// Kill reasons for PoolKill; any other reason is counted as Overflow.
const (
	KillMaxRequests = "max_requests" // the worker served its request quota
	KillLifetime    = "lifetime"     // the worker reached its maximum age
	KillIdle        = "idle"         // an idle worker was reaped
	KillBusyTimeout = "busy_timeout" // the worker did not answer in time
	KillReread      = "reread"       // a new generation of filter rules
	KillIOError     = "io_error"     // talking to the worker failed
)

// KillReasonOf maps the pool's kill message (the text it logs, or the
// reason="..." of its KillWorker stats event) to a Kill constant, or
// Overflow for a message it does not know.
func KillReasonOf(msg string) string {
	switch {
	case strings.HasPrefix(msg, "Worker has processed"):
		return KillMaxRequests
	case strings.HasPrefix(msg, "Worker has exceeded maximum lifetime"):
		return KillLifetime
	case msg == "Idle timeout":
		return KillIdle
	case msg == "Busy timeout":
		return KillBusyTimeout
	case strings.Contains(msg, "reread of filter rules"):
		return KillReread
	case msg == "Error talking to worker process", msg == "EventTcp_ReadBuf failed":
		return KillIOError
	}
	return Overflow
}

var killReasons = []string{KillMaxRequests, KillLifetime, KillIdle, KillBusyTimeout, KillReread, KillIOError}

// Slot states for the pool's slot gauge, as mimedefang-multiplexor names
// them.
var slotStates = [...]string{"stopped", "idle", "busy", "killed"}

// Reload results for Reload.
const (
	ReloadOK     = "success"
	ReloadFailed = "failure"
)

// Part is a group of series. Each process registers only the parts that
// mean something in it (see New): sluice serve has no worker pool of its
// own, sluice mux no limiter, throttle or configuration.
type Part uint

// The parts.
const (
	PartDecisions Part = 1 << iota // sluice_decisions_total
	PartClasses                    // sluice_class_sessions, sluice_class_cap_sessions
	// PartPool is a worker pool's shape: sluice_pool_slots,
	// _queue_length, _queue_size and _activations_total. When not given
	// to New, it is registered at the first Pool call (sluice serve,
	// once it has read a multiplexor's pool at mux_socket).
	PartPool
	// PartPoolEvents is what only the multiplexor sees:
	// sluice_pool_kills_total and sluice_pool_busy_timeouts_total.
	PartPoolEvents
	PartThrottle // sluice_throttle_waiters, sluice_throttle_grant_wait_seconds
	PartStore    // sluice_store_operation_seconds, sluice_store_errors_total, sluice_store_fast_failures_total, sluice_state_degraded
	PartConfig   // sluice_config_reloads_total, ..._last_reload_success_timestamp_seconds
)

// StoreOps are the store operations StoreOp is called with; their error
// counters and latency histograms exist from the start, at 0, so that an
// alert on their increase works before the first error (and an operation
// finds its histogram without a lookup).
var StoreOps = storeOps[:]

var storeOps = [...]string{"hit", "peek", "undo", "reserve", "cancel", "acquire", "release"}

// Metrics holds every sluice collector. Create it with New; the zero
// value is not usable, but a nil *Metrics is: every method on it does
// nothing.
type Metrics struct {
	reg      prometheus.Registerer
	parts    Part
	poolOnce sync.Once

	decisions *counters // door, rule, verdict

	classSessions *prometheus.GaugeVec // class, direction
	classCap      *prometheus.GaugeVec // class, direction
	mtaSessions   *prometheus.GaugeVec // state
	mtaShare      *prometheus.GaugeVec // figure
	classMu       sync.Mutex
	classNames    map[string]struct{}

	poolSlots       *prometheus.GaugeVec // state
	poolQueued      prometheus.Gauge
	poolQueueSize   prometheus.Gauge
	poolActivations prometheus.Counter
	poolKills       *prometheus.CounterVec // reason
	poolBusyTimeout prometheus.Counter
	actMu           sync.Mutex
	actSeen         uint64

	throttleWaiters prometheus.Gauge
	throttleGrant   prometheus.Histogram
	throttleKeys    throttleKeys

	storeLatency   *histograms                        // op
	storeOpLat     [len(storeOps)]prometheus.Observer // StoreOps' series of storeLatency
	storeErrors    *counters                          // op
	storeFastFails *counters                          // op
	stateDegraded  prometheus.Gauge

	reloads    *prometheus.CounterVec // result
	lastReload prometheus.Gauge
}

// New creates the collectors and registers on reg those of parts (an OR
// of Part values). It fails only if reg already holds collectors of the
// same names.
func New(reg prometheus.Registerer, parts Part) (*Metrics, error) {
	m := &Metrics{
		reg:   reg,
		parts: parts,
		decisions: newCounters(counterVec("", "decisions_total",
			"Decisions made, by door, rule and verdict.",
			"door", "rule", "verdict")),
		classSessions: gaugeVec("", "class_sessions",
			"Open sessions of a peer class: incoming ones, and the total of incoming and outgoing.",
			"class", "direction"),
		classCap: gaugeVec("", "class_cap_sessions",
			"A peer class's caps: incoming (refuse), total (queue) and reserve (its reservation of the MTA's sessions); absent when uncapped.",
			"class", "direction"),
		mtaSessions: gaugeVec("mta", "sessions",
			"The MTA's SMTP sessions: capacity (absent when unknown), open (every class's), reserved_unused (reservations their classes do not use), free (neither open nor reserved).",
			"state"),
		mtaShare: gaugeVec("mta", "share",
			"The fair share of the classes without a reservation: budget (the sessions they hold before each network is held to a share), networks and sessions (theirs), largest (one network's most), per_net (the share now, 0 while everyone fits), busy_networks (networks refused a session, or admitted one beyond their first, in the last minute: past the budget they get none); absent without a capacity.",
			"figure"),
		classNames: map[string]struct{}{},
		poolSlots: gaugeVec("pool", "slots",
			"Worker slots by state (stopped, idle, busy, killed).",
			"state"),
		poolQueued: gauge("pool", "queue_length",
			"Requests waiting in the pool's queue for a free worker."),
		poolQueueSize: gauge("pool", "queue_size",
			"The pool queue's capacity."),
		poolActivations: counter("pool", "activations_total",
			"Worker processes started."),
		poolKills: counterVec("pool", "kills_total",
			"Worker processes told to exit, by reason.",
			"reason"),
		poolBusyTimeout: counter("pool", "busy_timeouts_total",
			"Requests whose worker did not answer within the busy timeout."),
		throttleWaiters: gauge("throttle", "waiters",
			"Throttled senders holding a reservation and waiting for their slot."),
		throttleGrant: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: Namespace, Subsystem: "throttle", Name: "grant_wait_seconds",
			Help:    "How long a throttled sender was told to wait for its slot.",
			Buckets: []float64{0, .01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600},
		}),
		storeLatency: newHistograms(prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Subsystem: "store", Name: "operation_seconds",
			Help:    "Latency of limiter store operations, by operation.",
			Buckets: []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
		}, []string{"op"})),
		storeErrors: newCounters(counterVec("store", "errors_total",
			"Limiter store operations that failed, by operation.",
			"op")),
		storeFastFails: newCounters(counterVec("store", "fast_failures_total",
			"Limiter store operations failed at once without trying the store (the Redis store's circuit breaker is open), by operation; each also counts as an error.",
			"op")),
		stateDegraded: gauge("state", "degraded",
			"1 while the state the last run left (counts, throttle marks) is not restored: a state file was unreadable, another user's or refused; sluice status says why."),
		reloads: counterVec("config", "reloads_total",
			"Configuration reloads, by result (success, failure).",
			"result"),
		lastReload: gauge("config", "last_reload_success_timestamp_seconds",
			"When the configuration was last loaded successfully (Unix seconds)."),
	}
	for _, st := range slotStates {
		m.poolSlots.WithLabelValues(st)
	}
	for _, r := range killReasons {
		m.poolKills.WithLabelValues(r)
	}
	m.poolKills.WithLabelValues(Overflow)
	m.reloads.WithLabelValues(ReloadOK)
	m.reloads.WithLabelValues(ReloadFailed)
	for i, op := range StoreOps {
		m.storeOpLat[i] = m.storeLatency.get(op)
		m.storeErrors.get(op)
		m.storeFastFails.get(op)
	}
	for part, cs := range m.collectors() {
		if parts&part == 0 {
			continue
		}
		for _, c := range cs {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

// opts names a series sluice_<subsystem>_<name> (sluice_<name> without
// a subsystem).
func opts(subsystem, name, help string) prometheus.Opts {
	return prometheus.Opts{Namespace: Namespace, Subsystem: subsystem, Name: name, Help: help}
}

func gauge(subsystem, name, help string) prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts(opts(subsystem, name, help)))
}

func gaugeVec(subsystem, name, help string, labels ...string) *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts(opts(subsystem, name, help)), labels)
}

func counter(subsystem, name, help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts(opts(subsystem, name, help)))
}

func counterVec(subsystem, name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts(opts(subsystem, name, help)), labels)
}

// collectors returns the collectors of each part.
func (m *Metrics) collectors() map[Part][]prometheus.Collector {
	return map[Part][]prometheus.Collector{
		PartDecisions:  {m.decisions.vec},
		PartClasses:    {m.classSessions, m.classCap, m.mtaSessions, m.mtaShare},
		PartPool:       {m.poolSlots, m.poolQueued, m.poolQueueSize, m.poolActivations},
		PartPoolEvents: {m.poolKills, m.poolBusyTimeout},
		PartThrottle:   {m.throttleWaiters, m.throttleGrant, &m.throttleKeys},
		PartStore:      {m.storeLatency.vec, m.storeErrors.vec, m.storeFastFails.vec, m.stateDegraded},
		PartConfig:     {m.reloads, m.lastReload},
	}
}

// Decision counts one decision of door (policy, anvil, throttle, milter,
// mux...) under rule with verdict. Rule and verdict are names from the
// config and code, never a client's address or a limiter key.
func (m *Metrics) Decision(door, rule, verdict string) {
	if m == nil {
		return
	}
	m.decisions.get3(door, rule, verdict).Inc()
}

// ClassState is one peer class's occupancy and caps. A cap of 0 means
// none, as in limiter.Class.
type ClassState struct {
	Name        string // the class's name
	Incoming    int64  // open incoming sessions
	Total       int64  // open sessions either way
	IncomingCap int64  // refuse cap
	TotalCap    int64  // queue cap
	Reserve     int64  // its reservation of the MTA's sessions
}

// Classes sets the occupancy and caps of every class, and drops the series
// of classes no longer listed (after a reload).
func (m *Metrics) Classes(list []ClassState) {
	if m == nil {
		return
	}
	m.classMu.Lock()
	defer m.classMu.Unlock()
	seen := make(map[string]struct{}, len(list))
	for _, c := range list {
		name := cut(c.Name)
		if _, ok := seen[name]; ok {
			continue
		}
		if len(seen) >= MaxSeries/2 {
			break
		}
		seen[name] = struct{}{}
		m.classSessions.WithLabelValues(name, "incoming").Set(float64(c.Incoming))
		m.classSessions.WithLabelValues(name, "total").Set(float64(c.Total))
		setCap(m.classCap, name, "incoming", c.IncomingCap)
		setCap(m.classCap, name, "total", c.TotalCap)
		setCap(m.classCap, name, "reserve", c.Reserve)
	}
	for name := range m.classNames {
		if _, ok := seen[name]; !ok {
			m.classSessions.DeletePartialMatch(prometheus.Labels{"class": name})
			m.classCap.DeletePartialMatch(prometheus.Labels{"class": name})
		}
	}
	m.classNames = seen
}

// MTAState is the MTA's sessions as sluice counts them.
type MTAState struct {
	Capacity       int64       // sessions the MTA serves at once (0: unknown)
	Open           int64       // every class's open sessions
	ReservedUnused int64       // reserved sessions their classes do not use
	Free           int64       // neither open nor reserved (with a capacity)
	Share          *ShareState // the fair share (nil without a capacity)
}

// ShareState is the fair share of the classes without a reservation.
type ShareState struct {
	Budget, Networks, Sessions, Largest, PerNet, Busy int64
}

// MTA sets the MTA's session gauges; capacity and free are absent while
// the capacity is unknown.
func (m *Metrics) MTA(s MTAState) {
	if m == nil {
		return
	}
	m.mtaSessions.WithLabelValues("open").Set(float64(s.Open))
	m.mtaSessions.WithLabelValues("reserved_unused").Set(float64(s.ReservedUnused))
	if s.Capacity > 0 {
		m.mtaSessions.WithLabelValues("capacity").Set(float64(s.Capacity))
		m.mtaSessions.WithLabelValues("free").Set(float64(s.Free))
	} else {
		m.mtaSessions.DeleteLabelValues("capacity")
		m.mtaSessions.DeleteLabelValues("free")
	}
	if sh := s.Share; sh != nil {
		for _, f := range []struct {
			name string
			v    int64
		}{{"budget", sh.Budget}, {"networks", sh.Networks}, {"sessions", sh.Sessions}, {"largest", sh.Largest}, {"per_net", sh.PerNet}, {"busy_networks", sh.Busy}} {
			m.mtaShare.WithLabelValues(f.name).Set(float64(f.v))
		}
	} else {
		m.mtaShare.Reset()
	}
}

func setCap(v *prometheus.GaugeVec, class, dir string, n int64) {
	if n <= 0 {
		v.DeleteLabelValues(class, dir)
		return
	}
	v.WithLabelValues(class, dir).Set(float64(n))
}

// PoolState is the worker pool's shape at one moment.
type PoolState struct {
	Stopped, Idle, Busy, Killed int // slots in each state
	Queued                      int // requests waiting
	QueueSize                   int // the queue's capacity
	// Activations is the pool's running count of workers started. The
	// counter advances by its growth since the last call; a smaller value
	// (a new pool after a restart) counts in full.
	Activations uint64
}

// Pool sets the pool gauges from a snapshot and advances the activation
// counter. The first call registers PartPool if New was not given it.
func (m *Metrics) Pool(s PoolState) {
	if m == nil {
		return
	}
	if m.parts&PartPool == 0 {
		m.poolOnce.Do(func() {
			for _, c := range m.collectors()[PartPool] {
				_ = m.reg.Register(c) // cannot clash: New registered the other parts' names
			}
		})
	}
	for i, n := range [...]int{s.Stopped, s.Idle, s.Busy, s.Killed} {
		m.poolSlots.WithLabelValues(slotStates[i]).Set(float64(n))
	}
	m.poolQueued.Set(float64(s.Queued))
	m.poolQueueSize.Set(float64(s.QueueSize))
	m.actMu.Lock()
	delta := s.Activations
	if s.Activations >= m.actSeen {
		delta = s.Activations - m.actSeen
	}
	m.actSeen = s.Activations
	m.actMu.Unlock()
	if delta > 0 {
		m.poolActivations.Add(float64(delta))
	}
}

// PoolKill counts a worker told to exit; reason is one of the Kill
// constants (others count as Overflow; see KillReasonOf).
func (m *Metrics) PoolKill(reason string) {
	if m == nil {
		return
	}
	for _, r := range killReasons {
		if r == reason {
			m.poolKills.WithLabelValues(r).Inc()
			return
		}
	}
	m.poolKills.WithLabelValues(Overflow).Inc()
}

// PoolBusyTimeout counts a request whose worker hit the busy timeout.
func (m *Metrics) PoolBusyTimeout() {
	if m == nil {
		return
	}
	m.poolBusyTimeout.Inc()
}

// ThrottleWaiters sets how many throttled senders are waiting.
func (m *Metrics) ThrottleWaiters(n int) {
	if m == nil {
		return
	}
	m.throttleWaiters.Set(float64(n))
}

// ThrottleGrant records the wait a throttled sender was granted.
func (m *Metrics) ThrottleGrant(wait time.Duration) {
	if m == nil {
		return
	}
	m.throttleGrant.Observe(max(wait, 0).Seconds())
}

// StoreOp records one store operation (hit, peek, undo, reserve, cancel,
// acquire, release, held...) that took d; a non-nil err also counts an
// error for op, and a fast failure (FastFailer) when it is one.
func (m *Metrics) StoreOp(op string, d time.Duration, err error) {
	if m == nil {
		return
	}
	if i := slices.Index(StoreOps, op); i >= 0 {
		m.storeOpLat[i].Observe(max(d, 0).Seconds())
	} else {
		m.storeLatency.get(op).Observe(max(d, 0).Seconds())
	}
	if err != nil {
		m.storeErrors.get(op).Inc()
		if ff, ok := errors.AsType[FastFailer](err); ok && ff.FastFail() {
			m.storeFastFails.get(op).Inc()
		}
	}
}

// FastFailer is an error of a store operation that says whether the
// store failed it at once, without trying (the Redis store's circuit
// breaker); StoreOp counts those in sluice_store_fast_failures_total too.
type FastFailer interface {
	error
	FastFail() bool
}

// StateDegraded sets sluice_state_degraded: whether the state the last
// run left is not restored.
func (m *Metrics) StateDegraded(degraded bool) {
	if m == nil {
		return
	}
	v := 0.0
	if degraded {
		v = 1
	}
	m.stateDegraded.Set(v)
}

// Reload counts a configuration reload; a success at time at also sets
// the last-success timestamp. The initial load counts as a success too.
func (m *Metrics) Reload(ok bool, at time.Time) {
	if m == nil {
		return
	}
	if !ok {
		m.reloads.WithLabelValues(ReloadFailed).Inc()
		return
	}
	m.reloads.WithLabelValues(ReloadOK).Inc()
	m.lastReload.Set(float64(at.UnixNano()) / 1e9)
}

// cut makes s a valid label value: valid UTF-8 (client_golang panics on
// anything else), at most maxLabelLen bytes, cut at a rune boundary.
func cut(s string) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "?")
	}
	if len(s) <= maxLabelLen {
		return s
	}
	n := maxLabelLen
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// counters is a CounterVec with a lock-free cache of its children and a
// cap on their number.
type counters struct {
	vec   *prometheus.CounterVec
	cache sync.Map // key3 -> *child
	// last is the child found last: a door asks for the same one again
	// and again (a session admitted), and comparing its labels costs
	// less than hashing them.
	last atomic.Pointer[child]
	n    atomic.Int64
	mu   sync.Mutex
}

type key3 struct{ a, b, c string }

// child is a cached child and its labels.
type child struct {
	k key3
	c prometheus.Counter
}

func newCounters(v *prometheus.CounterVec) *counters { return &counters{vec: v} }

// get3 returns the child for three label values.
func (c *counters) get3(a, b, d string) prometheus.Counter {
	return c.lookup(key3{a, b, d}, 3)
}

// get returns the child for one label value.
func (c *counters) get(a string) prometheus.Counter {
	return c.lookup(key3{a: a}, 1)
}

// lookup returns the child for k, whose first n labels are the vector's.
func (c *counters) lookup(k key3, n int) prometheus.Counter {
	if l := c.last.Load(); l != nil && l.k == k {
		return l.c
	}
	if v, ok := c.cache.Load(k); ok {
		ch := v.(*child)
		c.last.Store(ch)
		return ch.c
	}
	return c.slow(k, []string{k.a, k.b, k.c}[:n])
}

func (c *counters) slow(k key3, vals []string) prometheus.Counter {
	c.mu.Lock()
	defer c.mu.Unlock()
	if v, ok := c.cache.Load(k); ok {
		return v.(*child).c
	}
	if c.n.Load() >= MaxSeries {
		for i := range vals {
			vals[i] = Overflow
		}
		return c.vec.WithLabelValues(vals...) // not cached: k stays unknown
	}
	for i := range vals {
		vals[i] = cut(vals[i])
	}
	ch := &child{k: k, c: c.vec.WithLabelValues(vals...)}
	c.cache.Store(k, ch)
	c.n.Add(1)
	return ch.c
}

// histograms is a HistogramVec over one label, cached and capped as
// counters are.
type histograms struct {
	vec   *prometheus.HistogramVec
	cache sync.Map // string -> prometheus.Observer
	n     int
	mu    sync.Mutex
}

func newHistograms(v *prometheus.HistogramVec) *histograms { return &histograms{vec: v} }

func (h *histograms) get(a string) prometheus.Observer {
	if v, ok := h.cache.Load(a); ok {
		return v.(prometheus.Observer)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if v, ok := h.cache.Load(a); ok {
		return v.(prometheus.Observer)
	}
	if h.n >= MaxSeries {
		return h.vec.WithLabelValues(Overflow)
	}
	o := h.vec.WithLabelValues(cut(a))
	h.cache.Store(a, o)
	h.n++
	return o
}
