package muxd

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime"

	"sluice/internal/mux"
	"sluice/internal/pool"
	"sluice/internal/socketmap"
	"sluice/internal/syslog"
)

// running is the serving daemon's parts, from the pool's start to its
// stop.
type running struct {
	d                   *daemon
	log                 *slog.Logger
	listeners           []listener
	stats               *mux.StatsLog // -t or -T, else nil
	eventLog            *os.File      // -d, else nil
	web                 *webServer    // Options.Web, else nil
	notifier            *mux.Notifier // -O's sender (always made; served with -O)
	pool                *pool.Pool
	srv                 *mux.Server
	mapSrv              *socketmap.Server // -N, else nil
	stopPool            context.CancelFunc
	runDone             chan error // the pool's Run
	runEnded            bool       // Run returned before stop (runErr)
	runErr              error
	serveDone           chan error // one per listener
	notifying           bool
	notifyDone, mapDone chan error
	// The -O and -N listening sockets, for an upgrade to hand over.
	notifyLn, mapLn net.Listener
	// upgraded is set once a new multiplexor serves: this one exits
	// without removing anything of it.
	upgraded bool
}

// serve runs the pool and the sockets until SIGTERM or ctx ends. SIGINT
// rereads the filter rules (a new worker generation) and SIGHUP reopens
// the stats file, as the reference does.
func (d *daemon) serve(ctx context.Context, listeners []listener) int {
	// One P, unless GOMAXPROCS says otherwise: the multiplexor's work is
	// one goroutine's (the pool's owner), and with more Ps the goroutines
	// it wakes (the reactor's waiter, connection goroutines) wake another
	// thread that spins looking for work, costing CPU for no throughput.
	// The reference is single-threaded too.
	if os.Getenv("GOMAXPROCS") == "" {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	}
	o := d.o
	facility, _ := syslog.FacilityCode(o.Facility)
	sysl := syslog.Open(syslog.Options{Path: o.SyslogSocket, Tag: o.Label, Facility: facility, Fallback: d.stderr})
	defer sysl.Close()
	level := slog.LevelInfo // what the reference always logs; the pool gates the rest on -l
	if o.Verbose {
		level = slog.LevelDebug
	}
	r := &running{d: d, log: slog.New(sysl.Handler(level)), listeners: listeners}
	defer r.closeFiles()
	r.openFiles()
	p, err := pool.New(r.poolConfig())
	if err != nil {
		for _, l := range listeners {
			l.ln.Close()
		}
		d.removeAll(listeners)
		if r.web != nil {
			r.web.close()
		}
		return d.fail(err.Error())
	}
	sigs := notifySignals()
	defer stopSignals(sigs)
	r.startPool(p)
	if d.up != nil {
		// An upgrade's process serves nothing before its workers answer.
		if err := r.poolAnswers(); err != nil {
			r.stop()
			msg := "upgrade: the new multiplexor's workers do not answer; exiting: " + err.Error()
			r.log.Error(msg)
			return d.fail(msg)
		}
	}
	r.startDoors()
	d.ready()
	if d.up != nil {
		r.takeOver()
	}
	r.wait(ctx, sigs)
	r.stop()
	d.cleanup()
	if r.runErr != nil {
		return 1
	}
	return 0
}

// openFiles opens the stats log, the event log and the status page; a
// failure of the last two is only logged.
func (r *running) openFiles() {
	o := r.d.o
	if o.Stats != "" || o.StatsSyslog {
		so := mux.StatsOptions{Path: o.Stats, Flush: o.Flush, Logger: r.log}
		if o.StatsSyslog {
			so.Syslog = func(msg string) { r.log.Info(msg) }
		}
		r.stats = mux.OpenStats(so)
	}
	if o.DebugEvents {
		// fopen(..., "w") as the reference does; a failure is only logged.
		f, err := os.OpenFile(o.EventLog, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o666)
		if err != nil {
			r.log.Error(fmt.Sprintf("Could not open event debug log %s: %s", o.EventLog, errnoText(err)))
		} else {
			r.eventLog = f
		}
	}
	// sluice's own addition: a status page and /metrics, when asked for
	// in the environment (the command line stays the reference's).
	if o.Web != "" {
		var err error
		passed, perr := r.d.passedListener("web", func() (net.Listener, error) { return nil, nil })
		if perr != nil {
			r.log.Error(fmt.Sprintf("status page %s: the socket handed over: %v", o.Web, perr))
		}
		if r.web, err = newWebServer(o.Web, o.Version, passed); err != nil {
			r.log.Error(err.Error())
		} else if r.d.up != nil {
			r.web.keepPath = true // the old process's until this one takes over
		}
	}
	r.notifier = mux.NewNotifier(r.log, o.Cmd)
}

func (r *running) closeFiles() {
	if r.stats != nil {
		r.stats.Close()
	}
	if r.eventLog != nil {
		r.eventLog.Close()
	}
}

