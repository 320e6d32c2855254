package anvil

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Counts is what a lookup reports for one ident.
type Counts struct {
	Count, Rate, Mail, Rcpt, NewTLS, Auth int64
}

// Session answers the requests of one client stream (one smtpd process).
// Its methods are called one at a time, never concurrently.
type Session interface {
	// Connect registers a connection for ident, linked to this stream,
	// and returns the connection count and rate to report.
	Connect(ctx context.Context, ident string) (count, rate int64, err error)
	// Disconnect ends the connection for ident if this stream holds it.
	Disconnect(ctx context.Context, ident string) error
	// Event counts one Message, Recipient, NewTLS, Auth or TLSTrace event
	// and returns the rate to report.
	Event(ctx context.Context, req Request, ident string) (rate int64, err error)
	// NewTLSStatus returns the new-TLS rate without counting.
	NewTLSStatus(ctx context.Context, ident string) (rate int64, err error)
	// Lookup reports every counter of ident, changing nothing.
	Lookup(ctx context.Context, ident string) (Counts, error)
	// Close drops whatever the stream still holds (smtpd went away).
	Close()
}

// Handler makes a Session for each client stream.
type Handler interface {
	NewSession() Session
}

// Options configure a Server.
type Options struct {
	Handler Handler
	Logger  *slog.Logger
	// NoAnnounce skips the "protocol=anvil_protocol" greeting, for Postfix
	// releases before 3.6.
	NoAnnounce bool
	// MaxConns caps concurrent client streams (default 4096); more are
	// closed at once, with a log line.
	MaxConns int
	// IdleTimeout closes a stream idle between requests this long
	// (default 1h, like Postfix's ipc_timeout; negative: never).
	IdleTimeout time.Duration
	// RequestTimeout bounds reading the rest of a request once its first
	// byte arrived (default 10s), so a client that never ends its request
	// does not hold a stream forever.
	RequestTimeout time.Duration
	// MaxLine caps one request line (default DefaultMaxLine).
	MaxLine int
}

// ErrServerClosed is returned by Serve after Shutdown or Close.
var ErrServerClosed = errors.New("anvil: server closed")

// Server serves the anvil protocol. Create it with NewServer.
type Server struct {
	o         Options
	log       *slog.Logger
	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[*conn]struct{}
	closing   atomic.Bool
	wg        sync.WaitGroup
	nconns    atomic.Int64
	refused   atomic.Int64
}

// NewServer returns a Server with o's defaults filled in.
func NewServer(o Options) *Server {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.MaxConns <= 0 {
		o.MaxConns = 4096
	}
	if o.IdleTimeout == 0 {
		o.IdleTimeout = time.Hour
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = 10 * time.Second
	}
	if o.MaxLine <= 0 {
		o.MaxLine = DefaultMaxLine
	}
	return &Server{
		o:         o,
		log:       o.Logger,
		listeners: map[net.Listener]struct{}{},
		conns:     map[*conn]struct{}{},
	}
}

// Conns returns the number of open client streams.
func (s *Server) Conns() int { return int(s.nconns.Load()) }

// Serve accepts client streams on l until Shutdown or Close; it then
// returns ErrServerClosed. Temporary accept errors back off.
func (s *Server) Serve(l net.Listener) error {
	s.mu.Lock()
	if s.closing.Load() {
		s.mu.Unlock()
		l.Close()
		return ErrServerClosed
	}
	s.listeners[l] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, l)
		s.mu.Unlock()
		l.Close()
	}()
	var backoff time.Duration
	for {
		c, err := l.Accept()
		if err != nil {
			if s.closing.Load() {
				return ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, os.ErrDeadlineExceeded) || isTemporary(err) {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				s.log.Warn("anvil: accept failed; retrying", "err", err, "in", backoff)
				time.Sleep(backoff)
				continue
			}
			return err
		}
		backoff = 0
		if s.nconns.Load() >= int64(s.o.MaxConns) {
			if n := s.refused.Add(1); n&(n-1) == 0 {
				s.log.Warn("anvil: too many client streams; closing new ones", "max_conns", s.o.MaxConns, "refused_total", n)
			}
			c.Close()
			continue
		}
		cn := &conn{s: s, c: c}
		s.mu.Lock()
		if s.closing.Load() {
			s.mu.Unlock()
			c.Close()
			return ErrServerClosed
		}
		s.conns[cn] = struct{}{}
		s.wg.Add(1)
		s.nconns.Add(1)
		s.mu.Unlock()
		go cn.serve()
	}
}

func isTemporary(err error) bool {
	var t interface{ Temporary() bool }
	return errors.As(err, &t) && t.Temporary()
}

// Shutdown stops accepting, then closes every stream as soon as it is
// between requests, and waits for them until ctx ends; then it closes the
// rest.
func (s *Server) Shutdown(ctx context.Context) error {
	s.closing.Store(true)
	s.mu.Lock()
	for l := range s.listeners {
		l.Close()
	}
	for c := range s.conns {
		c.wakeIdle()
	}
	s.mu.Unlock()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		s.Close()
		<-done
		return ctx.Err()
	}
}

