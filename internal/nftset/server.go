package nftset

import (
	"bufio"
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"time"

	"sluice/internal/escalate"
	"sluice/internal/netserve"
)

// Adder puts an address in the drop set for a while (*Nft).
type Adder interface {
	Add(ctx context.Context, addr netip.Addr, d time.Duration) error
}

// Options configure a Server.
type Options struct {
	// UID is the one user served (the daemon's): any other peer's
	// connection is closed unread.
	UID int
	// MaxFor caps a request's duration.
	MaxFor time.Duration
	// Logger gets the server's log lines.
	Logger *slog.Logger
}

// maxConns bounds the helper's connections: the daemon keeps one, a
// restart briefly two.
const maxConns = 4

// Server answers the daemon's requests on netserve's connection
// lifecycle: one user served, four connections at most, a line of at
// most escalate.MaxLine bytes, one request at a time.
type Server struct {
	*netserve.Server
	add    Adder
	o      Options
	ctx    context.Context
	cancel context.CancelFunc
}

// NewServer returns a Server that adds with add.
func NewServer(add Adder, o Options) *Server {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{add: add, o: o, ctx: ctx, cancel: cancel}
	s.Server = netserve.New(netserve.Options{
		Name: "escalate helper", Logger: o.Logger,
		ConnLimits: netserve.ConnLimits{MaxConns: maxConns, PeerLimits: netserve.PeerLimits{AllowUIDs: []int{o.UID}},
			IdleTimeout: -1, RequestTimeout: 10 * time.Second},
	}, s.serveConn)
	return s
}

// Close stops serving and ends the requests in flight.
func (s *Server) Close() error {
	s.cancel()
	s.Server.Close()
	s.Server.Wait()
	return nil
}

func (s *Server) serveConn(c *netserve.Conn) {
	r := bufio.NewReaderSize(c.Reader(), escalate.MaxLine)
	answer := func(err error) bool {
		c.SetWriteDeadline(time.Now().Add(10 * time.Second))
		_, werr := c.Write([]byte(escalate.Answer(err)))
		return werr == nil
	}
	for {
		line, err := r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			answer(escalate.ErrLine)
			return // the rest of the line cannot be told from a request
		}
		if err != nil {
			return
		}
		req, err := escalate.ParseRequest(string(line))
		switch {
		case err != nil:
			s.o.Logger.Warn("escalate helper: a malformed request; nothing done", "err", err)
		default:
			req.For = min(req.For, s.o.MaxFor)
			if err = s.add.Add(s.ctx, req.Addr, req.For); err != nil {
				s.o.Logger.Warn("escalate helper: adding an address failed", "client", req.Addr.String(), "err", err)
			} else {
				s.o.Logger.Debug("escalate helper: dropping the address's connections", "client", req.Addr.String(), "for", req.For.String())
			}
		}
		if !answer(err) {
			return
		}
		c.Done()
		if !c.Serving() {
			return
		}
	}
}