// poolConfig is the pool's configuration from the options.
func (r *running) poolConfig() pool.Config {
	o := r.d.o
	args := []string{"-server"}
	if o.StatusPipe {
		args = []string{"-serveru"}
	}
	if o.Rules != "" {
		args = append([]string{"-f", o.Rules}, args...)
	}
	cfg := pool.Config{
		Program: o.Program, Args: args,
		MinWorkers: o.MinWorkers, MaxWorkers: o.MaxWorkers, MaxRequests: o.MaxRequests,
		MaxLifetime: o.Lifetime, IdleTime: o.Idle, BusyTimeout: o.Busy,
		CmdTimeout: o.Cmd, SlewTime: o.Slew, ActivationSpacing: o.Spacing,
		QueueSize: o.Queue, QueueTimeout: o.QueueTimeout, DomainLimit: o.DomainLimit,
		LogStderr: o.Verbose, Events: mux.PoolLog{Logger: r.log, Verbose: o.Verbose}.Event,
		StatusPipe: o.StatusPipe, TickInterval: o.Tick, TickBands: o.Ticks,
		StatusLogInterval: o.LogInterval, LogScheduling: o.SchedLog,
		RLimitRSS: o.RLimitRSS, RLimitAS: o.RLimitAS,
		Autoscale: o.Autoscale, Embed: o.Embed,
	}
	if r.eventLog != nil {
		cfg.EventLog = slog.New(mux.NewEventLogHandler(r.eventLog))
	}
	if o.NotifySocket != "" {
		cfg.Notify = r.notifier.Notify
	}
	switch {
	case r.stats != nil && r.web != nil:
		cfg.Stats = func(ev pool.StatsEvent) { r.stats.Event(ev); r.web.statsEvent(ev) }
	case r.stats != nil:
		cfg.Stats = r.stats.Event
	case r.web != nil:
		cfg.Stats = r.web.statsEvent
	}
	return cfg
}

// startPool runs the pool (and the status page on it).
func (r *running) startPool(p *pool.Pool) {
	r.pool = p
	if r.web != nil {
		r.web.serve(p)
	}
	var poolCtx context.Context
	poolCtx, r.stopPool = context.WithCancel(context.Background())
	r.runDone = make(chan error, 1)
	go func() { r.runDone <- p.Run(poolCtx) }()
}

// serveListeners serves the main and -a sockets with a new mux.Server.
func (r *running) serveListeners() {
	r.srv = mux.New(mux.Options{Pool: r.pool, Timeout: r.d.o.Cmd, Logger: r.log})
	r.serveDone = make(chan error, len(r.listeners))
	for _, l := range r.listeners {
		go func() { r.serveDone <- r.srv.Serve(l.ln, l.privileged) }()
	}
}

// startDoors runs the multiplexor on every listener, then the -O and -N
// sockets.
func (r *running) startDoors() {
	o, p := r.d.o, r.pool
	r.serveListeners()
	// docs/protocols/mimedefang-multiplexor.md, "Startup" step 19: the -O and -N sockets come after the pool starts, and
	// failing to create them is only logged.
	r.notifyDone = make(chan error, 1)
	if o.NotifySocket != "" {
		if ln, err := r.d.listenAux("notify", o.NotifySocket, 5); err != nil {
			r.log.Error(fmt.Sprintf("Unable to create notification socket %s: %v", o.NotifySocket, err))
		} else {
			r.notifying, r.notifyLn = true, ln
			go func() { r.notifyDone <- r.notifier.Serve(ln) }()
		}
	}
	r.mapDone = make(chan error, 1)
	if o.MapSocket != "" {
		if ln, err := r.d.listenAux("map", o.MapSocket, o.Backlog); err != nil {
			r.log.Error(fmt.Sprintf("Unable to create socket map listening socket %s: %v", o.MapSocket, err))
		} else {
			r.mapLn = ln
			r.mapSrv = socketmap.NewServer(socketmap.PoolHandler{Pool: p}, socketmap.Options{WriteTimeout: o.Cmd, Logger: r.log})
			go func() { r.mapDone <- r.mapSrv.Serve(ln) }()
		}
	}
}

// stop is docs/protocols/mimedefang-multiplexor.md, "Signals": files and sockets first, then clients see EOF, then the
// workers: stdin closed, SIGTERM after 10 s, SIGKILL after 10 more.
func (r *running) stop() {
	if r.d.o.Verbose && !r.upgraded {
		r.log.Info("Received SIGTERM: Stopping workers and terminating")
	}
	r.d.removeAll(r.listeners)
	if r.srv == nil { // an upgrade's process whose workers did not answer
		for _, l := range r.listeners {
			l.ln.Close()
		}
	} else {
		r.srv.Close()
		for range r.listeners {
			<-r.serveDone
		}
	}
	if r.mapSrv != nil {
		r.mapSrv.Close()
		<-r.mapDone
	}
	r.notifier.Close()
	if r.notifying {
		<-r.notifyDone
	}
	r.stopPool()
	if !r.runEnded {
		<-r.runDone
	}
	if r.web != nil {
		r.web.close()
	}
}
