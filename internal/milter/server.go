package milter

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"sluice/internal/milter/wire"
	"sluice/internal/netserve"
)

// ErrServerClosed is returned by Serve after Shutdown or Close.
var ErrServerClosed = netserve.ErrServerClosed

// The defaults of the zero Options. sluice's configuration owns the
// milter's defaults (config's [milter] table, documented in
// docs/config.md) and sets every one of these explicitly; they are the
// same numbers so that an Options built without a configuration (tests,
// benchmarks) behaves as the daemon does, and a test in internal/app
// fails if the two drift.
const (
	DefaultWorkers        = 16
	DefaultQueueLen       = 1024
	DefaultIdleTimeout    = 10 * time.Minute
	DefaultRequestTimeout = 30 * time.Second
	DefaultMaxSessions    = 4096
	DefaultMaxData        = 1 << 20
)

// Options configure a Server. The zero value of each field is its
// default.
type Options struct {
	// Handler receives the sessions' events. Required.
	Handler Handler
	// Logger gets the server's log lines (default slog.Default()).
	Logger *slog.Logger
	// MaxData caps a packet's payload (default DefaultMaxData); the
	// length is checked before anything is allocated, and a larger packet
	// ends the session.
	MaxData int
	// IdleTimeout ends a session when no packet arrived for this long
	// (default DefaultIdleTimeout; negative: never). The SMTP client sets the pace: a
	// slow client keeps its milter session idle for minutes. The deadline
	// is re-armed at most every quarter of it, so a session may end
	// after 3/4 of it.
	IdleTimeout time.Duration
	// RequestTimeout bounds the time from a packet's first byte to its
	// last (default DefaultRequestTimeout; negative: never): a peer that trickles a packet
	// is cut off however steadily it sends.
	RequestTimeout time.Duration
	// WriteTimeout bounds one write to the MTA (default 30s; negative:
	// never).
	WriteTimeout time.Duration
	// MaxSessions caps concurrent connections (default
	// DefaultMaxSessions); more are
	// closed at once, and the MTA applies its default action
	// (milter_default_action).
	MaxSessions int
	// PeerLimits cap one peer's sessions within MaxSessions and say which
	// local users may connect (netserve.PeerLimits): on a loopback
	// listener any local account can reach the milter.
	netserve.PeerLimits
	// Workers is how many callbacks may run at once (default
	// DefaultWorkers).
	Workers int
	// QueueLen is how many callbacks may wait for one of the Workers
	// (default DefaultQueueLen; negative: none, a callback that finds
	// every worker busy gets QueueFullResponse at once).
	QueueLen int
	// QueueFullResponse is the answer when a callback cannot be queued
	// (default Tempfail). On a step negotiated no-reply, where nothing
	// can be answered, it is given at the session's next reply, and the
	// callbacks up to then are skipped: until the end of the message, or
	// of the connection for CONNECT and HELO.
	QueueFullResponse Response
	// Actions are the modifications the handler may make; the MTA's
	// offer limits them, and Modifier refuses the others.
	Actions wire.Action
	// Protocol are protocol flags to request beyond those the engine
	// sets itself (NO* for every step the Handler does not implement,
	// SKIP for a BodyHandler): NR_* for steps whose reply the handler
	// does not need to send, HDR_LEADSPC, RCPT_REJ, more NO*. Only the
	// flags the MTA offers are used.
	Protocol wire.Protocol
	// Macros asks the MTA for these macros per stage (protocol version 6,
	// needs the MTA's SETSYMLIST action; requested automatically).
	Macros []wire.MacroRequest
}

// Server serves the milter protocol. Serve, Shutdown and Close are shaped
// as net/http's. Create it with NewServer.
type Server struct {
	o      Options
	ns     *netserve.Server
	ctx    context.Context
	cancel context.CancelFunc
	kept   context.Context // ctx without its cancellation (Session.KeptContext)
	steps  stepSet         // what the Handler implements

	tokens    chan struct{} // one per callback allowed to run at once
	waiting   atomic.Int64  // calls waiting for a token
	mu        sync.Mutex
	stopped   bool
	nextID    atomic.Uint64
	queueFull atomic.Int64
	// partials counts the packets that needed more than one read (their
	// request deadline armed): tests wait on it to know that a stalled
	// peer's packet has begun.
	partials   atomic.Int64
	noQuickAck bool // tests: show the delayed-ACK stall
}

