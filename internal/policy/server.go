package policy

import (
	"context"
	"errors"
	"io"
	"log/slog"

	"sluice/internal/netserve"
)

// Session answers the requests of one policy connection (one smtpd
// process). Its methods are called one at a time, never concurrently.
type Session interface {
	// Check returns the action for req ("DUNNO", "DEFER_IF_PERMIT ...").
	// An error sends nothing and closes the connection; Postfix then
	// retries and finally applies its default_action.
	Check(ctx context.Context, req *Request) (string, error)
	// Close ends the session (the connection closed).
	Close()
}

// Handler makes a Session per connection.
type Handler interface {
	NewSession() Session
}

// Options configure a Server.
type Options struct {
	// Handler makes each connection's Session. Required.
	Handler Handler
	// Logger gets the server's log lines (default slog.Default()).
	Logger *slog.Logger
	// ConnLimits: Postfix opens one connection per busy smtpd process,
	// and closes its end after smtpd_policy_service_max_idle (300s).
	netserve.ConnLimits
	Limits Limits
}

// Server serves the policy protocol: Serve, Shutdown and Close as in
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
	o.Limits.defaults()
	s := &Server{o: o}
	s.Server = netserve.New(netserve.Options{Name: "policy", Logger: o.Logger, ConnLimits: o.ConnLimits}, s.serve)
	return s
}

func (s *Server) serve(c *netserve.Conn) {
	sess := s.o.Handler.NewSession()
	defer sess.Close()
	ctx := context.Background()
	dec := NewDecoder(c.Reader(), s.o.Limits)
	var req Request
	out := make([]byte, 0, 256)
	for c.Serving() {
		err := dec.Decode(&req)
		c.Done()
		if err != nil {
			c.LogReadError(err, errors.Is(err, ErrProtocol))
			return
		}
		action, err := sess.Check(ctx, &req)
		if err != nil {
			s.o.Logger.Warn("policy: cannot decide; sending nothing and closing the connection (Postfix retries, then applies its default_action)",
				"err", err, "client", req.ClientAddress, "state", req.ProtocolState)
			return
		}
		out = AppendReply(out[:0], action)
		if _, err := c.Write(out); err != nil {
			if !errors.Is(err, io.EOF) {
				s.o.Logger.Debug("policy: write failed", "err", err)
			}
			return
		}
	}
}
