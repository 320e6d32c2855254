// Package netserve is the connection lifecycle shared by sluice's
// servers (anvil, policy, throttle, milter, the mux's socket map and
// notification socket): accept with back-off, a cap on concurrent
// connections, per-peer rules (a cap per peer, an allow list of local
// users, a share for the peers outside it), idle and per-request read deadlines, a panic in one
// connection's handler costing that connection only, and a two-stage
// Shutdown in the shape of net/http's.
//
// The sessions are served from the server's own epoll set
// (poller_linux.go): accepted with raw accept4(2) on a duplicate of the
// listener's descriptor, read, written and closed with raw system calls,
// parked between requests on a channel that the set's one waiter
// goroutine signals. No call on a session enters the scheduler, so a
// door between its peers' requests never wakes the runtime's monitor
// thread.
package netserve

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"sluice/internal/clock"
	"sluice/internal/rawio"
)

// ErrServerClosed is returned by Serve after Shutdown or Close.
var ErrServerClosed = errors.New("server closed")

// ConnLimits are the connection limits each door's configuration sets
// (docs/config.md); the protocol packages' Options embed them.
type ConnLimits struct {
	// MaxConns caps concurrent connections (default 4096); more are closed
	// at once (or handed to Options.Refuse), with a log line at 1, 2, 4,
	// 8... refusals.
	MaxConns int
	// PeerLimits cap each peer within MaxConns and say which local users
	// may connect at all.
	PeerLimits
	// IdleTimeout closes a connection idle between requests this long
	// (default 1h; negative: never).
	IdleTimeout time.Duration
	// RequestTimeout bounds reading the rest of a request once its first
	// byte arrived (default 10s; negative: never).
	RequestTimeout time.Duration
}

// Options configure a Server.
type Options struct {
	// Name prefixes log messages ("anvil", "policy").
	Name string
	// Logger gets the server's log lines (default slog.Default()).
	Logger *slog.Logger
	ConnLimits
	// Refuse, when set, is given each connection refused for MaxConns,
	// MaxConnsPerPeer or MaxConnsUnlisted (not one refused by AllowUIDs:
	// that is closed), in its own goroutine (Wait waits for it; a panic is
	// logged), to write a reply before the connection is closed. It must
	// not block without a deadline; the connection is closed when it
	// returns, or by Close.
	Refuse func(net.Conn)
}

// Server runs a handler per connection. Create it with New.
type Server struct {
	o         Options
	handle    func(*Conn)
	mu        sync.Mutex
	listeners map[net.Listener]*acceptor
	conns     map[*Conn]struct{}
	refusing  map[net.Conn]struct{} // being refused by Options.Refuse
	gate      *Gate                 // PeerLimits
	closing   atomic.Bool
	wg        sync.WaitGroup
	nconns    atomic.Int64
	refused   atomic.Int64
	handoff   chan *Conn    // to a runner waiting for a connection
	quit      chan struct{} // closed when the server stops: runners return
	quitOnce  sync.Once
	idle      atomic.Int32 // runners waiting on handoff

	poll        *poller // the process's epoll set, taken by the first Serve
	pollDropped bool    // the server no longer uses it (mu)
}

// New returns a Server that runs handle for each connection, in a
// goroutine of its own while the connection lasts (one that served an
// earlier connection, when one waits). handle reads through Conn.Reader,
// calls Conn.Done after each request, and returns when the connection
// should close (Conn.Closing tells it the server is shutting down).
func New(o Options, handle func(*Conn)) *Server {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.MaxConns <= 0 {
		o.MaxConns = DefaultMaxConns
	}
	if o.IdleTimeout == 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	if o.RequestTimeout == 0 {
		o.RequestTimeout = DefaultRequestTimeout
	}
	return &Server{
		o: o, handle: handle, listeners: map[net.Listener]*acceptor{}, conns: map[*Conn]struct{}{},
		refusing: map[net.Conn]struct{}{}, gate: NewGate(o.Name, o.Logger, o.PeerLimits),
		handoff: make(chan *Conn), quit: make(chan struct{}),
	}
}

// Conns returns the number of open connections.
func (s *Server) Conns() int { return int(s.nconns.Load()) }

