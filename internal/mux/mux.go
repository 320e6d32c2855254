// Package mux is mimedefang-multiplexor's main and restricted sockets: one
// request line per connection, answered by the multiplexor itself (status
// and load commands) or forwarded to a worker of a pool.Pool, with the
// reference's reply strings byte for byte. It also holds the
// multiplexor's other outputs: the -O notification socket (Notifier), the
// -t/-T stats file (StatsLog) and the -d trace; its syslog client is
// package syslog's.
//
// The deliberate differences from mimedefang-multiplexor 3.3 (the
// reference) are Differences (differences.go), from which the README's
// and docs/mux.md's lists are generated.
package mux

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"sluice/internal/pool"
	"sluice/internal/rawio"
)

// Reply strings the multiplexor writes itself (docs/protocols/mimedefang-multiplexor.md: "Built-in commands", "Forwarded commands", "Queue", "Per-domain recipok limit").
const (
	ReplyTooLong        = "error: Command too long\n"
	ReplyNoFree         = "error: No free workers\n"
	ReplyActivate       = "error: Unable to activate worker\n"
	ReplyTalk           = "error: Error talking to worker process\n"
	ReplyNoResponse     = "ERR No response from worker\n"
	ReplyTimeoutFew     = "ERR Filter timed out - check filter rules or system load\n"
	ReplyTimeoutMany    = "ERR Filter timed out - system may be overloaded (consider increasing busy timeout)\n"
	ReplyQueueTimeout   = "error: Queued request timed out\n"
	ReplyDomainLimit    = "ok -1 Per-domain%20recipok%20limit%20hit;%20please%20try%20again%20later\n"
	ReplyTick           = "error: External agents may not invoke 'tick'\n"
	ReplyUnknown        = "error: Unknown command\n"
	ReplyPrivileged     = "error: Attempt to use privileged command on unprivileged socket\n"
	ReplyReread         = "Forced reread of filter rules\n"
	ReplyBadBack        = "error: Invalid 'back' amount (must be 10-600)\n"
	ReplyBadWorker      = "error: Invalid worker number\n"
	ReplyWorkerRange    = "error: Worker number out of range\n"
	maxLine             = 4096 // the request buffer
	maxCommand          = 4094 // longest command handed to a worker
	maxRestrictedActive = 20   // concurrent requests on the restricted socket
)

// Options configure a Server.
type Options struct {
	// Pool serves the requests the multiplexor does not answer itself.
	Pool *pool.Pool
	// Timeout is -c: a client has this long to send its line, and the reply
	// is written under it too (default 10 s).
	Timeout time.Duration
	// Version is the `version` reply, sent without a newline (default "3.3",
	// the reference's, since clients may compare it).
	Version string
	// Logger gets sluice's own log lines (default slog.Default()).
	Logger *slog.Logger
}

// Server answers the main (privileged) and restricted sockets.
type Server struct {
	o          Options
	mu         sync.Mutex
	listeners  map[net.Listener]struct{} // their fronts own duplicates of their descriptors
	files      map[*os.File]struct{}     // the connection goroutines' connections
	restricted int                       // restricted connections admitted and not closed yet
	closed     bool
	// Drain's (drain.go): the fronts, the connections admitted and not
	// closed yet, and what Drain waits on.
	fronts   map[*front]struct{}
	active   atomic.Int64
	draining atomic.Bool
	drained  chan struct{}
	ctx      context.Context // cancelled by Close: ends waits on the pool
	cancel   context.CancelFunc
	wg       sync.WaitGroup
}

// ErrServerClosed is returned by Serve after Close.
var ErrServerClosed = errors.New("mux: server closed")

// ErrPoolStopped is returned by Serve when the pool stops before the
// server closes.
var ErrPoolStopped = errors.New("mux: pool stopped")

