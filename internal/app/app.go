// Package app builds sluice from a validated configuration and runs it:
// it wires the protocol front ends to the governor, reloads on demand
// (build the new rules, swap, keep the old on error) and shuts down in two
// stages. It is the only package that knows every part.
package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"sluice/internal/tally"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"sluice/internal/anvil"
	"sluice/internal/ban"
	"sluice/internal/clock"
	"sluice/internal/config"
	"sluice/internal/control"
	"sluice/internal/escalate"
	"sluice/internal/governor"
	"sluice/internal/limiter"
	"sluice/internal/loglimit"
	"sluice/internal/metrics"
	"sluice/internal/milter"
	"sluice/internal/policy"
	"sluice/internal/privdrop"
	"sluice/internal/sdlisten"
	"sluice/internal/syslog"
	"sluice/internal/throttle"
	"sluice/internal/web"
)

// Daemon is a running sluice. Create it with New, then Start it.
type Daemon struct {
	path  string // config file ("" for the defaults)
	log   *slog.Logger
	level *slog.LevelVar

	cfg     atomic.Pointer[config.Config]
	gov     atomic.Pointer[governor.Governor]
	store   limiter.Store
	lim     *limiter.Limiter
	waiters *limiter.Waiters // throttle queues, kept across reloads
	snap    *snapshotter     // the memory store's file; nil when off
	state   stateHealth      // whether the last run's state was restored
	// refusals bounds refusal log lines; kept across reloads.
	refusals *governor.RefusalLog
	// carried holds the SMTP sessions the last stop handed over; kept
	// across reloads. carryOut collects, while stopping, the sessions
	// this daemon hands to the next (see Shutdown).
	carried  *governor.AnvilCarried
	pairs    *governor.SessionPairs // the anvil and milter views of one SMTP session
	shares   *governor.Shares       // the open sessions of each network, for the fair shares
	carryMu  sync.Mutex
	carryOut []string

	anvil     *anvil.Server
	policy    *policy.Server
	throttle  *throttle.Server
	milter    *milter.Server
	web       *web.Server
	listeners []boundListener

	// throttleBan reads the throttle's send results (ban signs,
	// suspension, learned limits).
	throttleBan *ban.Guard
	// marks are the per-key marks (suspensions, learned limits,
	// exemptions); exempt the exemptions read from them. Both outlive
	// reloads.
	marks   limiter.Marks
	exempt  *governor.Exemptions
	control *control.Server

	// What the status page and the metrics show.
	version      string
	started      time.Time
	generation   atomic.Int64              // 1 for the first configuration, +1 per reload
	reloadedAt   atomic.Pointer[time.Time] // when the configuration in force was loaded
	reloadFailed atomic.Pointer[time.Time] // the last failed reload
	obs          *tally.Tally              // nil without a web listener
	escalator    *escalate.Escalator       // nil without [mta.escalate] socket
	metrics      *metrics.Metrics          // nil without /metrics
	registry     *prometheus.Registry
	milterGate   *gate
	muxWarned    atomic.Bool
	// throttleWaiting counts throttle requests waiting for their grant.
	throttleWaiting atomic.Int64
	// throttleTally counts grants and deferrals for the summary at info.
	throttleTally *governor.ThrottleTally

	stop         context.Context   // ends a start cut short by a signal (WithStop)
	src          sources           // sockets passed by the root phase or systemd, claimed while binding
	stateDirFlag string            // -state-dir, which overrides the file's state_dir on reload
	runAs        *privdrop.Account // the user sluice runs as (nil: the one it was started as)

	// stopping is set when Shutdown begins: a Serve that returns before
	// is a door that failed, reported on failed.
	stopping atomic.Bool
	failed   chan error

	stopStatus context.CancelFunc
	wg         sync.WaitGroup
	mu         sync.Mutex // serialises Reload and Shutdown
}

type boundListener struct {
	door        string // "anvil", "policy"
	spec        string // as configured
	l           net.Listener
	serve       func(net.Listener) error
	fromSystemd bool // passed by systemd
}