// Close closes every listener and stream at once.
func (s *Server) Close() error {
	s.closing.Store(true)
	s.mu.Lock()
	for l := range s.listeners {
		l.Close()
	}
	for c := range s.conns {
		c.c.Close()
	}
	s.mu.Unlock()
	return nil
}

type conn struct {
	s    *Server
	c    net.Conn
	busy atomic.Bool // inside a request
}

// wakeIdle makes a stream blocked between requests return at once.
func (c *conn) wakeIdle() {
	if !c.busy.Load() {
		c.c.SetReadDeadline(time.Now())
	}
}

func (c *conn) serve() {
	s := c.s
	log := s.log
	sess := s.o.Handler.NewSession()
	defer func() {
		if r := recover(); r != nil {
			log.Error("anvil: panic serving a client stream; closed it", "panic", r)
		}
		sess.Close()
		c.c.Close()
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		s.nconns.Add(-1)
		s.wg.Done()
	}()
	ctx := context.Background()
	if !s.o.NoAnnounce {
		if _, err := io.WriteString(c.c, Announcement); err != nil {
			log.Debug("anvil: client went away before the announcement", "err", err)
			return
		}
	}
	dec := NewDecoder(&deadlineReader{c: c}, s.o.MaxLine)
	var rep Reply
	for {
		if s.closing.Load() {
			return
		}
		m, err := dec.Decode()
		c.busy.Store(false)
		if err != nil {
			switch {
			case errors.Is(err, io.EOF):
				log.Debug("anvil: client closed its stream")
			case errors.Is(err, ErrProtocol):
				log.Warn("anvil: malformed request; closing the stream", "err", err)
			case errors.Is(err, os.ErrDeadlineExceeded) && s.closing.Load():
			case errors.Is(err, os.ErrDeadlineExceeded):
				log.Info("anvil: closing an idle or stalled stream", "err", err)
			default:
				log.Debug("anvil: read failed; closing the stream", "err", err)
			}
			return
		}
		rep.Reset()
		if err := c.answer(ctx, sess, m, &rep); err != nil {
			log.Warn("anvil: request failed; closing the stream", "request", m.Req.String(), "ident", printable([]byte(m.Ident)), "err", err)
			return
		}
		if _, err := c.c.Write(rep.Bytes()); err != nil {
			log.Debug("anvil: write failed; closing the stream", "err", err)
			return
		}
	}
}

func (c *conn) answer(ctx context.Context, sess Session, m Msg, rep *Reply) error {
	switch m.Req {
	case Connect:
		count, rate, err := sess.Connect(ctx, m.Ident)
		if err != nil {
			return err
		}
		rep.Int("status", 0)
		rep.Int("count", count)
		rep.Int("rate", rate)
	case Disconnect:
		if err := sess.Disconnect(ctx, m.Ident); err != nil {
			return err
		}
		rep.Int("status", 0)
	case Message, Recipient, NewTLS, Auth, TLSTrace:
		rate, err := sess.Event(ctx, m.Req, m.Ident)
		if err != nil {
			return err
		}
		rep.Int("status", 0)
		rep.Int("rate", rate)
	case NewTLSStatus:
		rate, err := sess.NewTLSStatus(ctx, m.Ident)
		if err != nil {
			return err
		}
		rep.Int("status", 0)
		rep.Int("rate", rate)
	case Lookup:
		cs, err := sess.Lookup(ctx, m.Ident)
		if err != nil {
			return err
		}
		rep.Int("status", 0)
		rep.Int("count", cs.Count)
		rep.Int("rate", cs.Rate)
		rep.Int("mail", cs.Mail)
		rep.Int("rcpt", cs.Rcpt)
		rep.Int("newtls", cs.NewTLS)
		rep.Int("auth", cs.Auth)
	default:
		c.s.log.Warn("anvil: unrecognized request, ignored", "request", m.Name)
		rep.Int("status", -1)
	}
	return nil
}

// deadlineReader arms the idle deadline before waiting for a request and
// the request deadline once its first bytes arrived.
type deadlineReader struct {
	c *conn
}

func (r *deadlineReader) Read(p []byte) (int, error) {
	c := r.c
	o := c.s.o
	if !c.busy.Load() {
		if o.IdleTimeout > 0 {
			c.c.SetReadDeadline(time.Now().Add(o.IdleTimeout))
		} else {
			c.c.SetReadDeadline(time.Time{})
		}
		if c.s.closing.Load() {
			return 0, os.ErrDeadlineExceeded
		}
	}
	n, err := c.c.Read(p)
	if n > 0 && !c.busy.Load() {
		c.busy.Store(true)
		c.c.SetReadDeadline(time.Now().Add(o.RequestTimeout))
	}
	return n, err
}