// New returns a Server for o.
func New(o Options) *Server {
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	if o.Version == "" {
		o.Version = "3.3"
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Server{o: o, ctx: ctx, cancel: cancel, listeners: map[net.Listener]struct{}{}, files: map[*os.File]struct{}{}, fronts: map[*front]struct{}{}}
}

// Serve serves l until Close; privileged is false for the restricted
// (-a) socket. l must have a descriptor (a *net.UnixListener or
// *net.TCPListener): Serve works on a duplicate of it, so it is Close,
// not l.Close, that stops Serve.
//
// Both sockets are served on the pool's owner (front.go); Serve waits
// until Close, or until the pool stops (ErrPoolStopped). The restricted
// socket admits at most 20 connections at once, as the reference does.
func (s *Server) Serve(l net.Listener, privileged bool) error {
	rc, err := rawConn(l)
	if err != nil {
		l.Close()
		return err
	}
	lfd := dupNonblock(rc)
	if lfd < 0 {
		l.Close()
		return errors.New("mux: cannot duplicate the listener's descriptor")
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		l.Close()
		rawio.CloseFD(lfd)
		return ErrServerClosed
	}
	s.listeners[l] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	defer s.wg.Done()
	f, ok := s.startFront(lfd, privileged)
	if ok {
		s.mu.Lock()
		s.fronts[f] = struct{}{}
		s.mu.Unlock()
		if s.draining.Load() { // Drain came before f was listed
			f.stopAccepting()
		}
		f.wait()
	}
	if s.isClosed() {
		return ErrServerClosed
	}
	return ErrPoolStopped
}

// admit counts a new connection; false (the caller closes it) when the
// server is closing or the restricted socket has its maximum of clients.
func (s *Server) admit(privileged bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || !privileged && s.restricted >= maxRestrictedActive {
		return false
	}
	if !privileged {
		s.restricted++
	}
	s.active.Add(1)
	return true
}

func (s *Server) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// goServe serves the admitted connection fd on a connection goroutine of
// its own, with in, what was read of it already: the slow path (a line
// split across reads, a command the owner does not answer).
func (s *Server) goServe(fd int, privileged bool, in inline) {
	s.goConn(fd, privileged, func(f *os.File) {
		s.serve(fileConn{f}, privileged, new(reqBuf), in)
	})
}

// goConn runs fn with the admitted connection fd as an *os.File on the
// runtime's poller, on a goroutine of its own, then closes it; Close
// closes the file under fn, which ends its reads and writes.
func (s *Server) goConn(fd int, privileged bool, fn func(f *os.File)) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.closeConn(fd, privileged)
		return
	}
	f := os.NewFile(uintptr(fd), "mux-client")
	s.files[f] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		fn(f)
		s.mu.Lock()
		delete(s.files, f)
		s.mu.Unlock()
		f.Close()
		s.release(privileged)
	}()
}

// Close stops every listener and closes every connection (clients in
// flight see EOF, as with the reference's SIGTERM), then waits for the
// connection goroutines and for the fronts to stop.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	s.cancel()
	for l := range s.listeners {
		l.Close()
	}
	for f := range s.files {
		f.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}

// clientConn is what serving a request needs of a connection.
type clientConn interface {
	Read(b []byte) (int, error)
	Write(b []byte) (int, error)
	// setReadTimeout and setWriteTimeout bound the reads and writes from
	// now on.
	setReadTimeout(d time.Duration)
	setWriteTimeout(d time.Duration)
}

// serve answers one connection; in is what Serve read of it already.
func (s *Server) serve(c clientConn, privileged bool, buf *reqBuf, in inline) {
	line, ok := in.line, in.whole
	if !ok {
		timeout := s.o.Timeout - in.spent
		if timeout <= 0 {
			return
		}
		line, ok = readRequest(c, timeout, buf, in.pre)
	}
	if !ok {
		return
	}
	reply, raw := s.handle(s.ctx, line, privileged)
	if reply == "" && len(raw) == 0 {
		return
	}
	c.setWriteTimeout(s.o.Timeout)
	if raw != nil {
		_, _ = c.Write(raw)
		return
	}
	// Write only reads the bytes: no copy of the reply.
	_, _ = c.Write(unsafe.Slice(unsafe.StringData(reply), len(reply)))
}

