package netserve

import (
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// poller is the sessions' epoll set. Every accepted descriptor is added
// to it, edge-triggered, for both directions, once; a connection that
// finds nothing to read (or no room to write) parks on its own wake
// channel, and the poller's one waiter goroutine, parked on the set's
// descriptor through the runtime's poller (an epoll descriptor is
// readable while it holds events), takes the events with raw
// epoll_pwait(2) calls and wakes each connection they name. Every call
// on a session descriptor (accept4, read, write, getsockopt, epoll_ctl,
// close) is a raw system call: none enters the scheduler, so a session
// never wakes the runtime's monitor thread (docs/milter.md, "What the
// per-session path is shaped by"), which the standard library's accept,
// getsockname and close did once per session each.
//
// The set is one per Server: the server owns the waiter and stops it
// when the last of its connections is gone after Close or Shutdown.
type poller struct {
	ep int
	f  *os.File // ep on the runtime's poller, for the waiter
	rc syscall.RawConn

	mu    sync.Mutex
	conns []*fdConn // by descriptor number; nil when free
	evs   []syscall.EpollEvent

	wg sync.WaitGroup // the waiter
}

// pollerBatch is how many events one epoll_pwait takes.
const pollerBatch = 128

func newPoller() (*poller, error) {
	ep, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("netserve: epoll_create1: %w", err)
	}
	if err := syscall.SetNonblock(ep, true); err != nil {
		syscall.Close(ep)
		return nil, fmt.Errorf("netserve: epoll descriptor non-blocking: %w", err)
	}
	f := os.NewFile(uintptr(ep), "netserve-poller")
	// A descriptor the runtime's poller did not take has no deadlines: the
	// waiter could never wait on it, and every parked session would sleep.
	if err := f.SetReadDeadline(time.Time{}); err != nil {
		f.Close()
		return nil, fmt.Errorf("netserve: epoll descriptor on the poller: %w", err)
	}
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("netserve: epoll descriptor on the poller: %w", err)
	}
	p := &poller{ep: ep, f: f, rc: rc, evs: make([]syscall.EpollEvent, pollerBatch)}
	p.wg.Add(1)
	go p.wait()
	return p, nil
}

// wait is the waiter: parked in the runtime's poller until the set has
// events, it takes them all and wakes their connections, and parks again;
// it returns when close closes the set.
func (p *poller) wait() {
	defer p.wg.Done()
	_ = p.rc.Read(p.drain) // returns once f is closed
}

// drain takes every event the set holds and wakes the connections they
// name; it returns false so that the waiter parks again (the set's
// descriptor is edge-triggered on the runtime's poller: one that got
// events after the last epoll_pwait here is reported again).
func (p *poller) drain(uintptr) bool {
	for {
		n, _, e := syscall.RawSyscall6(syscall.SYS_EPOLL_PWAIT, uintptr(p.ep),
			uintptr(unsafe.Pointer(unsafe.SliceData(p.evs))), uintptr(len(p.evs)), 0, 0, 0)
		if e == syscall.EINTR {
			continue
		}
		if e != 0 || n == 0 {
			return false
		}
		p.mu.Lock()
		for _, ev := range p.evs[:n] {
			fd, gen := int(ev.Fd), uint32(ev.Pad)
			if fd >= len(p.conns) {
				continue
			}
			c := p.conns[fd]
			if c == nil || c.gen != gen {
				continue // closed since: its successor was not asked about
			}
			if ev.Events&(syscall.EPOLLIN|syscall.EPOLLRDHUP|syscall.EPOLLHUP|syscall.EPOLLERR) != 0 {
				c.rd.wake()
			}
			if ev.Events&(syscall.EPOLLOUT|syscall.EPOLLHUP|syscall.EPOLLERR) != 0 {
				c.wr.wake()
			}
		}
		p.mu.Unlock()
		if int(n) < len(p.evs) {
			return false
		}
	}
}

// add puts c's descriptor into the set, for both directions,
// edge-triggered.
func (p *poller) add(c *fdConn) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c.fd >= len(p.conns) {
		p.conns = append(p.conns, make([]*fdConn, c.fd+1-len(p.conns)+len(p.conns)/2)...)
	}
	ev := syscall.EpollEvent{
		Events: syscall.EPOLLIN | syscall.EPOLLOUT | syscall.EPOLLRDHUP | epollET,
		Fd:     int32(c.fd), Pad: int32(c.gen),
	}
	if err := epollCtl(p.ep, syscall.EPOLL_CTL_ADD, c.fd, &ev); err != nil {
		return fmt.Errorf("netserve: epoll_ctl ADD: %w", err)
	}
	p.conns[c.fd] = c
	return nil
}

// remove takes c's descriptor out of the set, before it is closed, so
// that a later descriptor with the same number starts afresh.
func (p *poller) remove(c *fdConn) {
	p.mu.Lock()
	if c.fd < len(p.conns) && p.conns[c.fd] == c {
		p.conns[c.fd] = nil
		var ev syscall.EpollEvent
		_ = epollCtl(p.ep, syscall.EPOLL_CTL_DEL, c.fd, &ev)
	}
	p.mu.Unlock()
}

// close stops the waiter and closes the set; the server calls it once,
// when no connection of its is left.
func (p *poller) close() {
	p.f.Close() // ends the waiter's Read
	p.wg.Wait()
}

// epollCtl is epoll_ctl(2), which cannot block: a raw system call.
func epollCtl(ep, op, fd int, ev *syscall.EpollEvent) error {
	_, _, e := syscall.RawSyscall6(syscall.SYS_EPOLL_CTL, uintptr(ep), uintptr(op), uintptr(fd), uintptr(unsafe.Pointer(ev)), 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

// startPoller starts the server's poller if it has none (s.mu held). The
// server holds one reference to it until it closes, and each connection
// one until its descriptor is closed; the last one closes the set.
func (s *Server) startPoller() error {
	if s.poll != nil {
		return nil
	}
	p, err := newPoller()
	if err != nil {
		return err
	}
	s.poll = p
	s.pollRefs.Store(1)
	s.wg.Add(1) // Done when the set is closed: Wait waits for its waiter
	return nil
}

// releasePoller gives back one reference to the poller.
func (s *Server) releasePoller() {
	if s.pollRefs.Add(-1) == 0 {
		s.poll.close()
		s.wg.Done()
	}
}

// dropPoller gives back the server's own reference, once, when it closes
// (s.mu held).
func (s *Server) dropPoller() {
	if s.poll != nil && !s.pollDropped {
		s.pollDropped = true
		s.releasePoller()
	}
}

// newConn makes the connection of an accepted descriptor, on the poller.
func (s *Server) newConn(a *acceptor, fd int, raddr net.Addr) (net.Conn, error) {
	s.mu.Lock()
	if s.closing.Load() {
		s.mu.Unlock()
		return nil, errStopped
	}
	s.pollRefs.Add(1)
	s.gen++
	gen := s.gen
	s.mu.Unlock()
	c, err := newFDConn(s.poll, fd, a.netw, a.laddr, raddr, gen)
	if err != nil {
		s.releasePoller()
		return nil, err
	}
	c.onGone = s.releasePoller
	return c, nil
}

// epollET is EPOLLET as the uint32 of an epoll event (the syscall
// package's constant is a negative int).
const epollET = 1 << 31
