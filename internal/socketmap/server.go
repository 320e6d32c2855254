package socketmap

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"
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
	Logger       *slog.Logger
}

// Server serves the socket map protocol on persistent connections, one
// request at a time per connection.
type Server struct {
	h         Handler
	o         Options
	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[net.Conn]struct{}
	closed    bool
	ctx       context.Context // cancelled by Close: ends lookups in flight
	cancel    context.CancelFunc
	wg        sync.WaitGroup
}

// ErrServerClosed is returned by Serve after Close.
var ErrServerClosed = errors.New("socketmap: server closed")

// NewServer returns a Server answering with h.
func NewServer(h Handler, o Options) *Server {
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = 10 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Server{h: h, o: o, ctx: ctx, cancel: cancel, listeners: map[net.Listener]struct{}{}, conns: map[net.Conn]struct{}{}}
}

// Serve accepts connections on l until Close.
func (s *Server) Serve(l net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		l.Close()
		return ErrServerClosed
	}
	s.listeners[l] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	defer s.wg.Done()
	var delay time.Duration
	for {
		c, err := l.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return ErrServerClosed
			}
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			// EMFILE and the like: back off and go on.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			s.o.Logger.Warn("socket map: accept", "err", err)
			time.Sleep(delay)
			continue
		}
		delay = 0
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return ErrServerClosed
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serveConn(c)
	}
}

// Close stops every listener, closes every connection and waits for the
// connection goroutines; lookups in flight see their context cancelled.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	s.cancel()
	for l := range s.listeners {
		l.Close()
	}
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}

func (s *Server) serveConn(c net.Conn) {
	defer func() {
		c.Close()
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		s.wg.Done()
	}()
	ServeConn(s.ctx, c, s.h, s.o.WriteTimeout)
}

// ServeConn answers requests on rw until EOF, a bad length prefix (the
// reference closes without a reply), a failed write, or a Handler error.
// Each reply is written under writeTimeout when rw has deadlines.
func ServeConn(ctx context.Context, rw io.ReadWriter, h Handler, writeTimeout time.Duration) {
	r := bufio.NewReader(rw)
	dl, _ := rw.(interface{ SetWriteDeadline(time.Time) error })
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
		if _, err := rw.Write(out); err != nil {
			return
		}
	}
}