// readRequest reads one request as the reference does
// (docs/protocols/mimedefang-multiplexor.md, "Framing"), into rb, after
// the bytes pre already read (no newline among them): up to a newline
// into a 4096-byte buffer (the rest of a longer line is read and
// dropped), then the last byte received is dropped (normally the newline;
// at EOF without a newline, a real character), then one trailing CR, and
// the command ends at its first NUL. ok is false when the client sent
// nothing in time (the connection is closed without a reply); a client
// that half-closes at once delivers the empty command.
func readRequest(c clientConn, timeout time.Duration, rb *reqBuf, pre []byte) (line string, ok bool) {
	c.setReadTimeout(timeout)
	buf, scratch := &rb.line, &rb.scratch
	got := copy(buf[:], pre)
	for {
		var m int
		var err error
		if got < len(buf) {
			m, err = c.Read(buf[got:])
			if i := indexNL(buf[got : got+m]); i >= 0 {
				got += i + 1
				break
			}
			got += m
		} else {
			// Full: read and drop until the newline.
			m, err = c.Read(scratch[:])
			if indexNL(scratch[:m]) >= 0 {
				break
			}
		}
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, os.ErrClosed) {
				return "", false
			}
			break // EOF: whatever arrived is the command
		}
	}
	return frameLine(buf[:got]), true
}

// frameLine is the command in b, what a request read received up to and
// including its newline (or EOF): the last byte received is dropped
// (normally the newline; at EOF without one, a real character), then one
// trailing CR, and the command ends at its first NUL.
func frameLine(b []byte) string {
	if len(b) > 0 {
		b = b[:len(b)-1]
	}
	if n := len(b); n > 0 && b[n-1] == '\r' {
		b = b[:n-1]
	}
	for i, ch := range b {
		if ch == 0 {
			b = b[:i]
			break
		}
	}
	return string(b)
}

func indexNL(b []byte) int {
	for i, c := range b {
		if c == '\n' {
			return i
		}
	}
	return -1
}

// handle answers one request line (without its newline). An empty reply
// means the connection is closed without a byte; a worker's reply comes
// as it came (raw, not nil then), which the connection writes without a
// copy.
func (s *Server) handle(ctx context.Context, line string, privileged bool) (reply string, raw []byte) {
	if r, ok := s.builtin(line, privileged); ok {
		return r, nil
	}
	if !privileged {
		return ReplyPrivileged, nil
	}
	if line == "reread" {
		s.o.Pool.Reread()
		return ReplyReread, nil
	}
	if line == "autoscale" {
		snap, ok := s.o.Pool.Snapshot()
		if !ok {
			return "", nil
		}
		return formatAutoscale(&snap), nil
	}
	if len(line) > maxCommand {
		return ReplyTooLong, nil
	}
	return replyOf(s.o.Pool.Do(ctx, pool.Request{Line: line, Queue: true}))
}

// replyOf is the main socket's reply for a forwarded request's result: the
// worker's reply as it came (raw), or the multiplexor's error reply.
func replyOf(r pool.Result) (reply string, raw []byte) {
	if r.Err == nil && len(r.Reply) > 0 {
		return "", r.Reply
	}
	return ErrorReply(r), nil
}

// ErrorReply is the main socket's reply for a pool result.
func ErrorReply(r pool.Result) string {
	switch {
	case r.Err == nil:
		return string(r.Reply)
	case errors.Is(r.Err, pool.ErrDomainLimit):
		return ReplyDomainLimit
	case errors.Is(r.Err, pool.ErrNoFreeWorkers):
		return ReplyNoFree
	case errors.Is(r.Err, pool.ErrActivate):
		return ReplyActivate
	case errors.Is(r.Err, pool.ErrTalk):
		return ReplyTalk
	case errors.Is(r.Err, pool.ErrNoResponse):
		return ReplyNoResponse
	case errors.Is(r.Err, pool.ErrBusyTimeout):
		if r.BusyWorkers > 3 {
			return ReplyTimeoutMany
		}
		return ReplyTimeoutFew
	case errors.Is(r.Err, pool.ErrQueueTimeout):
		return ReplyQueueTimeout
	default:
		return "" // closed: the client sees EOF
	}
}

// scanInt parses as sscanf("%d") does: leading white space, an optional
// sign, at least one digit; anything after the digits is ignored.
func scanInt(s string) (int, bool) {
	s = strings.TrimLeft(s, " \t\n\v\f\r")
	neg := false
	if s != "" && (s[0] == '-' || s[0] == '+') {
		neg = s[0] == '-'
		s = s[1:]
	}
	n, digits := 0, 0
	for ; digits < len(s) && s[digits] >= '0' && s[digits] <= '9'; digits++ {
		if n < 1<<31 {
			n = n*10 + int(s[digits]-'0')
		}
	}
	if digits == 0 {
		return 0, false
	}
	if neg {
		n = -n
	}
	return n, true
}