// Config is the configuration the daemon runs: the one it started with,
// or the last one a reload applied.
func (d *Daemon) Config() *config.Config { return d.cfg.Load() }

// New builds a daemon from cfg, which must have passed Validate, and binds
// its listeners. path is the config file, reread by Reload ("" means the
// embedded defaults). level is the log level to adjust on reload.
func New(cfg *config.Config, path string, log *slog.Logger, level *slog.LevelVar, opts ...Option) (*Daemon, error) {
	d := &Daemon{path: path, log: log, level: level, started: time.Now(), milterGate: &gate{}, stop: context.Background()}
	for _, o := range opts {
		o(d)
	}
	d.cfg.Store(cfg)
	d.generation.Store(1)
	now := d.started
	d.reloadedAt.Store(&now)
	acct, err := account(cfg)
	if err != nil {
		return nil, err
	}
	if acct != nil && !acct.Current() && acct.UID != 0 {
		return nil, fmt.Errorf("user = %q: sluice runs as root here; a root start gives root up in ExecUnprivileged before New", cfg.User)
	}
	if err := prepareDirs(cfg, nil); err != nil {
		return nil, err
	}
	warnRoot(acct, log)
	d.runAs = acct
	if len(cfg.Web.Listen) > 0 {
		if cfg.Web.Metrics {
			d.registry = prometheus.NewRegistry()
			d.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
			m, err := metrics.New(d.registry, metricParts(cfg))
			if err != nil {
				return nil, fmt.Errorf("metrics: %w", err)
			}
			d.metrics = m
			m.Reload(true, now) // the initial load counts as a success
		}
		d.obs = tally.New(d.metrics)
	}
	if d.escalator, err = newEscalator(cfg, d.metrics, log); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	store, failOpen, err := openStore(d.stop, cfg, log)
	if err != nil {
		return nil, err
	}
	raw := store
	if d.metrics != nil {
		store = instrumentedStore{Store: store, m: d.metrics}
	}
	d.store = store
	d.lim = limiter.New(limiter.Options{Store: store, FailOpen: failOpen, Logger: log, KeyText: governor.StoreKeyText})
	d.waiters = limiter.NewWaiters(d.lim)
	if cfg.Store.Kind == "redis" {
		// Slots freed by other hosts are not announced: recheck.
		d.waiters.Retry = time.Second
	}
	d.refusals = governor.NewRefusalLog(log, nil, 0)
	d.throttleTally = governor.NewThrottleTally(clock.Real{})
	d.carried = governor.NewAnvilCarried()
	d.marks = d.openMarks()
	d.exempt = governor.NewExemptions(d.marks)
	if err := d.exempt.Refresh(d.stop); err != nil {
		log.Error("exemptions cannot be read; none apply until they can", "err", err)
	}
	d.pairs = governor.NewSessionPairs()
	d.shares = governor.NewShares()
	gov, err := newGovernor(cfg, d.capacity(cfg, log), d.lasting(log))
	if err != nil {
		d.store.Close()
		return nil, err
	}
	d.gov.Store(gov)
	if err := d.bind(cfg); err != nil {
		d.closeListeners()
		d.src.close()
		d.store.Close()
		return nil, err
	}
	// After binding (a second daemon on the same state directory fails
	// before it touches the file) and before serving, as the user sluice
	// runs as: a root start reaches here after ExecUnprivileged.
	d.snap = newSnapshotter(cfg, raw, log, &d.state)
	if cfg.Anvil.Enabled {
		d.takeCarry(d.stop, time.Now())
	}
	return d, nil
}

// Option adjusts how New builds a daemon.
type Option func(*Daemon)

// WithStateDir tells New that the state directory came from the command
// line (-state-dir), so that a reload keeps it instead of the file's.
func WithStateDir(dir string) Option {
	return func(d *Daemon) { d.stateDirFlag = dir }
}