// Serve accepts connections on l, a unix or TCP listener of the net
// package, until Shutdown or Close, then returns ErrServerClosed.
// Temporary accept errors back off up to a second.
func (s *Server) Serve(l net.Listener) error {
	s.mu.Lock()
	if s.closing.Load() {
		s.mu.Unlock()
		l.Close()
		return ErrServerClosed
	}
	if err := s.startPoller(); err != nil {
		s.mu.Unlock()
		l.Close()
		return err
	}
	a, err := newAcceptor(l, s.poll)
	if err != nil {
		s.mu.Unlock()
		l.Close()
		return err
	}
	s.listeners[l] = a
	s.busyAdd(1) // the accept loop is busy but where it parks in accept
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, l)
		s.mu.Unlock()
		a.stop()
		s.busyAdd(-1)
	}()
	var backoff time.Duration
	for {
		c, err := s.next(a)
		if errors.Is(err, errStopped) {
			return ErrServerClosed
		}
		if err != nil {
			if s.closing.Load() {
				return ErrServerClosed
			}
			if isTemporary(err) {
				backoff = AcceptBackoff(backoff)
				s.o.Logger.Warn(s.o.Name+": accept failed; retrying", "err", err, "in", backoff)
				time.Sleep(backoff)
				continue
			}
			return err
		}
		backoff = 0
		if c == nil {
			continue
		}
		if s.admit(c) == errStopped {
			return ErrServerClosed
		}
	}
}

// errStopped is admit's answer once the server is closing.
var errStopped = errors.New("stopped")

// next accepts the next connection: on the poller, for a socket; nil
// (and no error) when one was accepted that cannot be served.
func (s *Server) next(a *acceptor) (net.Conn, error) {
	if a.lrc == nil {
		return a.l.Accept()
	}
	fd, raddr, err := a.accept()
	if err != nil {
		return nil, err
	}
	c, err := s.newConn(a, fd, raddr)
	if err != nil {
		rawio.CloseFD(fd)
		if errors.Is(err, errStopped) {
			return nil, err
		}
		s.o.Logger.Warn(s.o.Name+": cannot serve an accepted connection; closed it", "err", err)
		return nil, nil
	}
	return c, nil
}

// admit starts serving c, or refuses it under MaxConns and PeerLimits.
func (s *Server) admit(c net.Conn) error {
	if s.nconns.Load() >= int64(s.o.MaxConns) {
		if n := s.refused.Add(1); n&(n-1) == 0 {
			s.o.Logger.Warn(s.o.Name+": too many connections; closing new ones", "max_conns", s.o.MaxConns, "refused_total", n)
		}
		s.refuse(c)
		return nil
	}
	place, err := s.gate.Admit(c)
	if errors.Is(err, ErrNotAllowed) {
		return nil // closed
	}
	if err != nil {
		s.refuse(c)
		return nil
	}
	var cn *Conn
	if fc, ok := c.(*fdConn); ok {
		cn = &fc.served // one allocation for both
	} else {
		cn = new(Conn)
	}
	cn.Conn, cn.s, cn.place, cn.accepted = c, s, place, clock.Mono()
	s.mu.Lock()
	if s.closing.Load() {
		s.mu.Unlock()
		cn.place.Release()
		c.Close()
		return errStopped
	}
	s.conns[cn] = struct{}{}
	s.wg.Add(1)
	s.nconns.Add(1)
	s.mu.Unlock()
	s.start(cn)
	return nil
}

// refuse closes c, refused for MaxConns, MaxConnsPerPeer or
// MaxConnsUnlisted, after
// Options.Refuse if set.
func (s *Server) refuse(c net.Conn) {
	if s.o.Refuse == nil {
		c.Close()
		return
	}
	s.mu.Lock()
	if s.closing.Load() {
		s.mu.Unlock()
		c.Close()
		return
	}
	s.refusing[c] = struct{}{}
	s.wg.Add(1)
	s.busyAdd(1)
	s.mu.Unlock()
	go func() {
		defer func() {
			if r := recover(); r != nil {
				s.o.Logger.Error(s.o.Name+": panic refusing a connection; closed it", "panic", r)
			}
			c.Close()
			s.mu.Lock()
			delete(s.refusing, c)
			s.mu.Unlock()
			s.busyAdd(-1)
			s.wg.Done()
		}()
		s.o.Refuse(c)
	}()
}

