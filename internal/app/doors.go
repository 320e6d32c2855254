package app

import (
	"context"
	"fmt"
	"net"

	"sluice/internal/anvil"
	"sluice/internal/config"
	"sluice/internal/milter"
	"sluice/internal/netserve"
	"sluice/internal/policy"
	"sluice/internal/throttle"
	"sluice/internal/web"
)

// frontEnd is one door as bind makes it: whether the configuration
// turns it on, where it listens, and how its server is made (start makes
// the server and returns its Serve).
type frontEnd struct {
	name   string
	on     bool
	listen []string
	socket config.Socket
	start  func() func(net.Listener) error
}

// frontEnds are the doors of cfg, in the order bind makes them.
func (d *Daemon) frontEnds(cfg *config.Config) []frontEnd {
	a, p, t, m, w, k := cfg.Anvil, cfg.Policy, cfg.Throttle, cfg.Milter, cfg.Web, cfg.Control
	kl, ks := controlSocket(k)
	return []frontEnd{
		{"anvil", a.Enabled, a.Listen, a.Socket, func() func(net.Listener) error { return d.newAnvil(a) }},
		{"policy", p.Enabled, p.Listen, p.Socket, func() func(net.Listener) error { return d.newPolicy(p) }},
		{"throttle", t.Enabled, t.Listen, t.Socket, func() func(net.Listener) error { return d.newThrottle(t) }},
		{"milter", m.Enabled, m.Listen, m.Socket, func() func(net.Listener) error { return d.newMilter(cfg) }},
		{"web", len(w.Listen) > 0, w.Listen, w.Socket, func() func(net.Listener) error { return d.newWeb(w) }},
		{"control", k.Enabled, kl, ks, func() func(net.Listener) error { return d.newControl(k) }},
	}
}

// bind creates the front ends and binds their listeners.
func (d *Daemon) bind(cfg *config.Config) error {
	for _, dr := range d.frontEnds(cfg) {
		if !dr.on {
			continue
		}
		if err := d.listenAll(cfg, dr.name, dr.listen, dr.socket, dr.start()); err != nil {
			return err
		}
	}
	if cfg.Milter.Enabled && cfg.Milter.PauseWhenFull {
		d.gateMilter()
	}
	if err := d.dropUnnamed(); err != nil {
		return err
	}
	if n := d.src.handoff.Left(); n > 0 {
		return fmt.Errorf("the root phase passed %d sockets more than the configuration binds (was it changed while sluice started?)", n)
	}
	return nil
}

// sessions adapts a front end that opens a session per connection: each
// session asks the governor in force at each request, so a reload
// applies to streams already open.
type sessions[S any] func() S

// NewSession opens a session.
func (f sessions[S]) NewSession() S { return f() }

func (d *Daemon) newAnvil(a config.Anvil) func(net.Listener) error {
	d.anvil = anvil.NewServer(anvil.Options{
		Handler:    anvilHandler{d},
		Logger:     d.log,
		NoAnnounce: !a.Announce,
		ConnLimits: netserve.ConnLimits{MaxConns: a.MaxConns, PeerLimits: d.peerLimits("anvil", a.PeerRules), IdleTimeout: idle(a.IdleTimeout.D()), RequestTimeout: a.RequestTimeout.D()},
		MaxLine:    a.MaxLine,
	})
	return d.anvil.Serve
}

func (d *Daemon) newPolicy(p config.Policy) func(net.Listener) error {
	d.policy = policy.NewServer(policy.Options{
		Handler:    sessions[policy.Session](func() policy.Session { return &policySession{d: d} }),
		Logger:     d.log,
		ConnLimits: netserve.ConnLimits{MaxConns: p.MaxConns, PeerLimits: d.peerLimits("policy", p.PeerRules), IdleTimeout: idle(p.IdleTimeout.D()), RequestTimeout: p.RequestTimeout.D()},
		Limits:     policy.Limits{MaxLine: p.MaxLine, MaxAttrs: p.MaxAttrs, MaxRequest: p.MaxRequest},
	})
	return d.policy.Serve
}

func (d *Daemon) newThrottle(t config.Throttle) func(net.Listener) error {
	if d.throttleBan == nil {
		d.throttleBan = d.openBanGuard()
	}
	reportUsers, reportGroups := t.Reporters()
	trust := peerTrust("throttle reports", reportUsers, reportGroups, d.log.Warn)
	d.throttle = throttle.NewServer(throttle.Options{
		Handler:        throttleHandler{d},
		Logger:         d.log,
		MaxConns:       t.MaxConns,
		PeerLimits:     d.peerLimits("throttle", t.PeerRules),
		RequestTimeout: t.RequestTimeout.D(),
		LogDefer:       d.logThrottleDefer,
		TrustReport:    trust.trusts,
	})
	return func(l net.Listener) error {
		// The wrapper's group is the socket's, whoever made it (sluice
		// from [throttle.socket], or systemd from SocketGroup=).
		if t.ReportGroups == nil {
			if gid := trust.addSocketGroup(l); gid != "" {
				d.log.Debug("throttle: reports trusted from the socket's group", "socket", l.Addr().String(), "gid", gid)
			}
		}
		return d.throttle.Serve(l)
	}
}

func (d *Daemon) newMilter(cfg *config.Config) func(net.Listener) error {
	o := milterOptions(cfg.Milter)
	o.Handler, o.Logger = d.milterHandler(cfg), d.log
	o.Protocol = milterNoReply(o.Handler)
	o.PeerLimits = d.peerLimits("milter", cfg.Milter.PeerRules)
	d.milter = milter.NewServer(o)
	return d.milter.Serve
}

// gateMilter pauses the milter's accepting while every class is full.
// The gate wraps the listener itself, so that closing it (Shutdown's
// first stage) also ends a paused Accept.
func (d *Daemon) gateMilter() {
	full := func() bool { return d.gov.Load().ClassesFull(context.Background()) }
	for i, bl := range d.listeners {
		if bl.door == "milter" {
			d.listeners[i].l = newGatedListener(bl.l, full, d.milterGate, d.log)
		}
	}
}

func (d *Daemon) newWeb(w config.Web) func(net.Listener) error {
	o := web.Options{
		Source:        web.SourceFunc(d.Status),
		Logger:        d.log,
		MaxStreams:    w.MaxStreams,
		MaxConns:      w.MaxConns,
		StatusOnTCP:   w.StatusOnInet,
		StatusSetting: "[web] status_on_inet = true",
	}
	if w.MaxStreams == 0 {
		o.MaxStreams = -1 // none: pages poll
	}
	o.MaxConnsPerPeer = w.MaxConnsPerPeer
	if w.MaxConnsPerPeer == 0 {
		o.MaxConnsPerPeer = -1 // no per-peer cap
	}
	if d.registry != nil {
		o.Gatherer = d.registry
	}
	d.web = web.New(o)
	return d.web.Serve
}