// WithSockets gives New the listening sockets systemd passed (socket
// activation). A listen address bound by one of them is served on it
// instead of a new socket; a passed socket that no listen address names
// is an error, since its clients would wait on it for ever.
func WithSockets(s *sdlisten.Sockets) Option {
	return func(d *Daemon) { d.src.systemd = s }
}

// WithStop gives New a context that a stop signal ends: the steps of
// the start that wait (the connection to Redis) give up when it does.
func WithStop(ctx context.Context) Option {
	return func(d *Daemon) { d.stop = ctx }
}

// WithHandoff gives New the sockets the root phase (ExecUnprivileged)
// bound and passed across its exec: each listen address, in binding
// order, takes the next one.
func WithHandoff(h *sdlisten.Handoff) Option {
	return func(d *Daemon) { d.src.handoff = h }
}

// observer returns the verdict observer, or nil (not a nil *observer,
// which would be a non-nil interface) when nothing shows verdicts.
func (d *Daemon) observer() governor.Observer {
	switch {
	case d.escalator == nil && d.obs == nil:
		return nil
	case d.escalator == nil:
		return d.obs
	case d.obs == nil:
		return d.escalator
	}
	return observers{d.obs, d.escalator}
}

// lasting returns what every governor of the daemon shares across
// reloads: the counts, the queues and the tables of the open sessions.
func (d *Daemon) lasting(log *slog.Logger) governor.Options {
	return governor.Options{Limiter: d.lim, Waiters: d.waiters, Refusals: d.refusals, Carried: d.carried, Exemptions: d.exempt,
		Pairs: d.pairs, Shares: d.shares, Observer: d.observer(), Logger: log}
}

// SetVersion sets the version the status page shows. Call it before Start.
func (d *Daemon) SetVersion(v string) { d.version = v }

func (d *Daemon) listenAll(cfg *config.Config, door string, specs []string, sock config.Socket, serve func(net.Listener) error) error {
	mode, err := sock.FileMode()
	if err != nil {
		return err
	}
	// A socket whose owner or group is not set belongs to the user sluice
	// runs as, not to root that bound it.
	if d.runAs != nil {
		if sock.Owner == "" {
			sock.Owner = d.runAs.Name
		}
		if sock.Group == "" {
			sock.Group = d.runAs.Group
		}
	}
	for _, spec := range specs {
		l, fromSystemd, unapplied, err := listen(cfg, d.src, spec, sock, mode)
		if err != nil {
			return fmt.Errorf("%s: %w", door, err)
		}
		d.logUnapplied(door, spec, unapplied)
		d.listeners = append(d.listeners, boundListener{door: door, spec: spec, l: l, serve: serve, fromSystemd: fromSystemd})
	}
	return nil
}

// idle maps the config's 0 ("never") to the server's negative.
func idle(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// Start serves every listener and starts the periodic peak report.
func (d *Daemon) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	d.stopStatus = cancel
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		d.lim.RunStatus(ctx, d.cfg.Load().Limiter.StatusInterval.D())
	}()
	if d.snap != nil {
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			d.snap.run(ctx)
		}()
	}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		d.refusals.Run(ctx)
	}()
	if d.exempt.Shared() {
		// Exemptions other daemons set reach this one within a second.
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			d.exempt.Run(ctx, time.Second, func(err error) { d.log.Warn("exemptions: reading them failed", "err", err) })
		}()
	}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		d.throttleTally.Run(ctx, d.log)
	}()
	d.runEscalator(ctx)
	if ban := d.throttleBan; ban != nil && ban.Shared() {
		// Suspensions and resumes other daemons make reach the
		// snapshot policies without ban settings read within a second.
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			ban.RunSuspended(ctx, time.Second, func(err error) { d.log.Warn("throttle: reading the suspensions failed", "err", err) })
		}()
	}
	d.failed = make(chan error, len(d.listeners))
	for _, bl := range d.listeners {
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			d.serveDoor(bl)
		}()
		d.log.Info(bl.door+" service listening", "listen", bl.spec, "addr", bl.l.Addr().String(), "from_systemd", bl.fromSystemd)
	}
}

