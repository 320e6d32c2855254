package throttle

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"sluice/internal/netserve"
	"sluice/internal/peercred"
)

// Grant is permission to send at At. Done ends it: used says the sender
// sent (said DONE); a sender that went away before its slot did not, and
// its slot is given back.
type Grant struct {
	At time.Time
	// Latest is when the slot goes stale (zero: never): a sender that
	// cannot start by then asks again.
	Latest time.Time
	Done   func(used bool)
	// Revoked, if not nil, is closed when the slot is taken back (its key
	// was suspended): a sender that has not sent yet is told to defer,
	// with RevokeReason's text.
	Revoked      <-chan struct{}
	RevokeReason func() string
	// Judge, if not nil, reads the sender's result (a REPORT) from the
	// reporter and returns the verdict flags, one per line.
	Judge func(ctx context.Context, lines []ResultLine, from Reporter) string
}

// DeferError tells a sender not to send now, and why.
type DeferError struct{ Reason string }

// Error is "defer: " and the reason.
func (e *DeferError) Error() string { return "defer: " + e.Reason }

// Handler grants send slots.
type Handler interface {
	// Acquire waits for key's next slot (FIFO per key) and returns it, or
	// a *DeferError. ctx ends when the sender goes away.
	Acquire(ctx context.Context, key string) (Grant, error)
}

// Options configure a Server.
type Options struct {
	// Handler decides each request. Required.
	Handler Handler
	// Logger gets the server's log lines (default slog.Default()).
	Logger   *slog.Logger
	MaxConns int // default 4096: one per waiting or sending process
	// PeerLimits cap one peer's connections within MaxConns and say which
	// local users may connect (netserve.PeerLimits).
	netserve.PeerLimits
	// RequestTimeout bounds reading the request line (default 10s).
	RequestTimeout time.Duration
	// TrustReport, if set, says whose reports may change a key's state
	// (Reporter.Trusted); nil trusts every peer.
	TrustReport func(peercred.Cred) bool
}

// Server serves the throttle protocol: Serve, Shutdown and Close as in
// net/http.
type Server struct {
	*netserve.Server
	o Options
}

// NewServer returns a Server.
func NewServer(o Options) *Server {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	s := &Server{o: o}
	// A waiting or sending client says nothing for as long as it waits or
	// sends: no idle timeout; the request itself must come quickly.
	s.Server = netserve.New(netserve.Options{
		Name: "throttle", Logger: o.Logger, ConnLimits: netserve.ConnLimits{
			MaxConns: o.MaxConns, PeerLimits: o.PeerLimits, IdleTimeout: o.RequestTimeout, RequestTimeout: o.RequestTimeout,
		},
	}, s.serve)
	return s
}

