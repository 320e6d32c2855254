package web

import (
	"context"
	"net"
	"net/http"
	"sync/atomic"

	"sluice/internal/netserve"
)

// DefaultMaxConns is MaxConns (per listener) when it is 0: config's
// default for web.max_conns (a test in internal/app fails if the two drift). The web
// server's clients are a few Prometheus scrapers, `sluice status` and at
// most MaxStreams open pages (each a stream and a request or two), so
// the cap is far below the mail doors' 4096: a flood on this door must
// not take the descriptors the mail doors share with it.
const DefaultMaxConns = 256

// DefaultMaxConnsPerPeer is MaxConnsPerPeer when it is 0: config's
// default for web.max_conns_per_peer. A scraper holds one connection, a
// browser at most six to one host; sixteen leave room for a few pages
// and `sluice status`, and keep one local account, which can connect to
// a loopback port, from holding every place of a TCP listener.
const DefaultMaxConnsPerPeer = 16

// Which paths a listener serves is decided once per listener, in Serve:
// a unix socket (its owner, group and mode say who may connect) serves
// everything; any other listener, TCP in particular (any local account
// can connect to a loopback port), serves /metrics only unless
// Options.StatusOnTCP is set.
func (s *Server) servesStatus(l net.Listener) bool {
	return s.o.StatusOnTCP || l.Addr().Network() == "unix"
}

// fullKey marks, in a connection's context, a connection whose listener
// serves the status page.
type fullKey struct{}

// connContext is the http.Server's ConnContext: it records whether the
// connection's listener serves the status page.
func connContext(ctx context.Context, c net.Conn) context.Context {
	if lc, ok := c.(*limitConn); ok && lc.full {
		return context.WithValue(ctx, fullKey{}, true)
	}
	return ctx
}

// serveHTTP routes a request by its connection's listener: the status
// page and /metrics, or /metrics only. A connection not accepted through
// Serve gets /metrics only.
func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	if full, _ := r.Context().Value(fullKey{}).(bool); full {
		s.handler.ServeHTTP(w, r)
		return
	}
	s.metricsOnly.ServeHTTP(w, r)
}

// notOnTCP answers every path but /metrics on a listener that does not
// serve the status page.
func (s *Server) notOnTCP(w http.ResponseWriter, _ *http.Request) {
	msg := "not found: the status page is not served on TCP listeners, only /metrics; read it through a unix socket listener"
	if s.o.StatusSetting != "" {
		msg += ", or allow it on TCP with " + s.o.StatusSetting
	}
	http.Error(w, msg, http.StatusNotFound)
}

// limitListener caps one listener's open connections: beyond MaxConns a
// new connection is closed at once, before net/http sees it, so a
// connection that never sends a byte counts as much as a busy one. Each
// listener has its own MaxConns, so that a flood on a TCP listener (any
// local account can connect to it) cannot take the places of the unix
// socket, whose mode decides who connects: the descriptors the web
// server holds stay below MaxConns times its listeners. Within them, the
// listener's netserve.Gate caps each peer (MaxConnsPerPeer), who is
// learnt as the mail doors learn theirs.
type limitListener struct {
	net.Listener
	s    *Server
	full bool           // the listener serves the status page
	gate *netserve.Gate // MaxConnsPerPeer
	n    atomic.Int64   // its open connections
}

// limit wraps l in its caps.
func (s *Server) limit(l net.Listener) *limitListener {
	var pl netserve.PeerLimits
	if s.o.MaxConnsPerPeer > 0 {
		pl.MaxConnsPerPeer = s.o.MaxConnsPerPeer
	}
	return &limitListener{Listener: l, s: s, full: s.servesStatus(l), gate: netserve.NewGate("web", s.log, pl)}
}

// Accept returns the next connection under the caps, closing those
// beyond them.
func (l *limitListener) Accept() (net.Conn, error) {
	s := l.s
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if !l.take() {
			if n := s.refused.Add(1); n&(n-1) == 0 {
				s.log.Warn("web: too many connections; closing new ones", "listener", l.Addr().String(), "max_conns", s.o.MaxConns, "refused_total", n)
			}
			c.Close()
			continue
		}
		place, err := l.gate.Admit(c) // it logs a refusal
		if err != nil {
			l.n.Add(-1)
			c.Close()
			continue
		}
		s.conns.Add(1)
		return &limitConn{Conn: c, l: l, full: l.full, place: place}, nil
	}
}

// take counts one more open connection, unless MaxConns are open.
func (l *limitListener) take() bool {
	for {
		n := l.n.Load()
		if n >= int64(l.s.o.MaxConns) {
			return false
		}
		if l.n.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// limitConn is a connection counted against its listener's MaxConns
// until its first Close.
type limitConn struct {
	net.Conn
	l      *limitListener
	full   bool
	place  netserve.Place // its peer's place
	closed atomic.Bool
}

// Close closes the connection and, the first time, gives its places back.
func (c *limitConn) Close() error {
	err := c.Conn.Close()
	if c.closed.CompareAndSwap(false, true) {
		c.place.Release()
		c.l.n.Add(-1)
		c.l.s.conns.Add(-1)
	}
	return err
}

// CloseWrite half-closes a TCP connection, as net/http does before it
// closes one whose request it refused, so the client reads the answer.
func (c *limitConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// Conns returns the number of open connections (over all listeners).
// Only tests call it (web's and app's), to wait until a connection is
// counted.
func (s *Server) Conns() int { return int(s.conns.Load()) }
