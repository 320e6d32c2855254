package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"sluice/bench/internal/hist"
	"sluice/bench/internal/loadgen"
)

// The requests are RCPT requests of Postfix's policy protocol with the
// attributes a rule keyed on the sender needs; each names one sender
// user{i}@sender{i%100}.example (bench/policyload's naming). They are built
// per request, so the driver holds no table of senders (bench/policyload
// prebuilds one, which at 10^7 senders would cost the driver more memory
// than the daemon it measures).
const (
	reqHead = "request=smtpd_access_policy\nprotocol_state=RCPT\nprotocol_name=ESMTP\n" +
		"client_address=192.0.2.7\nclient_name=relay.example\nreverse_client_name=relay.example\n" +
		"helo_name=relay.example\nrecipient=someone@recipient.example\nrecipient_count=0\nsender=user"
	reqTail = ".example\n\n"
)

// appendRequest appends the RCPT request of sender i to dst.
func appendRequest(dst []byte, i int) []byte {
	dst = append(dst, reqHead...)
	dst = strconv.AppendInt(dst, int64(i), 10)
	dst = append(dst, "@sender"...)
	dst = strconv.AppendInt(dst, int64(i%100), 10)
	return append(dst, reqTail...)
}

// maxReply bounds one reply line; a longer one is an error.
const maxReply = 4096

// pconn is one persistent policy connection.
type pconn struct {
	c   net.Conn
	r   *bufio.Reader
	buf []byte
}

func dialPolicy(ctx context.Context, addr string) (*pconn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	return &pconn{c: c, r: bufio.NewReaderSize(c, maxReply), buf: make([]byte, 0, 512)}, nil
}

func (p *pconn) close() { _ = p.c.Close() }

// ask sends the request of sender i and reads the reply up to its empty
// line; the reply must carry an action.
func (p *pconn) ask(i int) error {
	p.buf = appendRequest(p.buf[:0], i)
	if _, err := p.c.Write(p.buf); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	action := false
	for {
		line, err := p.r.ReadSlice('\n')
		if err != nil {
			return fmt.Errorf("reading the reply: %w", err)
		}
		if len(line) == 1 {
			if !action {
				return errors.New("reply without an action")
			}
			return nil
		}
		if bytes.HasPrefix(line, []byte("action=")) {
			action = true
		}
	}
}

// conns opens c connections to addr.
func conns(ctx context.Context, addr string, c int) ([]*pconn, error) {
	out := make([]*pconn, 0, c)
	for range c {
		pc, err := dialPolicy(ctx, addr)
		if err != nil {
			for _, o := range out {
				o.close()
			}
			return nil, err
		}
		out = append(out, pc)
	}
	return out, nil
}

// fill sends one request for each sender in [from, to) over c
// connections, so that the rule holds a key for each.
func fill(ctx context.Context, addr string, c, from, to int) error {
	pcs, err := conns(ctx, addr, c)
	if err != nil {
		return err
	}
	next := atomic.Int64{}
	next.Store(int64(from))
	var wg sync.WaitGroup
	errs := make([]error, len(pcs))
	for w, pc := range pcs {
		wg.Go(func() {
			defer pc.close()
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= to {
					return
				}
				if err := pc.ask(i); err != nil {
					errs[w] = fmt.Errorf("sender %d: %w", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return ctx.Err()
}

// loadResult is one timed load run.
type loadResult struct {
	loadgen.Latency
	Errors uint64
}

// load runs c connections for d, each asking for random senders in
// [0, keys) one request at a time, and returns the rate and latency of
// the exchanges that ended in the window.
func load(ctx context.Context, addr string, c, keys int, d time.Duration, seed uint64) (loadResult, error) {
	pcs, err := conns(ctx, addr, c)
	if err != nil {
		return loadResult{}, err
	}
	start := time.Now()
	end := start.Add(d)
	hs := make([]hist.Hist, len(pcs))
	var errs atomic.Uint64
	var wg sync.WaitGroup
	for w, pc := range pcs {
		wg.Go(func() {
			defer pc.close()
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			for ctx.Err() == nil {
				t0 := time.Now()
				if !t0.Before(end) {
					return
				}
				if err := pc.ask(rng.IntN(keys)); err != nil {
					errs.Add(1)
					return
				}
				if t1 := time.Now(); !t1.After(end) {
					hs[w].Record(t1.Sub(t0))
				}
			}
		})
	}
	wg.Wait()
	var all hist.Hist
	for i := range hs {
		all.Merge(&hs[i])
	}
	if err := ctx.Err(); err != nil {
		return loadResult{}, err
	}
	return loadResult{Latency: loadgen.Summarize(&all, d.Seconds()), Errors: errs.Load()}, nil
}

// waitAnswer waits until a policy request to addr is answered and returns
// how long that took from since; it polls every 5 ms.
func waitAnswer(ctx context.Context, addr string, since time.Time, timeout time.Duration, alive func() bool) (time.Duration, error) {
	deadline := time.Now().Add(timeout)
	for {
		if pc, err := dialPolicy(ctx, addr); err == nil {
			_ = pc.c.SetDeadline(deadline)
			err = pc.ask(0)
			pc.close()
			if err == nil {
				return time.Since(since), nil
			}
		}
		if !alive() {
			return 0, errors.New("the daemon exited")
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("no answer from %s within %s", addr, timeout)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}