func (s *Server) serve(c *netserve.Conn) {
	// The request line is read with the server's deadlines; afterwards the
	// client says nothing for as long as it waits or sends, so the rest is
	// read from the bare connection.
	sr := &switchReader{r: c.Reader()}
	r := bufio.NewReaderSize(sr, maxLine+1)
	line, err := readLine(r)
	c.Done()
	if err != nil {
		c.LogReadError(err, errors.Is(err, ErrProtocol))
		if errors.Is(err, ErrProtocol) {
			fmt.Fprintf(c, "ERR %s\n", strings.TrimPrefix(err.Error(), ErrProtocol.Error()+": "))
		}
		return
	}
	key, err := ParseRequest(line)
	if err != nil {
		s.o.Logger.Warn("throttle: malformed request", "err", err)
		fmt.Fprintf(c, "ERR %s\n", strings.TrimPrefix(err.Error(), ErrProtocol.Error()+": "))
		return
	}
	// From now on the client only closes, says DONE or reports its result:
	// watch for that, so a sender that goes away leaves the line at once.
	sr.r = c.Conn
	c.SetReadDeadline(time.Time{})
	ctx, cancel := context.WithCancel(context.Background())
	gone := make(chan struct{})
	var used atomic.Bool
	granted := make(chan Grant, 1)
	var wmu sync.Mutex // the verdict and a revocation write to c
	c.Go(func() {
		defer close(gone)
		defer cancel()
		for {
			l, err := readLine(r)
			if err != nil || l == "DONE" || c.Closing() {
				used.Store(l == "DONE")
				return
			}
			if strings.HasPrefix(l, "REPORT") {
				used.Store(true)
				s.report(ctx, c, r, l, granted, &wmu)
				return
			}
		}
	})
	defer func() { c.Close(); <-gone }()
	g, err := s.o.Handler.Acquire(ctx, key)
	if err != nil {
		var d *DeferError
		switch {
		case errors.As(err, &d):
			// The Handler records its deferrals (log, metrics, status).
			s.o.Logger.Debug("throttle: deferred", "key", key, "reason", d.Reason)
			fmt.Fprintf(c, "DEFER %s\n", oneLine(d.Reason))
		case ctx.Err() != nil:
			s.o.Logger.Debug("throttle: sender went away while waiting", "key", key)
		default:
			s.o.Logger.Warn("throttle: cannot grant", "key", key, "err", err)
			fmt.Fprintf(c, "DEFER %s\n", oneLine("throttle unavailable: "+err.Error()))
		}
		return
	}
	if c.Closing() {
		// Shutting down: grant nothing new; the sender applies its fail mode.
		g.Done(false)
		return
	}
	// A sender told its time sends at that time whether or not this
	// server is still there: when a shutdown closes the connection, the
	// slot stays used, so the next daemon (restoring the store's
	// snapshot) books nobody else into it.
	defer func() { g.Done(used.Load() || c.Closing()) }()
	if s.o.Logger.Enabled(ctx, slog.LevelDebug) {
		// Names the sender, so that a sender's slots can be told apart
		// from others' for the same key (and after it asked again).
		s.o.Logger.Debug("throttle: slot granted", "key", key, "at", g.At.Format(time.RFC3339Nano), "sender", sender(c.Conn))
	}
	granted <- g
	wmu.Lock()
	_, err = c.Write([]byte(FormatOK(g.At, g.Latest)))
	wmu.Unlock()
	if err != nil {
		return
	}
	waitSend(ctx, c, g, &wmu)
}

// waitSend waits for the send to end (the client closes, says DONE or
// reports); if the grant is revoked first (its key was suspended), it
// tells the client to defer: a sender still waiting for its time gives
// its slot up, one already sending ignores it and reports.
func waitSend(ctx context.Context, c *netserve.Conn, g Grant, wmu *sync.Mutex) {
	select {
	case <-ctx.Done():
	case <-g.Revoked:
		reason := "the key is suspended"
		if g.RevokeReason != nil {
			reason = g.RevokeReason()
		}
		wmu.Lock()
		fmt.Fprintf(c, "DEFER %s\n", oneLine(reason))
		wmu.Unlock()
		<-ctx.Done()
	}
}

// report reads a REPORT's lines, has the grant judge them and answers
// with the verdict (every line kept when the grant has no judge).
func (s *Server) report(ctx context.Context, c *netserve.Conn, r *bufio.Reader, head string, granted <-chan Grant, wmu *sync.Mutex) {
	fail := func(err error) {
		s.o.Logger.Warn("throttle: malformed report", "err", err)
		wmu.Lock()
		fmt.Fprintf(c, "ERR %s\n", strings.TrimPrefix(err.Error(), ErrProtocol.Error()+": "))
		wmu.Unlock()
	}
	n, err := ParseReportHeader(head)
	if err != nil {
		fail(err)
		return
	}
	if s.o.RequestTimeout > 0 {
		c.SetReadDeadline(time.Now().Add(s.o.RequestTimeout))
	}
	lines := make([]ResultLine, 0, n)
	for range n {
		l, err := readLine(r)
		if err != nil {
			fail(err)
			return
		}
		rl, err := ParseResultLine(l)
		if err != nil {
			fail(err)
			return
		}
		lines = append(lines, rl)
	}
	var g Grant
	select {
	case g = <-granted:
	default: // a report before the grant: nothing to judge it by
	}
	verdict := strings.Repeat(string(rune(VerdictKeep)), n)
	if g.Judge != nil {
		if v := g.Judge(ctx, lines, reporter(c.Conn, s.o.TrustReport)); len(v) == n {
			verdict = v
		}
	}
	wmu.Lock()
	fmt.Fprintf(c, "VERDICT %s\n", verdict)
	wmu.Unlock()
}

func oneLine(s string) string { return strings.NewReplacer("\n", " ", "\r", " ").Replace(s) }

// switchReader reads from r, which the connection's goroutine may replace
// between reads.
type switchReader struct{ r io.Reader }

func (s *switchReader) Read(p []byte) (int, error) { return s.r.Read(p) }
