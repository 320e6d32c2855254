package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"sluice/bench/internal/procstat"
)

// costFlags are the settings of "floodload cost".
type costFlags struct {
	addr     string
	label    string
	clients  int
	hold     int
	duration time.Duration
	warmup   time.Duration
	sid      int
	pid      int
	expect   string
}

func (f *costFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.addr, "addr", "", "the MTA's SMTP address, host:port (required)")
	fs.StringVar(&f.label, "label", "mta", "the mechanism's name in the result line")
	fs.IntVar(&f.clients, "c", 8, "reconnecting clients, each from its own bot address (127.20.0.0/16), connecting again at once")
	fs.IntVar(&f.hold, "hold", 1, "bots that first take and hold a session (from the same networks: to fill a class whose cap is this)")
	fs.DurationVar(&f.duration, "duration", 10*time.Second, "the measured period")
	fs.DurationVar(&f.warmup, "warmup", 2*time.Second, "unmeasured reconnects before it")
	fs.IntVar(&f.sid, "sid", 0, "the Postfix instance's master pid (its session id: every Postfix process of the instance is counted) (required)")
	fs.IntVar(&f.pid, "pid", 0, "sluice's pid, counted too (0: none)")
	fs.StringVar(&f.expect, "expect", "refused", "what the reconnects must mostly get: refused or accepted (at least 90% of them, or the run fails)")
}

func (f *costFlags) check() error {
	switch {
	case f.addr == "" || f.sid <= 0:
		return errors.New("-addr and -sid are required")
	case f.clients < 1 || f.hold < 0:
		return errors.New("-c must be at least 1, -hold not negative")
	case f.duration <= 0 || f.warmup < 0:
		return errors.New("-duration must be positive, -warmup not negative")
	case f.expect != "refused" && f.expect != "accepted":
		return fmt.Errorf("-expect %q: want refused or accepted", f.expect)
	}
	return nil
}

// costCounts are the reconnects' outcomes.
type costCounts struct{ refused, accepted, errs atomic.Int64 }

// reconnect connects from client j's address until ctx ends, each time
// reading the greeting and, after a 220, the reply to EHLO: refused
// unless both are 220 and 250 (then QUIT, accepted).
func (f *costFlags) reconnect(ctx context.Context, j int, n *costCounts) {
	src := botAddr(f.hold+j, 5)
	for ctx.Err() == nil {
		c, err := dial(ctx, src, f.addr)
		if err != nil {
			if ctx.Err() == nil {
				n.errs.Add(1)
				sleep(ctx, 10*time.Millisecond)
			}
			continue
		}
		stop := context.AfterFunc(ctx, func() { c.Close() })
		ok := c.expect("", 220) == nil && c.expect("EHLO "+heloName(src), 250) == nil
		if ok {
			_, _ = c.cmd("QUIT")
		}
		stop()
		c.Close()
		switch {
		case ctx.Err() != nil:
		case ok:
			n.accepted.Add(1)
		default:
			n.refused.Add(1)
		}
	}
}

// cpuTicks is the CPU time so far of the Postfix instance (its session,
// reaped children included) and of sluice.
func (f *costFlags) cpuTicks() (postfix, sluice uint64) {
	postfix = procstat.SessionTreeTicks(f.sid)
	if f.pid > 0 {
		sluice = procstat.Ticks(f.pid)
	}
	return postfix, sluice
}

// runCost holds f.hold sessions, then reconnects from f.clients
// addresses as fast as the MTA answers, and prints the CPU time the MTA
// and sluice spent per reconnect over f.duration:
//
//	mech=L reconnects= refused= accepted= errors= per_s= postfix_us= sluice_us= total_us=
//
// (the *_us figures are CPU microseconds per reconnect).
func runCost(ctx context.Context, f costFlags, stdout io.Writer) error {
	rf := roundFlags{addr: f.addr, botRetry: 200 * time.Millisecond}
	var st botStats
	hctx, stopHold := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stopHold(); wg.Wait() }()
	for i := range f.hold {
		wg.Add(1)
		go func() { defer wg.Done(); rf.bot(hctx, botAddr(i, 5), &st) }()
	}
	for deadline := time.Now().Add(30 * time.Second); st.held.Load() < int64(f.hold); {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: only %d of %d held sessions within 30 s", f.label, st.held.Load(), f.hold)
		}
		sleep(ctx, 50*time.Millisecond)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}

	var warm, n costCounts
	wctx, cancel := context.WithTimeout(ctx, f.warmup)
	f.hammer(wctx, &warm)
	cancel()
	p0, s0 := f.cpuTicks()
	t0 := time.Now()
	mctx, cancel := context.WithTimeout(ctx, f.duration)
	defer cancel()
	f.hammer(mctx, &n)
	p1, s1 := f.cpuTicks()
	el := time.Since(t0)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	total := n.refused.Load() + n.accepted.Load()
	if total == 0 {
		return fmt.Errorf("%s: no reconnect completed in %s (%d errors)", f.label, f.duration, n.errs.Load())
	}
	got := n.refused.Load()
	if f.expect == "accepted" {
		got = n.accepted.Load()
	}
	if got*10 < total*9 {
		return fmt.Errorf("%s: %d of %d reconnects %s, want at least 90%%", f.label, got, total, f.expect)
	}
	tick := procstat.ClockTick()
	us := func(a, b uint64) float64 {
		if b < a {
			return 0 // a process of the instance left without being reaped by it
		}
		return float64(b-a) / tick * 1e6 / float64(total)
	}
	fmt.Fprintf(stdout, "mech=%s reconnects=%d refused=%d accepted=%d errors=%d per_s=%.0f postfix_us=%.1f sluice_us=%.1f total_us=%.1f\n",
		f.label, total, n.refused.Load(), n.accepted.Load(), n.errs.Load(), float64(total)/el.Seconds(),
		us(p0, p1), us(s0, s1), us(p0+s0, p1+s1))
	return nil
}

// hammer runs the reconnecting clients until ctx ends.
func (f *costFlags) hammer(ctx context.Context, n *costCounts) {
	var wg sync.WaitGroup
	for j := range f.clients {
		wg.Add(1)
		go func() { defer wg.Done(); f.reconnect(ctx, j, n) }()
	}
	wg.Wait()
}
