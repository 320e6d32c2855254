package bantest

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Rspawn reads a delivery's exit status and output as qmail-rspawn's
// report() does: K delivered, Z deferred (retried), D bounced, and the
// text qmail-send logs.
func Rspawn(status int, out []byte) (byte, string) {
	switch {
	case status == 111:
		return 'Z', "Unable to run qmail-remote."
	case status != 0:
		return 'D', "Unable to run qmail-remote."
	case len(out) == 0:
		return 'Z', "qmail-remote produced no output."
	}
	result := -1
	j := 0
	for k := 0; k < len(out); k++ {
		if out[k] != 0 {
			continue
		}
		switch out[j] {
		case 'K':
			result = 1
		case 'Z':
			result = 0
		}
		if out[j] == 'K' || out[j] == 'Z' || out[j] == 'D' {
			break
		}
		j = k + 1
	}
	orr := result
	switch out[0] {
	case 's':
		orr = 0
	case 'h':
		orr = -1
	}
	text := string(out[1:])
	if i := bytes.IndexByte(out[1:], 0); i >= 0 {
		text = string(out[1 : i+1])
	}
	return map[int]byte{1: 'K', 0: 'Z', -1: 'D'}[orr], text
}

// QueueOptions are qmail-send's part of the scenario.
type QueueOptions struct {
	Messages    int // queued at once
	Concurrency int // deliveries at once (concurrencyremote)
	// RetryUnit scales qmail-send's retry schedule for remote deliveries:
	// a message deferred for the n-th time is tried again (u*n)² seconds
	// after it was queued, u being RetryUnit in seconds (qmail: 20, so
	// 400 s, 1600 s, ...; the scenario shrinks time).
	RetryUnit time.Duration
	// Deliver runs one delivery of message i and returns its exit status
	// and output (stdout and stderr, one pipe, as qmail-rspawn gives).
	Deliver func(ctx context.Context, i int) (int, []byte)
}

// QueueResult is what qmail-send would have logged.
type QueueResult struct {
	Delivered, Bounced, Deferrals int
	Took                          time.Duration
	Bounces                       []string // the first few bounce texts
	Deferred                      []string // the first few deferral texts
}

// RunQueue queues the messages at once and delivers them as qmail-send
// does, until each is delivered or bounced, or ctx ends.
func RunQueue(ctx context.Context, o QueueOptions) QueueResult {
	start := time.Now()
	type msg struct {
		i     int
		tries int
		due   time.Time
	}
	var mu sync.Mutex
	cond := sync.NewCond(&mu)
	queue := make([]*msg, o.Messages)
	for i := range queue {
		queue[i] = &msg{i: i, due: start}
	}
	var res QueueResult
	busy := 0
	next := func() *msg { // with mu held: the due message, or nil
		best := -1
		for k, m := range queue {
			if !m.due.After(time.Now()) && (best < 0 || m.due.Before(queue[best].due)) {
				best = k
			}
		}
		if best < 0 {
			return nil
		}
		m := queue[best]
		queue = append(queue[:best], queue[best+1:]...)
		return m
	}
	wake := time.NewTicker(20 * time.Millisecond)
	defer wake.Stop()
	stop := context.AfterFunc(ctx, func() { mu.Lock(); cond.Broadcast(); mu.Unlock() })
	defer stop()
	finished := make(chan struct{})
	ticking := make(chan struct{})
	go func() { // wakes the workers when a retry comes due
		defer close(ticking)
		for {
			select {
			case <-finished:
				return
			case <-wake.C:
				mu.Lock()
				cond.Broadcast()
				mu.Unlock()
			}
		}
	}()
	var wg sync.WaitGroup
	for range o.Concurrency {
		wg.Go(func() {
			mu.Lock()
			defer mu.Unlock()
			for ctx.Err() == nil && (len(queue) > 0 || busy > 0) {
				m := next()
				if m == nil {
					cond.Wait()
					continue
				}
				busy++
				mu.Unlock()
				status, out := o.Deliver(ctx, m.i)
				kind, text := Rspawn(status, out)
				mu.Lock()
				busy--
				switch kind {
				case 'K':
					res.Delivered++
				case 'D':
					res.Bounced++
					if len(res.Bounces) < 5 {
						res.Bounces = append(res.Bounces, text)
					}
				default:
					res.Deferrals++
					if len(res.Deferred) < 5 {
						res.Deferred = append(res.Deferred, text)
					}
					m.tries++
					d := o.RetryUnit * time.Duration(m.tries)
					m.due = start.Add(time.Duration(d.Seconds() * d.Seconds() * float64(time.Second)))
					queue = append(queue, m)
				}
				cond.Broadcast()
			}
		})
	}
	wg.Wait()
	close(finished)
	<-ticking
	res.Took = time.Since(start)
	return res
}

// Run runs one delivery as qmail-rspawn does: the message on stdin,
// stdout and stderr one pipe. A delivery killed by a signal reads as exit
// status 111 (qmail-rspawn: "qmail-remote crashed", temporary).
func Run(cmd *exec.Cmd, message string) (int, []byte) {
	var out bytes.Buffer
	cmd.Stdin = strings.NewReader(message)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 111, out.Bytes()
		}
		return ee.ExitCode(), out.Bytes()
	case err != nil:
		return 111, []byte(err.Error())
	}
	return 0, out.Bytes()
}