func isTemporary(err error) bool {
	if errors.Is(err, errAcceptTemporary) {
		return true
	}
	var t interface{ Temporary() bool }
	if errors.As(err, &t) && t.Temporary() {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// Shutdown stops accepting, closes every connection as soon as it is
// between requests with nothing sent (see Conn.Serving: a connection
// that has not sent its first request is given FirstRequestGrace after
// its accept), and waits for the handlers until ctx ends; then it closes
// the rest and waits for them too.
func (s *Server) Shutdown(ctx context.Context) error { return s.stop(ctx, true) }

// Close closes every listener and connection at once.
func (s *Server) Close() error {
	s.closing.Store(true)
	s.stopRunners()
	s.mu.Lock()
	for _, a := range s.listeners {
		a.stop()
	}
	for c := range s.conns {
		c.Conn.Close()
	}
	for c := range s.refusing {
		c.Close()
	}
	s.dropPoller()
	s.mu.Unlock()
	return nil
}

// Conn is one accepted connection. Its net.Conn is served from the
// server's poller (poller_linux.go): every system call on it is raw, so a
// door between its peer's requests does not wake the Go runtime's monitor
// thread.
type Conn struct {
	net.Conn
	s        *Server
	busy     atomic.Bool   // inside a request
	began    atomic.Bool   // a request's first bytes were read (by its Reader)
	held     atomic.Bool   // holds session state: a Shutdown leaves it open (Hold)
	place    Place         // its place under PeerLimits
	accepted time.Duration // when it was accepted (clock.Mono)
}

// FirstRequestGrace is how long after its accept a connection that has
// sent nothing yet may still send its first request through a Shutdown:
// a client that connected to ask is answered, though the stop began
// between its connect and its write.
const FirstRequestGrace = time.Second

// Closing reports whether the server is shutting down.
func (c *Conn) Closing() bool { return c.s.closing.Load() }

// Serving reports whether the handler is to read another request: the
// server is not shutting down; or the peer sent its next request before
// the shutdown (a connection accepted just before it, whose request is
// in the socket unread); or the connection was accepted less than
// FirstRequestGrace ago and has sent nothing yet (its first request is
// waited for that long). A request loop checks it between requests, so
// that what a peer sent or was about to send is answered, not lost to a
// close, and a peer between requests with nothing sent is let go. A
// request sent after that is the peer's to retry, as Postfix's clients
// do on a closed connection.
func (c *Conn) Serving() bool {
	if !c.s.closing.Load() {
		return true
	}
	_, ok := c.stopDeadline(clock.Mono())
	return ok
}

// stopDeadline is, while the server shuts down, the read deadline under
// which a connection between requests is to read its next request, if
// it is to read one at all (see Serving): its idle deadline when the
// request is in the socket already, the end of its first-request grace
// when it has sent nothing yet.
func (c *Conn) stopDeadline(now time.Duration) (time.Time, bool) {
	if c.pending() {
		if t := c.s.o.IdleTimeout; t > 0 {
			return clock.MonoTime(now + t), true
		}
		return time.Time{}, true
	}
	if end, ok := c.firstAwaited(now); ok {
		return clock.MonoTime(end), true
	}
	return time.Time{}, false
}

// firstAwaited reports whether the connection's first request is still
// awaited through a shutdown (none read yet, FirstRequestGrace not over),
// and until when.
func (c *Conn) firstAwaited(now time.Duration) (end time.Duration, ok bool) {
	end = c.accepted + FirstRequestGrace
	return end, !c.began.Load() && now < end
}

// pending reports whether the peer sent bytes not yet read (false when
// the connection cannot tell).
func (c *Conn) pending() bool {
	p, ok := c.Conn.(interface{ Pending() bool })
	return ok && p.Pending()
}

// Hold tells the server whether the connection holds state that ends
// only with a later request of its peer (an anvil stream holding an SMTP
// session's count until smtpd says disconnect). While held, Shutdown does
// not close the connection between requests: it is served until the
// handler stops holding it (then the handler ends it at the next
// Closing check) or Shutdown's context ends. A stop that waits for this
// leaves no session counted by a process that is gone and unknown to the
// next one.
func (c *Conn) Hold(on bool) { c.held.Store(on) }

// Reader returns a reader that arms the idle deadline while waiting for a
// request and the request deadline when a request takes more than one
// read.
func (c *Conn) Reader() *Reader { return &Reader{c: c} }

// Go runs f in a goroutine of its own beside the connection's handler,
// for a handler that reads and writes at once (one goroutine waiting for
// the peer while the other waits for something else). Such a goroutine
// must be started with Go: netserve counts the goroutines that serve
// connections to know when all of them wait in netserve (busy.go), and
// one it did not count would make another's wait elsewhere look like a
// wait in netserve. The handler must wait for f to return before it does.
func (c *Conn) Go(f func()) {
	c.s.busyAdd(1)
	go func() {
		defer c.s.busyAdd(-1)
		f()
	}()
}

// Done marks the end of a request: the next read waits as idle.
func (c *Conn) Done() { c.busy.Store(false) }

// wakeIdle makes a connection blocked between requests return at once,
// or one whose first request is still awaited when its grace ends.
func (c *Conn) wakeIdle() {
	if c.busy.Load() || c.held.Load() {
		return
	}
	if end, ok := c.firstAwaited(clock.Mono()); ok {
		c.SetReadDeadline(clock.MonoTime(end))
		return
	}
	c.SetReadDeadline(time.Now())
}

func (c *Conn) run() {
	s := c.s
	defer func() {
		if r := recover(); r != nil {
			s.o.Logger.Error(s.o.Name+": panic serving a connection; closed it", "panic", r)
		}
		c.Conn.Close()
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		c.place.Release()
		s.nconns.Add(-1)
		s.busyAdd(-1)
		s.wg.Done()
	}()
	s.handle(c)
}

// Reader reads from a Conn with its deadlines. Deadlines cost a timer
// update each, so they are set only when they matter: the idle deadline
// when a wait for a new request begins (and at most once a second while
// requests keep coming), the request deadline only when a request did not
// arrive in one read.
type Reader struct {
	c        *Conn
	idleSet  time.Duration // when the idle deadline was last armed (clock.Mono)
	deadline bool          // a request deadline is armed
}

// Read reads from the connection, arming the idle or request deadline
// first when it is due; between requests, a server that is shutting down
// ends the read at once, unless the peer already sent its next request or
// its first is still awaited (see Conn.Serving).
func (r *Reader) Read(p []byte) (int, error) {
	c := r.c
	o := c.s.o
	if !c.busy.Load() {
		now := clock.Mono()
		if !c.s.closing.Load() || c.held.Load() {
			if r.deadline || now-r.idleSet >= time.Second || r.idleSet == 0 {
				if o.IdleTimeout > 0 {
					c.SetReadDeadline(clock.MonoTime(now + o.IdleTimeout))
				} else {
					c.SetReadDeadline(time.Time{})
				}
				r.idleSet, r.deadline = now, false
			}
		}
		// Shutting down (maybe since the deadline above): a request is
		// read only as Serving has it, under its own deadline (the
		// shutdown's wake may have set the last one to now).
		if c.s.closing.Load() && !c.held.Load() {
			dl, ok := c.stopDeadline(now)
			if !ok {
				return 0, os.ErrDeadlineExceeded
			}
			c.SetReadDeadline(dl)
			r.deadline = true // not the idle deadline
		}
	} else if !r.deadline && o.RequestTimeout > 0 {
		// The request needs more than one read: bound the rest.
		c.SetReadDeadline(time.Now().Add(o.RequestTimeout))
		r.deadline = true
	}
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.busy.Store(true)
		if !c.began.Load() {
			c.began.Store(true)
		}
	}
	return n, err
}

// LogReadError logs why a connection's read ended, at a level that fits:
// a clean close is debug, a malformed request (isProtocol) a warning, an
// idle or stalled client info.
func (c *Conn) LogReadError(err error, isProtocol bool) {
	log, name := c.s.o.Logger, c.s.o.Name
	switch {
	case isProtocol:
		log.Warn(name+": malformed request; closing the connection", "err", err, "remote", c.RemoteAddr().String())
	case errors.Is(err, os.ErrDeadlineExceeded) && c.Closing():
	case errors.Is(err, os.ErrDeadlineExceeded):
		log.Info(name+": closing an idle or stalled connection", "err", err, "remote", c.RemoteAddr().String())
	default:
		log.Debug(name+": connection closed", "err", err)
	}
}

// Printable returns at most 64 bytes of b with every byte outside
// printable ASCII shown as '?', for quoting peer input in log lines.
func Printable(b []byte) string {
	if len(b) > 64 {
		b = b[:64]
	}
	out := make([]byte, len(b))
	for i, c := range b {
		if c < 0x20 || c > 0x7e {
			c = '?'
		}
		out[i] = c
	}
	return string(out)
}
