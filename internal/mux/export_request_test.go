package mux

import (
	"context"
	"net"
	"time"
)

// ReadRequest reads one request from c as a connection of a Server does
// (readRequest).
func ReadRequest(c net.Conn, timeout time.Duration) (line string, ok bool) {
	return readRequest(netConn{c}, timeout, new(reqBuf), nil)
}

// netConn is a net.Conn as a clientConn.
type netConn struct{ net.Conn }

func (c netConn) setReadTimeout(d time.Duration)  { _ = c.SetReadDeadline(time.Now().Add(d)) }
func (c netConn) setWriteTimeout(d time.Duration) { _ = c.SetWriteDeadline(time.Now().Add(d)) }

// Handle answers one request line (without its newline) as a connection
// of s does. An empty reply means the connection is closed without a
// byte.
func (s *Server) Handle(ctx context.Context, line string, privileged bool) string {
	reply, raw := s.handle(ctx, line, privileged)
	if raw != nil {
		return string(raw)
	}
	return reply
}