// Reload rereads the config file, validates it and swaps in the new rules.
// On any error the old configuration stays and the error is returned.
// Settings that need a restart (listeners, store size) are reported.
func (d *Daemon) Reload() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	err := d.reload()
	now := time.Now()
	if err != nil {
		d.reloadFailed.Store(&now)
	} else {
		d.generation.Add(1)
		d.reloadedAt.Store(&now)
	}
	d.metrics.Reload(err == nil, now)
	return err
}

func (d *Daemon) reload() error {
	var cfg *config.Config
	if d.path == "" {
		cfg = config.Default()
		cfg.StateDir = d.cfg.Load().StateDir
	} else {
		var errs []error
		cfg, errs = config.Load(d.path)
		if len(errs) > 0 {
			return fmt.Errorf("reload %s: keeping the running configuration: %w", d.path, errors.Join(errs...))
		}
		if d.stateDirFlag != "" {
			cfg.StateDir = d.stateDirFlag
		}
	}
	gov, err := newGovernor(cfg, d.capacity(cfg, d.log), d.lasting(d.log))
	if err != nil {
		return fmt.Errorf("reload %s: keeping the running configuration: %w", d.path, err)
	}
	old := d.cfg.Load()
	for _, what := range restartNeeded(old, cfg) {
		d.log.Warn("reload: setting changed but applies only after a restart", "setting", what)
	}
	d.logRuleChanges(old, cfg)
	d.gov.Store(gov)
	d.cfg.Store(cfg)
	if d.throttleBan != nil {
		d.throttleBan.Configure(banSettings(cfg))
	}
	d.obs.Relimit(gov)
	if d.escalator != nil {
		d.escalator.Update(escalateSettings(cfg))
	}
	if d.level != nil {
		d.level.Set(logLevel(cfg.Log.Level))
	}
	d.log.Info("configuration reloaded", "file", d.path, "classes", len(gov.Classes().All()), "policy_rules", len(gov.Policy().Rules), "throttle_policies", len(gov.Throttle().Policies))
	return nil
}

// closeListeners closes the listeners of the doors named, or every
// listener if none is named.
func (d *Daemon) closeListeners(doors ...string) {
	for _, bl := range d.listeners {
		if len(doors) == 0 || slices.Contains(doors, bl.door) {
			bl.l.Close()
		}
	}
}

func logLevel(s string) slog.Level {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return slog.LevelInfo
	}
	return l
}

// NewLogger returns the logger the configuration asks for, the level
// variable Reload adjusts, and a function that flushes and closes the
// log's connection (call it last). The log goes to w (stderr) or, with
// [log] output = "syslog", to the local syslog daemon; without a syslog
// socket it falls back to w after one notice.
func NewLogger(cfg *config.Config, w io.Writer) (*slog.Logger, *slog.LevelVar, func()) {
	lv := new(slog.LevelVar)
	lv.Set(logLevel(cfg.Log.Level))
	opts := &slog.HandlerOptions{Level: lv}
	var h slog.Handler
	closeLog := func() {}
	switch {
	case cfg.Log.Output == "syslog":
		facility, _ := syslog.FacilityCode(cfg.Log.Facility)
		c := syslog.Open(syslog.Options{Path: cfg.Log.SyslogSocket, Tag: cfg.Log.Tag, Facility: facility, Fallback: w})
		h, closeLog = c.Handler(lv), func() { c.Close() }
	case cfg.Log.Format == "json":
		h = slog.NewJSONHandler(w, opts)
	default:
		h = slog.NewTextHandler(w, opts)
	}
	lim := loglimit.New(h, cfg.Log.MaxLinesPerSecond)
	return slog.New(lim), lv, func() { lim.Close(); closeLog() }
}

// close closes the sockets passed and not claimed.
func (s sources) close() {
	s.handoff.Close()
	s.systemd.Close()
}
