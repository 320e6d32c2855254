package anvil

import (
	"context"
	"errors"
	"io"
	"log/slog"

	"sluice/internal/netserve"
	"sluice/internal/peercred"
)

// Counts is what a lookup reports for one ident: its open connections
// (Count) and, in the current window, its connections (Rate), messages,
// recipients, new TLS sessions and AUTH commands, as anvil's lookup reply
// names them (count, rate, mail, rcpt, newtls, auth).
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
	// Holding reports whether the stream holds a connection (an SMTP
	// session smtpd has not yet said disconnect for).
	Holding() bool
	// Close drops whatever the stream still holds (smtpd went away).
	Close()
}

// Handler makes a Session for each client stream.
type Handler interface {
	// NewSession opens the Session of a stream whose peer is process pid
	// (an smtpd process, known on a unix socket; 0 on TCP).
	NewSession(pid int) Session
}

// Options configure a Server.
type Options struct {
	// Handler makes each stream's Session. Required.
	Handler Handler
	// Logger gets the server's log lines (default slog.Default()).
	Logger *slog.Logger
	// NoAnnounce skips the "protocol=anvil_protocol" greeting, for Postfix
	// releases before 3.6.
	NoAnnounce bool
	// ConnLimits: one connection is one client stream (one smtpd
	// process); the idle default, 1h, is Postfix's ipc_timeout; the
	// request timeout keeps a client that never ends its request from
	// holding a stream forever.
	netserve.ConnLimits
	// MaxLine caps one request line (default DefaultMaxLine).
	MaxLine int
}

// Server serves the anvil protocol: Serve, Shutdown and Close as in
// net/http.
type Server struct {
	*netserve.Server
	o Options
}

// NewServer returns a Server with o's defaults filled in.
func NewServer(o Options) *Server {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.MaxLine <= 0 {
		o.MaxLine = DefaultMaxLine
	}
	s := &Server{o: o}
	s.Server = netserve.New(netserve.Options{Name: "anvil", Logger: o.Logger, ConnLimits: o.ConnLimits}, s.serve)
	return s
}

func (s *Server) serve(c *netserve.Conn) {
	log := s.o.Logger
	pid, _ := peercred.PID(c.Conn)
	sess := s.o.Handler.NewSession(pid)
	defer sess.Close()
	ctx := context.Background()
	if !s.o.NoAnnounce {
		if _, err := io.WriteString(c, Announcement); err != nil {
			log.Debug("anvil: client went away before the announcement", "err", err)
			return
		}
	}
	dec := NewDecoder(c.Reader(), s.o.MaxLine)
	var rep Reply
	// A stream holding a session is served through a Shutdown until smtpd
	// ends the session (see netserve.Conn.Hold): closing it would drop a
	// count that is still true while the next daemon could not know it.
	for c.Serving() || sess.Holding() {
		m, err := dec.Decode()
		c.Done()
		if err != nil {
			c.LogReadError(err, errors.Is(err, ErrProtocol))
			return
		}
		rep.Reset()
		if err := s.answer(ctx, sess, m, &rep); err != nil {
			log.Warn("anvil: request failed; closing the stream", "request", m.Req.String(), "ident", printable([]byte(m.Ident)), "err", err)
			return
		}
		// Held before the reply goes: once smtpd has its answer it may
		// count on the session, and a Shutdown starting then must see it.
		c.Hold(sess.Holding())
		if _, err := c.Write(rep.Bytes()); err != nil {
			log.Debug("anvil: write failed; closing the stream", "err", err)
			return
		}
	}
}

func (s *Server) answer(ctx context.Context, sess Session, m Msg, rep *Reply) error {
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
		s.o.Logger.Warn("anvil: unrecognized request, ignored", "request", m.Name)
		rep.Int("status", -1)
	}
	return nil
}
