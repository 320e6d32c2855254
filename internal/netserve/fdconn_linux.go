package netserve

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"sluice/internal/clock"
	"sluice/internal/peercred"
	"sluice/internal/rawio"
)

// fdConn is an accepted session socket served from the server's poller:
// a net.Conn (and a syscall.Conn, for getsockopt and the like) whose every
// system call is raw. A read that finds nothing, or a write that finds no
// room, parks (side.park) until the poller reports the socket ready, its
// deadline passes or Close is called.
//
// The socket is in the set for reading only until a write first finds no
// room: a peer reading a reply frees room in the socket's buffer, and an
// edge-triggered EPOLLOUT then would wake the set's waiter once per reply
// for nothing (three times in a milter session). A read that returned
// less than asked left the socket empty, so the next read parks before
// it calls read(2): the edge-triggered set reports any data that comes
// after, and a wake left by data already read costs one read that finds
// nothing. Once the set reported the peer's end (EPOLLRDHUP), which may
// have come with data in one event, reads go on to the end of stream
// (nginx's pending_eof); so they do once it reported urgent data
// (EPOLLPRI), which stops a TCP read at its mark with data behind it. As on a
// net.Conn, reads and writes may come from several goroutines at once:
// each Read, and each Write, is whole and in order with the others of
// its direction; Close may be called at any time, and the descriptor is
// closed once the last call using it has returned, so that no call ever
// touches a reused descriptor number.
type fdConn struct {
	fd     int
	p      *poller
	laddr  net.Addr // nil for TCP until LocalAddr asks (getsockname)
	raddr  net.Addr
	netw   string // "tcp" or "unix", for errors
	laddrM sync.Mutex

	// state counts the calls using fd (2 each) and marks Close (bit 0).
	state  atomic.Int64
	rd, wr side
	// outArmed: fd is in the set for EPOLLOUT too (under wr.mu).
	outArmed bool
	// empty: the last read left the socket empty (under rd.mu).
	empty bool
	// hup: the set reported the peer's end of writing, an error or
	// urgent data: reads no longer park after a short one.
	hup atomic.Bool
	// cred: a unix peer's credentials, once read (PeerCred, under
	// credMu; kept in the connection, not allocated).
	credMu sync.Mutex
	cred   peercred.Cred
	credOK bool

	// served is the Conn its Server wraps it in (admit): the two are
	// made in one allocation.
	served Conn
}

// side is one direction: its calls one at a time, its deadline and its
// wake.
//
// A deadline's timer is armed only when a call parks while the deadline
// is set (or a deadline is set while a call is parked): a reply written
// into a socket with room, as a door's replies almost always are, never
// parks, so a write deadline costs no timer; a read deadline that is
// renewed while requests keep coming is re-armed at the next park, not at
// each renewal. A call that does not park checks a deadline whose timer
// is not armed for it against the clock.
type side struct {
	mu sync.Mutex // one call at a time
	// wst is where the side's wake is (wakeIdle and the rest): a wake
	// that finds no call blocked on ch is left in wst, where the next
	// park, or the parking call's own raw wait (poller.lead), takes it
	// with an atomic operation instead of a channel's lock.
	wst      atomic.Int32
	ch       chan struct{} // capacity 1: the wake of a call blocked on it (wakeBlocked)
	deadline atomic.Int64  // a clock.Mono reading; 0: none
	// armed is the deadline the timer is armed for (0: none). While it is
	// the deadline and fired is not set, the deadline has not passed: a
	// call reads the clock only otherwise, as the runtime's poller marks
	// an expired deadline from its timer instead of reading the clock per
	// call.
	armed atomic.Int64
	// fired is set when the timer fires (or a deadline is set in the
	// past) and cleared when the timer is armed again.
	fired  atomic.Bool
	parked atomic.Bool // a call waits on ch (or is about to)
	dmu    sync.Mutex  // guards timer and arming
	timer  *time.Timer
	slot   waitSlot // the parked call out of the poller's busy count
	p      *poller  // the set a parked call may wait on itself (poller.lead)
}

