package netserve

import (
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"sluice/internal/peercred"
	"sluice/internal/rawio"
)

// eventPair is a connection on one end of a unix socket pair, in a set
// whose events the test takes itself (no waiter goroutine), and the
// pair's other end as a raw descriptor.
func eventPair(t *testing.T) (c *fdConn, p *poller, peer int) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	p = waiterlessPoller(t)
	c, err = newFDConn(p, fds[0], "unix", &net.UnixAddr{Net: "unix"}, &net.UnixAddr{Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		syscall.Close(fds[1])
	})
	return c, p, fds[1]
}

// waiterlessPoller is a set with no waiter goroutine: the test takes its
// events with events and hands them to its targets itself.
func waiterlessPoller(t *testing.T) *poller {
	t.Helper()
	ep, err := rawio.NewEpoll("test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ep.Close() })
	return &poller{ep: ep, evs: make([]syscall.EpollEvent, pollerBatch), users: 1}
}

// takeWake takes the wake the poller's news left for s, as a call parked
// before the news came would; it fails the test when none was left.
func takeWake(t *testing.T, s *side) {
	t.Helper()
	if s.wst.Swap(wakeIdle) != wakePending {
		t.Fatal("the news left no wake for the read")
	}
}

// events takes the set's pending events without waking anything.
func events(p *poller) []syscall.EpollEvent {
	n := p.ep.Poll(p.evs)
	return append([]syscall.EpollEvent(nil), p.evs[:n]...)
}

// A reply the peer reads raises no event: the socket is in the set for
// EPOLLOUT only once a write found no room (the peer's read freeing room
// would otherwise wake the set's waiter once per reply). A write that
// fills the buffer arms it, and the room the peer's reading makes then
// finishes the write.
func TestConnWriteRaisesNoEvent(t *testing.T) {
	c, p, peer := eventPair(t)
	events(p) // the initial state
	if _, err := c.Write([]byte("250 ok\n")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	if n, err := syscall.Read(peer, buf); err != nil || string(buf[:n]) != "250 ok\n" {
		t.Fatalf("peer read %q, %v", buf[:n], err)
	}
	if evs := events(p); len(evs) != 0 {
		t.Fatalf("after a reply the peer read, the set reported %+v; want nothing", evs)
	}

	big := make([]byte, 8<<20)
	done := make(chan error, 1)
	go func() {
		_, err := c.Write(big)
		done <- err
	}()
	read := 0
	for read < len(big) {
		for _, ev := range events(p) {
			c.ready(ev.Events)
		}
		n, err := syscall.Read(peer, make([]byte, 1<<20))
		if err == syscall.EAGAIN {
			time.Sleep(time.Millisecond)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		read += n
	}
	if err := <-done; err != nil {
		t.Fatalf("the write the peer read all of: %v", err)
	}
	if !c.outArmed {
		t.Fatal("a write that found no room did not put the socket in the set for EPOLLOUT")
	}
}

// Data and the peer's end reported in one event: the read the event woke
// takes the data (less than it asked for), and the next read returns
// io.EOF at once instead of waiting for an event that will not come.
func TestConnShortReadThenEnd(t *testing.T) {
	c, p, peer := eventPair(t)
	events(p)
	if _, err := syscall.Write(peer, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	syscall.Shutdown(peer, syscall.SHUT_WR)
	evs := events(p)
	if len(evs) != 1 || evs[0].Events&syscall.EPOLLRDHUP == 0 {
		t.Fatalf("the set reported %+v; want one event with EPOLLRDHUP", evs)
	}
	c.ready(evs[0].Events)
	takeWake(t, &c.rd) // as a read parked before the data came takes the wake
	buf := make([]byte, 64)
	if n, err := c.Read(buf); err != nil || string(buf[:n]) != "hello" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second)) // a hang fails, not blocks
	if n, err := c.Read(buf); !errors.Is(err, io.EOF) {
		t.Fatalf("read after the peer's end: %d bytes, %v; want io.EOF", n, err)
	}
}

// After a short read the next read waits for the set's news before it
// calls read(2), and still gets data that came after.
func TestConnShortReadWaits(t *testing.T) {
	c, p, peer := eventPair(t)
	events(p)
	syscall.Write(peer, []byte("a"))
	buf := make([]byte, 64)
	if n, err := c.Read(buf); err != nil || n != 1 {
		t.Fatalf("read %d, %v", n, err)
	}
	if !c.empty {
		t.Fatal("a short read did not mark the socket empty")
	}
	got := make(chan string, 1)
	go func() {
		n, _ := c.Read(buf)
		got <- string(buf[:n])
	}()
	syscall.Write(peer, []byte("b"))
	for {
		select {
		case s := <-got:
			if s != "b" {
				t.Fatalf("read %q, want b", s)
			}
			return
		default:
		}
		for _, ev := range events(p) {
			c.ready(ev.Events)
		}
		time.Sleep(time.Millisecond)
	}
}

// A unix peer's credentials are read once and kept: a door and its gate
// asking about one session cost one getsockopt, and the answer is the
// kernel's.
func TestConnPeerCredKept(t *testing.T) {
	c, _, _ := eventPair(t)
	cr, err := peercred.Unix(c)
	if err != nil {
		t.Fatal(err)
	}
	if cr.PID != os.Getpid() || cr.UID != os.Geteuid() {
		t.Fatalf("credentials %+v; want this process's pid %d and uid %d", cr, os.Getpid(), os.Geteuid())
	}
	c.Close()
	if again, err := peercred.Unix(c); err != nil || again != cr {
		t.Fatalf("after Close: %+v, %v; want the kept %+v", again, err, cr)
	}
}

// Urgent data stops a TCP read at its mark with data behind it, and
// raises no new EPOLLIN for what is behind: the EPOLLPRI the set reports
// keeps the next read from waiting for news that will not come.
func TestConnUrgentDataDoesNotStall(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	client := dialConn(t, "tcp", l.Addr().String())
	sc, err := l.(*net.TCPListener).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	fd := -1
	var aerr error
	sc.Control(func(lfd uintptr) {
		fd, _, aerr = syscall.Accept4(int(lfd), syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC)
	})
	if aerr != nil {
		t.Fatal(aerr)
	}
	p := waiterlessPoller(t)
	c, err := newFDConn(p, fd, "tcp", l.Addr(), client.LocalAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	events(p)

	rc, err := client.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	rc.Control(func(cfd uintptr) {
		for _, s := range []struct {
			b     string
			flags int
		}{{"ab", 0}, {"!", syscall.MSG_OOB}, {"cd", 0}} {
			if serr == nil {
				serr = syscall.Sendto(int(cfd), []byte(s.b), s.flags, nil)
			}
		}
	})
	if serr != nil {
		t.Fatal(serr)
	}
	var ev uint32
	for ev&syscall.EPOLLPRI == 0 { // loopback delivers at once; the events may come in more than one
		for _, e := range events(p) {
			ev |= e.Events
		}
	}
	c.ready(ev)
	takeWake(t, &c.rd) // as a read parked before the data came takes the wake
	// A stall fails, not blocks.
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	var got []byte
	buf := make([]byte, 64)
	for len(got) < 4 {
		n, err := c.Read(buf)
		if err != nil {
			t.Fatalf("after %q: %v; want abcd", got, err)
		}
		got = append(got, buf[:n]...)
	}
	if string(got) != "abcd" {
		t.Fatalf("read %q, want abcd (the urgent byte out of band)", got)
	}
}

// A deadline arms its timer only when a call parks under it: a reply
// written into a socket with room, and a read that finds its data, cost
// no timer. A deadline whose timer is not armed still ends a call once
// it has passed (the call asks the clock), and one set while a read is
// parked without a deadline ends that read.
func TestConnDeadlineTimerOnlyWhenParked(t *testing.T) {
	c, _, peer := eventPair(t)
	c.SetWriteDeadline(time.Now().Add(time.Hour))
	c.SetReadDeadline(time.Now().Add(time.Hour))
	if _, err := c.Write([]byte("250 ok")); err != nil {
		t.Fatal(err)
	}
	if _, err := syscall.Write(peer, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Read(make([]byte, 8)); n != 1 || err != nil {
		t.Fatalf("read: %d %v", n, err)
	}
	if c.wr.timer != nil || c.rd.timer != nil {
		t.Fatalf("timers armed by calls that did not park: write %v, read %v", c.wr.timer != nil, c.rd.timer != nil)
	}

	c.SetWriteDeadline(time.Now().Add(10 * time.Millisecond))
	time.Sleep(20 * time.Millisecond) // past the deadline, which no timer marks
	if _, err := c.Write([]byte("250 ok")); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("write past an unarmed deadline: %v, want os.ErrDeadlineExceeded", err)
	}

	c.SetReadDeadline(time.Time{})
	got := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 8))
		got <- err
	}()
	// Parked with no deadline: the set below must arm the timer.
	waitFor(t, "the read parks", func() bool { return c.rd.parked.Load() })
	c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	select {
	case err := <-got:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("parked read under a deadline set meanwhile: %v, want os.ErrDeadlineExceeded", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a deadline set while a read was parked did not end it")
	}
	if c.rd.timer == nil {
		t.Fatal("a parked read's deadline armed no timer")
	}
}

// A wake is never lost and never left over: of many wakes, sent while the
// side's call is blocked on its channel, about to park or not parked at
// all, each ends a park or is taken by the next one, and once both sides
// are done no token is left in the channel for a later park to take as
// news that never came.
func TestSideWakes(t *testing.T) {
	c, _, _ := eventPair(t)
	s := &c.rd
	s.wake() // with no call parked: left for the next park, not in the channel
	if len(s.ch) != 0 || s.wst.Load() != wakePending {
		t.Fatalf("a wake with no call parked left %d tokens in the channel, state %d", len(s.ch), s.wst.Load())
	}
	s.mu.Lock()
	s.park() // takes it at once
	s.mu.Unlock()
	const n = 20000
	var sent atomic.Int64
	go func() {
		for i := 0; i < n; i++ {
			sent.Add(1)
			s.wake()
			if i%3 == 0 {
				runtime.Gosched() // let the call block on the channel now and then
			}
		}
	}()
	parks := 0
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		s.mu.Lock()
		defer s.mu.Unlock()
		for sent.Load() < n {
			s.park()
			parks++
		}
	}()
	select {
	case <-finished:
	case <-time.After(time.Minute): // a hang detector, not a measure
		t.Fatalf("a park waits for a wake after %d of %d were sent", sent.Load(), n)
	}
	if len(s.ch) != 0 {
		t.Fatal("a token is left in the channel with no call blocked on it")
	}
	if st := s.wst.Load(); st != wakeIdle && st != wakePending {
		t.Fatalf("the side's wake state is %d with no call parked", st)
	}
	t.Logf("%d wakes ended %d parks", n, parks)
}
