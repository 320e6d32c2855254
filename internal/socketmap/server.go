package socketmap

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"time"

	"sluice/internal/netserve"
)

// Replies the server writes itself for malformed requests (docs/protocols/mimedefang-multiplexor.md, "Socket map").
const (
	ReplyNoComma   = "PERM Netstring missing terminating comma"
	ReplyBadFormat = "PERM Invalid request format"
)

// Handler answers one socket map lookup with the reply payload to send
// back as a netstring: "OK <value>", "NOTFOUND ", "TEMP <msg>",
// "TIMEOUT <msg>" or "PERM <msg>". A non-nil error means there is no
// reply to give (the server is shutting down): the connection is closed.
type Handler interface {
	Lookup(ctx context.Context, mapName, key string) (reply string, err error)
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, mapName, key string) (string, error)

// Lookup calls f.
func (f HandlerFunc) Lookup(ctx context.Context, mapName, key string) (string, error) {
	return f(ctx, mapName, key)
}

// ParseRequest splits a request payload "<mapname> <key>" at its first
// space; ok is false when there is no space (the reference's "PERM
// Invalid request format"). The map name may be empty, and the key may
// hold further spaces.
func ParseRequest(payload []byte) (mapName, key string, ok bool) {
	mapName, key, ok = strings.Cut(string(payload), " ")
	return mapName, key, ok
}

// Options configure a Server.
type Options struct {
	// WriteTimeout bounds the writing of each reply (-c; default 10 s).
	// There is no read timeout: map connections are persistent and may
	// stay idle as long as the client likes.
	WriteTimeout time.Duration
	// MaxConns caps concurrent map connections (default
	// netserve.DefaultMaxConns); more are closed at once.
	MaxConns int
	// Logger gets the server's log lines (default slog.Default()).
	Logger *slog.Logger
}

// Server serves the socket map protocol on persistent connections, one
// request at a time per connection, on netserve's connection lifecycle:
// Serve, Shutdown (stop accepting, let each connection finish the
// request it is in), Close, and a panicking Handler costing its own
// connection only.
type Server struct {
	*netserve.Server
	h      Handler
	o      Options
	ctx    context.Context // cancelled by Close: ends lookups in flight
	cancel context.CancelFunc
}

// NewServer returns a Server answering with h.
func NewServer(h Handler, o Options) *Server {
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = 10 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{h: h, o: o, ctx: ctx, cancel: cancel}
	s.Server = netserve.New(netserve.Options{
		Name: "socket map", Logger: o.Logger,
		ConnLimits: netserve.ConnLimits{MaxConns: o.MaxConns, IdleTimeout: -1, RequestTimeout: -1},
	}, s.serveConn)
	return s
}

// Shutdown stops accepting and closes each connection once it is between
// requests; when ctx ends first, it cancels the lookups in flight and
// closes the rest.
func (s *Server) Shutdown(ctx context.Context) error {
	stop := context.AfterFunc(ctx, s.cancel)
	defer stop()
	return s.Server.Shutdown(ctx)
}

// Close stops every listener, closes every connection and waits for the
// connection goroutines; lookups in flight see their context cancelled.
func (s *Server) Close() error {
	s.cancel()
	s.Server.Close()
	s.Server.Wait()
	return nil
}

func (s *Server) serveConn(c *netserve.Conn) {
	serve(s.ctx, c.Reader(), c, s.h, s.o.WriteTimeout, func() bool {
		c.Done()
		return c.Serving()
	})
}

// serve answers requests read from in, writing the replies to w, until
// EOF, a bad length prefix (the reference closes without a reply), a
// failed write, or a Handler error. Each reply is written under
// writeTimeout when w has deadlines; after each reply it asks next
// whether to read another request.
func serve(ctx context.Context, in io.Reader, w io.Writer, h Handler, writeTimeout time.Duration, next func() bool) {
	r := bufio.NewReader(in)
	dl, _ := w.(interface{ SetWriteDeadline(time.Time) error })
	var out []byte
	for {
		payload, err := ReadNetstring(r)
		var reply string
		switch {
		case errors.Is(err, ErrNoComma):
			reply = ReplyNoComma
		case err != nil:
			return
		default:
			name, key, ok := ParseRequest(payload)
			if !ok {
				reply = ReplyBadFormat
				break
			}
			reply, err = h.Lookup(ctx, name, key)
			if err != nil {
				return
			}
		}
		out = AppendNetstring(out[:0], reply)
		if dl != nil {
			_ = dl.SetWriteDeadline(time.Now().Add(writeTimeout))
		}
		if _, err := w.Write(out); err != nil {
			return
		}
		if !next() {
			return
		}
	}
}