// The states of a side's wake (side.wst). Only wake moves a side to
// wakePending, and only the side's one parking call (it holds mu) moves
// it out of wakePending or into wakeLeading and wakeBlocked.
const (
	wakeIdle    = iota // no call waits, no wake is left
	wakePending        // a wake came that no call has taken yet
	wakeLeading        // the parking call waits raw on the set (poller.lead)
	wakeBlocked        // the parking call is blocked on ch, or about to be
)

// wake is the poller's, a deadline's or Close's news for the side: it
// leaves the wake for the parking call (as a token left in a channel
// would be), and sends it on ch to a call blocked there. A call blocked
// on ch gets exactly one token for it: the state leaves wakeBlocked
// before the send, and only that call returns it to wakeIdle.
func (s *side) wake() {
	s.slot.leave()
	if s.wst.Swap(wakePending) == wakeBlocked {
		s.ch <- struct{}{}
	}
}

// expired reports whether the side's deadline has passed: the clock says
// so, asked only when the timer is not armed for the deadline or has
// fired (a timer of an earlier deadline may fire after a later one was
// set).
func (s *side) expired() bool {
	dl := s.deadline.Load()
	if dl == 0 || (s.armed.Load() == dl && !s.fired.Load()) {
		return false
	}
	return int64(clock.Mono()) >= dl
}

// expire is the deadline timer's function.
func (s *side) expire() {
	s.fired.Store(true)
	s.wake()
}

// set sets the side's deadline: a call parked now or later ends with
// os.ErrDeadlineExceeded once t has passed; the zero t means none.
func (s *side) set(t time.Time) {
	s.dmu.Lock()
	defer s.dmu.Unlock()
	if t.IsZero() {
		s.deadline.Store(0)
		s.armed.Store(0)
		if s.timer != nil {
			s.timer.Stop()
		}
		return
	}
	dl := max(int64(clock.MonoOf(t)), 1) // monotonic, as a net.Conn's: a step of the wall clock moves no deadline
	s.deadline.Store(dl)
	if time.Duration(dl) <= clock.Mono() {
		if s.timer != nil {
			s.timer.Stop()
		}
		s.armed.Store(dl)
		s.expire()
		return
	}
	if s.parked.Load() {
		s.armLocked()
	}
}

// park waits on ch for the poller, the deadline or Close, with the
// deadline's timer armed (the caller holds mu).
func (s *side) park() {
	s.parked.Store(true)
	if dl := s.deadline.Load(); dl != 0 && s.armed.Load() != dl {
		s.dmu.Lock()
		s.armLocked()
		s.dmu.Unlock()
	}
	s.slot.enter()
	// Unless a wake was left, the call waits raw in the waiter's place
	// (lead) and, when that does not bring its wake, blocks on ch; its
	// waker moves wst to wakePending before it sends.
	if s.wst.CompareAndSwap(wakeIdle, wakeLeading) && !s.p.lead(s) && s.wst.CompareAndSwap(wakeLeading, wakeBlocked) {
		<-s.ch
	}
	s.wst.Store(wakeIdle) // the wake, taken
	s.slot.leave()
	s.parked.Store(false)
}

// armLocked arms the timer for the deadline, if it is not armed for it
// (dmu held).
func (s *side) armLocked() {
	dl := s.deadline.Load()
	if dl == 0 || s.armed.Load() == dl {
		return
	}
	s.armed.Store(dl)
	d := time.Duration(dl) - clock.Mono()
	if d <= 0 {
		s.expire()
		return
	}
	s.fired.Store(false)
	if s.timer == nil {
		s.timer = time.AfterFunc(d, s.expire)
	} else {
		s.timer.Reset(d)
	}
}

func (s *side) stop() {
	s.dmu.Lock()
	if s.timer != nil {
		s.timer.Stop()
	}
	s.dmu.Unlock()
}

