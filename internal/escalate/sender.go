package escalate

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"time"
)

// requestTimeout bounds one request to the helper, its connection
// included.
const requestTimeout = 5 * time.Second

// summaryEvery is how often the log says how many addresses were
// escalated, when some were.
const summaryEvery = time.Minute

// Run sends the queued escalations to the helper, one at a time on one
// connection, until ctx ends. A request the helper does not carry out
// (no helper, an error) is counted and logged, at most once a minute,
// and the address counts again from its next refusal.
func (e *Escalator) Run(ctx context.Context) {
	var c *helperConn
	defer func() {
		if c != nil {
			c.close()
		}
	}()
	tick := time.NewTicker(summaryEvery)
	defer tick.Stop()
	var added, failed uint64
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if added > 0 || failed > 0 {
				e.log.Info("escalate: addresses refused again and again handed to the kernel", "added", added, "failed", failed,
					"dropping", e.State().Dropping, "for", e.set.Load().For.String(), "helper", e.socket)
				added, failed = 0, 0
			}
		case addr := <-e.queue:
			s := e.set.Load()
			var err error
			if c == nil {
				c, err = dialHelper(ctx, e.socket)
			}
			if err == nil {
				err = c.send(Request{Addr: addr, For: s.For})
				if err != nil && !isAnswer(err) {
					c.close()
					c = nil
				}
			}
			if err != nil {
				if failed == 0 {
					e.log.Warn("escalate: the helper did not drop an address; sluice still refuses its sessions", "client", addr.String(), "err", err)
				}
				failed++
				e.failedFor(addr, err)
				continue
			}
			added++
			e.added.Add(1)
			e.lastErr.Store(nil)
			e.log.Debug("escalate: the kernel drops the address's connections", "client", addr.String(), "for", s.For.String())
		}
	}
}

// answerError is the helper's refusal of a request: the connection
// stays good.
type answerError struct{ err error }

func (a answerError) Error() string { return a.err.Error() }
func (a answerError) Unwrap() error { return a.err }

func isAnswer(err error) bool { _, ok := err.(answerError); return ok }

// helperConn is the connection to the helper.
type helperConn struct {
	c net.Conn
	r *bufio.Reader
}

func dialHelper(ctx context.Context, socket string) (*helperConn, error) {
	var d net.Dialer
	dctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	c, err := d.DialContext(dctx, "unix", socket)
	if err != nil {
		return nil, fmt.Errorf("escalate helper: %w", err)
	}
	return &helperConn{c: c, r: bufio.NewReaderSize(c, MaxLine)}, nil
}

// send writes one request and reads its answer.
func (h *helperConn) send(r Request) error {
	if err := h.c.SetDeadline(time.Now().Add(requestTimeout)); err != nil {
		return fmt.Errorf("escalate helper: %w", err)
	}
	if _, err := h.c.Write([]byte(r.Format())); err != nil {
		return fmt.Errorf("escalate helper: %w", err)
	}
	line, err := h.r.ReadSlice('\n')
	if err != nil {
		return fmt.Errorf("escalate helper: reading the answer: %w", err)
	}
	if err := ParseAnswer(string(line)); err != nil {
		if bytes.HasPrefix(line, []byte("error ")) {
			return answerError{err}
		}
		return err // not the protocol: the connection is closed
	}
	return nil
}

func (h *helperConn) close() { h.c.Close() }
