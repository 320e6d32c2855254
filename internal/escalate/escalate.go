// Package escalate moves the clients that keep reconnecting after their
// SMTP sessions were refused from sluice's refusals to the kernel's: an
// address refused a session After times within Within is handed, for
// For, to a privileged helper (sluice escalate-helper) that adds it to an
// nftables set whose members' connections to the SMTP ports are dropped.
// A refused reconnect costs the MTA a process's accept, a greeting and a
// question to sluice; a dropped one costs nothing above the kernel. The
// daemon keeps no capability: the helper alone changes the ruleset, and
// only adds addresses, each for a bounded time, to a bounded set.
//
// An Escalator is a governor.Observer: it reads the same record of each
// decision as the log, the metrics and the status page.
package escalate

import (
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"sluice/internal/clock"
	"sluice/internal/governor"
)

// Settings are what the configuration says of the escalation; a reload
// replaces them.
type Settings struct {
	// After refusals of an address's sessions within Within, the address
	// is dropped by the kernel for For.
	After  int
	Within time.Duration
	For    time.Duration
	// Spared names the classes never escalated (those with a
	// reservation: the peers an administrator knows).
	Spared map[string]bool
}

// MaxTracked bounds the addresses counted at once (about 100 bytes
// each). A flood from more addresses than this leaves the newest
// uncounted until a sweep of the expired makes room.
const MaxTracked = 65536

// queueLen bounds the escalations waiting for the helper; past it an
// escalation is dropped (counted) and retried at the address's next
// refusal.
const queueLen = 1024

// Escalator counts the refused sessions of each address and hands the
// persistent ones to the helper. Create it with New; Run sends its
// requests.
type Escalator struct {
	socket string
	clk    clock.Clock
	log    *slog.Logger
	set    atomic.Pointer[Settings]

	mu    sync.Mutex
	addrs map[netip.Addr]*entry
	swept time.Time
	queue chan netip.Addr

	added, failed, queueFull atomic.Uint64
	lastErr                  atomic.Pointer[string]
}

type entry struct {
	n     int       // refusals since first
	first time.Time // the window's start
	until time.Time // escalated until (zero: not escalated)
}

// New returns an Escalator that asks the helper at socket, with s.
func New(socket string, s Settings, clk clock.Clock, log *slog.Logger) *Escalator {
	e := &Escalator{socket: socket, clk: clk, log: log, addrs: map[netip.Addr]*entry{}, queue: make(chan netip.Addr, queueLen)}
	e.Update(s)
	return e
}

// Update replaces the settings (a reload). Addresses already escalated
// stay so until their time ends.
func (e *Escalator) Update(s Settings) { e.set.Store(&s) }

// Socket returns the helper's socket.
func (e *Escalator) Socket() string { return e.socket }

// escalates reports whether v is a refused SMTP session whose address
// may be escalated.
func escalates(v *governor.Verdict, s *Settings) bool {
	if !v.Refused || v.DryRun || !v.Client.IsValid() || s.Spared[v.Key] {
		return false
	}
	switch v.Reason {
	case governor.ReasonClass, governor.ReasonReserve, governor.ReasonShare, governor.ReasonHeadroom:
		return true
	}
	return false
}

// Observe implements governor.Observer: it counts a refused session of
// v.Client and, at the After-th within Within, queues the address for
// the helper. It never blocks.
func (e *Escalator) Observe(v governor.Verdict) {
	s := e.set.Load()
	if !escalates(&v, s) {
		return
	}
	addr, now := v.Client.Unmap(), v.At
	e.mu.Lock()
	defer e.mu.Unlock()
	en := e.addrs[addr]
	if en == nil {
		if len(e.addrs) >= MaxTracked && !e.sweepLocked(now) {
			return
		}
		en = &entry{first: now}
		e.addrs[addr] = en
	}
	if now.Before(en.until) {
		return // already dropped by the kernel: a session that raced it
	}
	if now.Sub(en.first) > s.Within {
		en.n, en.first = 0, now
	}
	en.n++
	if en.n < s.After {
		return
	}
	en.n, en.first, en.until = 0, now, now.Add(s.For)
	select {
	case e.queue <- addr:
	default:
		en.until = time.Time{}
		e.queueFull.Add(1)
	}
}

// sweepLocked removes the entries neither counting nor escalated, at
// most once a second, and reports whether there is room for one more.
func (e *Escalator) sweepLocked(now time.Time) bool {
	if now.Sub(e.swept) < time.Second {
		return false
	}
	e.swept = now
	within := e.set.Load().Within
	for a, en := range e.addrs {
		if now.Sub(en.first) > within && !now.Before(en.until) {
			delete(e.addrs, a)
		}
	}
	return len(e.addrs) < MaxTracked
}

// failedFor notes that the helper did not drop addr: the address counts
// again from its next refusal.
func (e *Escalator) failedFor(addr netip.Addr, err error) {
	e.failed.Add(1)
	text := err.Error()
	e.lastErr.Store(&text)
	e.mu.Lock()
	if en := e.addrs[addr]; en != nil {
		en.until = time.Time{}
	}
	e.mu.Unlock()
}

// State is what the status page and the metrics show of the escalation.
type State struct {
	Dropping  int    // addresses the kernel drops now
	Tracked   int    // addresses counted
	Added     uint64 // addresses the helper added since the start
	Failed    uint64 // requests the helper did not carry out
	QueueFull uint64 // escalations dropped with the queue to the helper full
	Error     string // the helper's last failure, while the last request failed
}

// State returns the escalation's state now.
func (e *Escalator) State() State {
	now := e.clk.Now()
	st := State{Added: e.added.Load(), Failed: e.failed.Load(), QueueFull: e.queueFull.Load()}
	if p := e.lastErr.Load(); p != nil {
		st.Error = *p
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	st.Tracked = len(e.addrs)
	for _, en := range e.addrs {
		if now.Before(en.until) {
			st.Dropping++
		}
	}
	return st
}