// newFDConn makes the connection of an accepted descriptor and adds it
// to p.
func newFDConn(p *poller, fd int, netw string, laddr, raddr net.Addr) (*fdConn, error) {
	c := &fdConn{fd: fd, p: p, netw: netw, laddr: laddr, raddr: raddr}
	c.rd.ch = make(chan struct{}, 1)
	c.wr.ch = make(chan struct{}, 1)
	c.rd.slot.busy, c.wr.slot.busy = &p.busy, &p.busy
	c.rd.p, c.wr.p = p, p
	if err := p.add(fd, syscall.EPOLLIN|syscall.EPOLLPRI, c); err != nil {
		return nil, err
	}
	return c, nil
}

// ready is the poller's news of the socket: readable, writable, hung up.
func (c *fdConn) ready(ev uint32) {
	if ev&(syscall.EPOLLRDHUP|syscall.EPOLLHUP|syscall.EPOLLERR|syscall.EPOLLPRI) != 0 {
		c.hup.Store(true)
	}
	if ev&(syscall.EPOLLIN|syscall.EPOLLRDHUP|syscall.EPOLLHUP|syscall.EPOLLERR|syscall.EPOLLPRI) != 0 {
		c.rd.wake()
	}
	if ev&(syscall.EPOLLOUT|syscall.EPOLLHUP|syscall.EPOLLERR) != 0 {
		c.wr.wake()
	}
}

// acquire takes a use of the descriptor; false once Close was called.
func (c *fdConn) acquire() bool {
	for {
		s := c.state.Load()
		if s&1 != 0 {
			return false
		}
		if c.state.CompareAndSwap(s, s+2) {
			return true
		}
	}
}

// release gives a use back; the last one after Close closes fd.
func (c *fdConn) release() {
	if c.state.Add(-2) == 1 {
		c.destroy()
	}
}

// destroy takes fd out of the poller and closes it (raw: close(2) on a
// socket without SO_LINGER does not block). The close takes the socket
// out of the kernel's set: no epoll_ctl is needed (a copy of the
// descriptor in a child between fork and exec keeps it there a moment;
// its events carry an old generation, which the set drops).
func (c *fdConn) destroy() {
	c.rd.stop()
	c.wr.stop()
	c.p.remove(c.fd, c, false)
	rawio.CloseFD(c.fd)
}

// Close ends the connection: calls parked on it return net.ErrClosed,
// and the descriptor is closed when the last of them has.
func (c *fdConn) Close() error {
	old := c.state.Or(1)
	if old&1 != 0 {
		return c.opError("close", net.ErrClosed)
	}
	c.rd.wake()
	c.wr.wake()
	if old == 0 {
		c.destroy()
	}
	return nil
}

func (c *fdConn) closed() bool { return c.state.Load()&1 != 0 }

func (c *fdConn) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: c.netw, Source: c.laddr, Addr: c.raddr, Err: err}
}

// Read reads into p. End of stream is io.EOF.
func (c *fdConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if !c.acquire() {
		return 0, c.opError("read", net.ErrClosed)
	}
	defer c.release()
	c.rd.mu.Lock()
	defer c.rd.mu.Unlock()
	for {
		if c.closed() {
			return 0, c.opError("read", net.ErrClosed)
		}
		if c.rd.expired() {
			return 0, c.opError("read", os.ErrDeadlineExceeded)
		}
		if c.empty {
			c.empty = false
			if !c.hup.Load() {
				c.rd.park()
				continue
			}
		}
		r, e := sysRead(c.fd, p)
		switch e {
		case 0:
			if r == 0 {
				return 0, io.EOF
			}
			c.empty = r < len(p)
			return r, nil
		case syscall.EINTR:
		case syscall.EAGAIN:
			c.rd.park()
		default:
			return 0, c.opError("read", os.NewSyscallError("read", e))
		}
	}
}

