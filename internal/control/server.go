package control

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strings"

	"sluice/internal/netserve"
	"sluice/internal/peercred"
)

// Peer is who sent a command: the kernel's record of the process that
// connected.
type Peer = peercred.Cred

// Reply is what a Handler returns for a command: the result (encoded as
// JSON for -json), the same for people, and, for a command that changed
// something, what it changed (the log line says it).
type Reply struct {
	Result  any
	Text    string
	Changed string
}

// Handler carries out commands.
type Handler interface {
	Handle(ctx context.Context, peer Peer, req Request) (Reply, error)
}

// Options configure a Server.
type Options struct {
	Handler Handler
	Logger  *slog.Logger
	netserve.ConnLimits
	// MaxLine bounds a request line (default DefaultMaxLine).
	MaxLine int
	// Allow says whether a peer may give commands (nil: any that could
	// open the socket). A peer refused is told so and logged.
	Allow func(Peer) bool
}

// Server serves the control protocol: Serve, Shutdown and Close as in
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
	s := &Server{o: o}
	s.Server = netserve.New(netserve.Options{Name: "control", Logger: o.Logger, ConnLimits: o.ConnLimits}, s.serve)
	return s
}

func (s *Server) serve(c *netserve.Conn) {
	if _, ok := c.RemoteAddr().(*net.UnixAddr); !ok {
		s.o.Logger.Error("control: a connection not on a unix socket; closed it", "remote", c.RemoteAddr().String())
		return
	}
	peer, err := peercred.Unix(c.Conn)
	if err != nil {
		s.o.Logger.Warn("control: the peer's credentials cannot be read; closed the connection", "err", err)
		return
	}
	if s.o.Allow != nil && !s.o.Allow(peer) {
		s.o.Logger.Warn("control: refused a peer outside the admin group", "uid", peer.UID, "gid", peer.GID, "pid", peer.PID)
		WriteResponse(c, Response{Error: "not allowed: neither root, sluice's user nor in the admin group"})
		return
	}
	r := bufio.NewReaderSize(c.Reader(), 4096)
	for c.Serving() {
		req, err := ReadRequest(r, s.o.MaxLine)
		if err != nil {
			if errors.Is(err, ErrProtocol) {
				s.o.Logger.Warn("control: malformed request; closing the connection", "err", err, "uid", peer.UID, "pid", peer.PID)
				WriteResponse(c, Response{Error: err.Error()})
			} else if !errors.Is(err, io.EOF) {
				c.LogReadError(err, false)
			}
			return
		}
		resp := s.do(peer, req)
		c.Done()
		if err := WriteResponse(c, resp); err != nil {
			return
		}
	}
}

// do runs one command and logs it: one line naming the peer, the command
// and, for a change, what changed.
func (s *Server) do(peer Peer, req Request) Response {
	rep, err := s.o.Handler.Handle(context.Background(), peer, req)
	attrs := []any{"command", req.Command, "uid", peer.UID, "pid", peer.PID}
	if err != nil {
		s.o.Logger.Warn("control: command failed", append(attrs, "args", argText(req), "err", printable(err.Error()))...)
		return Response{Error: err.Error()}
	}
	if rep.Changed != "" {
		s.o.Logger.Info("control: "+req.Command, append(attrs, "changed", printable(rep.Changed))...)
	} else {
		s.o.Logger.Info("control: "+req.Command, append(attrs, "args", argText(req))...)
	}
	resp := Response{OK: true, Text: rep.Text}
	if rep.Result != nil {
		b, err := json.Marshal(rep.Result)
		if err != nil {
			return Response{Error: "encode the result: " + err.Error()}
		}
		resp.Result = b
	}
	return resp
}

// argText renders a request's non-empty arguments for a log line
// (printable).
func argText(req Request) string {
	var b strings.Builder
	for _, m := range []map[string]string{req.Args, req.Attrs} {
		for _, k := range slices.Sorted(maps.Keys(m)) {
			if m[k] == "" || m[k] == "0" {
				continue
			}
			if b.Len() > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(k + "=" + m[k])
		}
	}
	return printable(b.String())
}

// printable is s as a log line may carry text a peer gave: bytes outside
// printable ASCII as '?' (no forged line, no terminal escape), at most
// 512 bytes.
func printable(s string) string {
	out := []byte(s)
	if len(out) > 512 {
		out = append(out[:509], "..."...)
	}
	for i, c := range out {
		if c < 0x20 || c > 0x7e {
			out[i] = '?'
		}
	}
	return string(out)
}
