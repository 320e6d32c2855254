package mux

import (
	"syscall"
	"time"
	"unsafe"

	"sluice/internal/pool"
)

// The forwarded requests of the milter (scan, relayok, senderok, recipok)
// are most of a busy multiplexor's work, and each comes on a new
// connection; status and the other built-in commands come the same way
// from monitoring. They are taken without a connection goroutine: on the
// pool's owner (front.go), or, when the pool cannot serve the main socket
// there (no epoll set of its own, or stopped), by Serve: right
// after the accept it reads what the client has sent (a bare read on the
// bare descriptor). A whole line naming one of those commands goes to the
// pool with pool.Submit, and the pool's owner, which reads the worker's
// reply itself, writes the reply and closes the connection (finish); a
// built-in command is answered at once, or from a snapshot the owner
// takes (pool.SnapshotTo). Everything else (reread, autoscale, commands
// for a worker the pool does not count), a line not all there yet, and
// the restricted socket's connections go to a connection goroutine with
// what was read (handOff). A request thus costs no goroutine switch while
// the multiplexor is busy, where the connection goroutine's path cost
// five for a forwarded request and three for status (docs/mux.md, "What
// the rest of the gap is: goroutines, not Go").

// inline is what Serve (or the owner) read of a connection before
// handing it off: a whole request (line, whole), or the first bytes of
// one (pre), and how much of the timeout the wait for them spent.
type inline struct {
	pre   []byte
	line  string
	whole bool
	spent time.Duration
}

// handed is a connection Serve hands to a connection goroutine.
type handed struct {
	fd int
	in inline
}

// take serves an admitted connection of a descriptor listener.
func (s *Server) take(ls *listenerState, fd int, rb *reqBuf) {
	if !ls.privileged {
		s.handOff(ls, handed{fd: fd})
		return
	}
	n, e := rawRW(syscall.SYS_READ, fd, rb.line[:])
	line, in, whole := firstRead(rb, n, e, 0)
	if !whole {
		// Nothing yet (EAGAIN), part of a line, or EOF or an error, which
		// the connection goroutine's read meets again.
		s.handOff(ls, handed{fd: fd, in: in})
		return
	}
	// A forwarded command is never built in (the test of forwardsAtOnce),
	// so the lookup of the built-in commands can come second.
	if forwardsAtOnce(line) {
		s.inlined.Add(1)
		s.forward(fd, line)
		return
	}
	if a, ok := s.lookupBuiltin(line, true); ok {
		s.inlined.Add(1)
		s.answerBuiltin(fd, a)
		return
	}
	s.handOff(ls, handed{fd: fd, in: inline{line: line, whole: true}})
}

// firstRead is what a connection's read of n bytes into rb (or its error
// e) brought, spent after the accept: a whole line (whole), or else what
// to hand a connection goroutine with the connection (the bytes of a
// part of a line, and the time spent).
func firstRead(rb *reqBuf, n int, e syscall.Errno, spent time.Duration) (line string, in inline, whole bool) {
	in.spent = spent
	if e != 0 || n == 0 {
		return "", in, false
	}
	i := indexNL(rb.line[:n])
	if i < 0 {
		in.pre = append([]byte(nil), rb.line[:n]...)
		return "", in, false
	}
	return frameLine(rb.line[:i+1]), in, true
}

// answerBuiltin answers the built-in command a for the connection fd.
func (s *Server) answerBuiltin(fd int, a answer) {
	if a.view == nil {
		s.write(fd, unsafe.Slice(unsafe.StringData(a.reply), len(a.reply)))
		return
	}
	r := s.track(fd)
	if r == nil {
		return
	}
	if !s.o.Pool.SnapshotTo(a.qs, func(snap *pool.Snapshot) {
		if snap == nil {
			r.end("", nil)
			return
		}
		r.end("", a.view(nil, snap))
	}) {
		r.end("", nil)
	}
}

// forwardsAtOnce reports whether line, read whole on the main socket, is
// one of the commands Serve forwards itself: the four kinds the pool
// counts (none is a built-in command: TestForwardedKindsAreNotBuiltin),
// short enough for a worker.
func forwardsAtOnce(line string) bool {
	return pool.KindOf(line) != pool.Other && len(line) <= maxCommand
}

// asyncReq is a request answered on the pool's owner goroutine (Submit,
// SnapshotTo): its connection's descriptor belongs to end, or to Close if
// Close comes first (whichever takes it out of Server.async).
type asyncReq struct {
	s  *Server
	fd int
}

// track makes fd an asyncReq; nil (fd closed) when the server is closing.
func (s *Server) track(fd int) *asyncReq {
	a := &asyncReq{s: s, fd: fd}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		closeRaw(fd)
		return nil
	}
	s.async[a] = struct{}{}
	return a
}

// forward submits line for the connection fd.
func (s *Server) forward(fd int, line string) {
	a := s.track(fd)
	if a == nil {
		return
	}
	if !s.o.Pool.Submit(pool.Request{Line: line, Queue: true}, a.finish) {
		a.finish(pool.Result{Err: pool.ErrClosed})
	}
}

// finish answers a forwarded request with its result r.
func (a *asyncReq) finish(r pool.Result) { a.end(replyOf(r)) }

// end answers the request with reply (or raw, if not nil) and closes the
// connection, unless Close has closed it. It runs on the pool's owner
// goroutine, so it must not wait (write).
func (a *asyncReq) end(reply string, raw []byte) {
	s := a.s
	s.mu.Lock()
	if _, ok := s.async[a]; !ok {
		s.mu.Unlock()
		return // Close closed it
	}
	delete(s.async, a)
	s.mu.Unlock()
	if raw == nil {
		raw = unsafe.Slice(unsafe.StringData(reply), len(reply))
	}
	s.write(a.fd, raw)
}

// write writes b to the connection fd and closes it, without waiting: a
// reply the socket does not take at once (a client that does not read)
// is finished by a goroutine of its own under the timeout (finishLater).
func (s *Server) write(fd int, b []byte) {
	for len(b) > 0 {
		n, e := rawRW(syscall.SYS_WRITE, fd, b)
		if e == syscall.EAGAIN {
			s.finishLater(fd, append([]byte(nil), b...))
			return
		}
		if e != 0 {
			break
		}
		b = b[n:]
	}
	closeRaw(fd)
}

// finishLater writes the rest of a reply under the timeout and closes the
// connection, on a goroutine of its own (Close interrupts the write).
func (s *Server) finishLater(fd int, rest []byte) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		closeRaw(fd)
		return
	}
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		c := &fdConn{fd: fd, s: s}
		c.setWriteTimeout(s.o.Timeout)
		_, _ = c.Write(rest)
		c.Close()
	}()
}

// closeAsync closes the connections of the requests in the pool (Close,
// under s.mu): their clients see EOF, and their finish does nothing.
func (s *Server) closeAsync() {
	for a := range s.async {
		closeRaw(a.fd)
	}
	clear(s.async)
}

// closeRaw closes a bare descriptor.
func closeRaw(fd int) { _, _, _ = syscall.RawSyscall(syscall.SYS_CLOSE, uintptr(fd), 0, 0) }