// Write writes all of b.
func (c *fdConn) Write(b []byte) (int, error) {
	if !c.acquire() {
		return 0, c.opError("write", net.ErrClosed)
	}
	defer c.release()
	c.wr.mu.Lock()
	defer c.wr.mu.Unlock()
	n := 0
	for n < len(b) {
		if c.closed() {
			return n, c.opError("write", net.ErrClosed)
		}
		if c.wr.expired() {
			return n, c.opError("write", os.ErrDeadlineExceeded)
		}
		r, e := sysWrite(c.fd, b[n:])
		switch e {
		case 0:
			n += r
		case syscall.EINTR:
		case syscall.EAGAIN:
			if !c.outArmed {
				if err := c.armOut(); err != nil {
					return n, c.opError("write", err)
				}
				continue // the room may have come before the set knew to tell
			}
			c.wr.park()
		default:
			return n, c.opError("write", os.NewSyscallError("write", e))
		}
	}
	return n, nil
}

// armOut adds EPOLLOUT to the socket's events in the set (wr.mu held,
// fd in use): from now on the set reports room to write.
func (c *fdConn) armOut() error {
	if err := c.p.modify(c.fd, syscall.EPOLLIN|syscall.EPOLLPRI|syscall.EPOLLOUT, c); err != nil {
		return err
	}
	c.outArmed = true
	return nil
}

// LocalAddr is the socket's own address (for TCP, asked of the kernel the
// first time: a listener on a wildcard address accepts on many).
func (c *fdConn) LocalAddr() net.Addr {
	c.laddrM.Lock()
	defer c.laddrM.Unlock()
	if c.laddr == nil && c.acquire() {
		var rsa syscall.RawSockaddrAny
		n := uint32(unsafe.Sizeof(rsa))
		_, _, e := syscall.RawSyscall(syscall.SYS_GETSOCKNAME, uintptr(c.fd), uintptr(unsafe.Pointer(&rsa)), uintptr(unsafe.Pointer(&n)))
		c.release()
		if e == 0 {
			c.laddr = sockaddrAddr(&rsa, n)
		}
	}
	return c.laddr
}

// RemoteAddr is the peer's address as accept4(2) gave it.
func (c *fdConn) RemoteAddr() net.Addr { return c.raddr }

// Pending reports whether the peer has sent bytes not yet read: a
// recv(2) with MSG_PEEK|MSG_DONTWAIT that takes nothing. A closed or
// failed connection has none.
func (c *fdConn) Pending() bool {
	if !c.acquire() {
		return false
	}
	defer c.release()
	return rawio.PendingFD(c.fd)
}

// PeerCred returns a unix socket peer's credentials (SO_PEERCRED),
// read once: it makes the connection a peercred.Keeper, so that a door
// and its gate asking about one session cost one getsockopt.
func (c *fdConn) PeerCred() (peercred.Cred, error) {
	c.credMu.Lock()
	defer c.credMu.Unlock()
	if c.credOK {
		return c.cred, nil
	}
	if c.netw != "unix" {
		return peercred.Cred{UID: -1, GID: -1, PID: -1}, c.opError("getsockopt", errors.New("SO_PEERCRED of a TCP connection"))
	}
	if !c.acquire() {
		return peercred.Cred{UID: -1, GID: -1, PID: -1}, c.opError("getsockopt", net.ErrClosed)
	}
	cr, err := peercred.FDCred(uintptr(c.fd))
	c.release()
	if err != nil {
		return cr, err
	}
	c.cred, c.credOK = cr, true
	return cr, nil
}

// SetDeadline sets both deadlines.
func (c *fdConn) SetDeadline(t time.Time) error {
	if c.closed() {
		return c.opError("set", net.ErrClosed)
	}
	c.rd.set(t)
	c.wr.set(t)
	return nil
}

// SetReadDeadline sets the read deadline.
func (c *fdConn) SetReadDeadline(t time.Time) error {
	if c.closed() {
		return c.opError("set", net.ErrClosed)
	}
	c.rd.set(t)
	return nil
}