// stepSet records which optional handler interfaces are implemented.
type stepSet struct {
	helo    HeloHandler
	mail    MailHandler
	rcpt    RcptHandler
	data    DataHandler
	header  HeaderHandler
	eoh     EOHHandler
	body    BodyHandler
	eom     EOMHandler
	abort   AbortHandler
	unknown UnknownHandler
}

// NewServer returns a Server with o's defaults filled in. It panics if
// o.Handler is nil.
func NewServer(o Options) *Server {
	if o.Handler == nil {
		panic("milter: NewServer without a Handler")
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.MaxData <= 0 {
		o.MaxData = DefaultMaxData
	}
	if o.MaxSessions <= 0 {
		o.MaxSessions = DefaultMaxSessions
	}
	if o.IdleTimeout == 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	if o.RequestTimeout == 0 {
		o.RequestTimeout = DefaultRequestTimeout
	}
	if o.WriteTimeout == 0 {
		o.WriteTimeout = 30 * time.Second
	}
	if o.Workers <= 0 {
		o.Workers = DefaultWorkers
	}
	switch {
	case o.QueueLen == 0:
		o.QueueLen = DefaultQueueLen
	case o.QueueLen < 0:
		o.QueueLen = 0
	}
	if o.QueueFullResponse.code == 0 {
		o.QueueFullResponse = Tempfail
	}
	if len(o.Macros) > 0 {
		o.Actions |= wire.ActSetSymList
	}
	s := &Server{o: o, tokens: make(chan struct{}, o.Workers)}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.kept = context.WithoutCancel(s.ctx)
	h := o.Handler
	s.steps.helo, _ = h.(HeloHandler)
	s.steps.mail, _ = h.(MailHandler)
	s.steps.rcpt, _ = h.(RcptHandler)
	s.steps.data, _ = h.(DataHandler)
	s.steps.header, _ = h.(HeaderHandler)
	s.steps.eoh, _ = h.(EOHHandler)
	s.steps.body, _ = h.(BodyHandler)
	s.steps.eom, _ = h.(EOMHandler)
	s.steps.abort, _ = h.(AbortHandler)
	s.steps.unknown, _ = h.(UnknownHandler)
	s.ns = netserve.New(netserve.Options{
		Name: "milter", Logger: o.Logger,
		// The engine arms its own deadlines.
		ConnLimits: netserve.ConnLimits{MaxConns: o.MaxSessions, PeerLimits: o.PeerLimits, IdleTimeout: -1},
	}, s.serveConn)
	return s
}

// Sessions returns the number of open connections.
func (s *Server) Sessions() int { return s.ns.Conns() }

// Serve accepts connections on l until Shutdown or Close, then returns
// ErrServerClosed. It may be called for several listeners. TCP
// connections get TCP_NODELAY and, on Linux, TCP_QUICKACK after every
// read (see the package's delayed-ACK notes in conn.go).
func (s *Server) Serve(l net.Listener) error {
	s.mu.Lock()
	if s.stopped || s.ctx.Err() != nil {
		s.mu.Unlock()
		l.Close()
		return ErrServerClosed
	}
	s.mu.Unlock()
	return s.ns.Serve(l)
}

// Shutdown stops accepting and waits for the sessions to end by
// themselves (QUIT or the MTA closing) until ctx ends; then it closes
// the remaining connections (their Close callbacks still run), waits for
// the callbacks in flight and stops the workers. A session's end is the
// MTA's to decide: closing a session early makes the MTA apply its
// default action to the rest of that SMTP session.
func (s *Server) Shutdown(ctx context.Context) error {
	stop := context.AfterFunc(ctx, s.cancel)
	defer stop()
	err := s.ns.Drain(ctx)
	s.stopWorkers()
	return err
}

// Close closes the listeners and every connection at once, waits for the
// callbacks in flight (including each session's Close) and stops the
// workers. The daemon drains with Shutdown; tests (milter's, app's) stop
// a server at once with Close.
func (s *Server) Close() error {
	s.cancel()
	err := s.ns.Close()
	s.ns.Wait()
	s.stopWorkers()
	return err
}

func (s *Server) stopWorkers() {
	s.cancel()
	s.mu.Lock()
	s.stopped = true
	s.mu.Unlock()
}