// SetWriteDeadline sets the write deadline.
func (c *fdConn) SetWriteDeadline(t time.Time) error {
	if c.closed() {
		return c.opError("set", net.ErrClosed)
	}
	c.wr.set(t)
	return nil
}

// SyscallConn gives the descriptor to code that needs it (getsockopt,
// setsockopt), as a net.Conn's does.
func (c *fdConn) SyscallConn() (syscall.RawConn, error) { return rawConn{c}, nil }

// rawConn is an fdConn's syscall.RawConn.
type rawConn struct{ c *fdConn }

func (r rawConn) Control(f func(fd uintptr)) error {
	if !r.c.acquire() {
		return r.c.opError("raw-control", net.ErrClosed)
	}
	defer r.c.release()
	f(uintptr(r.c.fd))
	return nil
}

func (r rawConn) Read(f func(fd uintptr) bool) error  { return r.c.rawWait(&r.c.rd, "raw-read", f) }
func (r rawConn) Write(f func(fd uintptr) bool) error { return r.c.rawWait(&r.c.wr, "raw-write", f) }

// rawWait calls f until it reports done, parking on s between calls.
func (c *fdConn) rawWait(s *side, op string, f func(fd uintptr) bool) error {
	if !c.acquire() {
		return c.opError(op, net.ErrClosed)
	}
	defer c.release()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s == &c.rd {
		c.empty = false // f may leave data behind: the next Read tries first
	}
	for {
		if c.closed() {
			return c.opError(op, net.ErrClosed)
		}
		if s.expired() {
			return c.opError(op, os.ErrDeadlineExceeded)
		}
		if f(uintptr(c.fd)) {
			return nil
		}
		if s == &c.wr && !c.outArmed {
			if err := c.armOut(); err != nil {
				return c.opError(op, err)
			}
			continue
		}
		s.park()
	}
}

// unnamedUnix is the address of every unnamed unix socket peer (an MTA's
// client end is one): made once, not at each accept. Nothing changes it.
var unnamedUnix = &net.UnixAddr{Net: "unix"}

// sockaddrAddr is the net.Addr of a raw socket address of n bytes (an
// unnamed unix socket's is a *net.UnixAddr with no name, as the net
// package gives it).
func sockaddrAddr(rsa *syscall.RawSockaddrAny, n uint32) net.Addr {
	switch rsa.Addr.Family {
	case syscall.AF_INET:
		sa := (*syscall.RawSockaddrInet4)(unsafe.Pointer(rsa))
		port := int(sa.Port>>8 | sa.Port<<8)
		return &net.TCPAddr{IP: append(net.IP(nil), sa.Addr[:]...), Port: port}
	case syscall.AF_INET6:
		sa := (*syscall.RawSockaddrInet6)(unsafe.Pointer(rsa))
		port := int(sa.Port>>8 | sa.Port<<8)
		a := &net.TCPAddr{IP: append(net.IP(nil), sa.Addr[:]...), Port: port}
		if sa.Scope_id != 0 {
			if ifi, err := net.InterfaceByIndex(int(sa.Scope_id)); err == nil {
				a.Zone = ifi.Name
			}
		}
		return a
	case syscall.AF_UNIX:
		sa := (*syscall.RawSockaddrUnix)(unsafe.Pointer(rsa))
		l := int(n) - int(unsafe.Offsetof(sa.Path))
		name := ""
		if l > 0 {
			b := make([]byte, 0, l)
			for i := 0; i < l && i < len(sa.Path); i++ {
				if sa.Path[i] == 0 && i > 0 {
					break
				}
				b = append(b, byte(sa.Path[i]))
			}
			if len(b) > 0 && b[0] == 0 {
				b[0] = '@' // abstract, as the net package shows it
			}
			name = string(b)
		}
		if name == "" {
			return unnamedUnix
		}
		return &net.UnixAddr{Name: name, Net: "unix"}
	}
	return nil
}
