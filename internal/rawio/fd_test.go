//go:build linux

package rawio

import (
	"net"
	"path/filepath"
	"syscall"
	"testing"
)

// The calls on a non-blocking socket pair: a write is read whole, an
// empty socket says EAGAIN instead of blocking, a closed peer reads as
// end of file, and a write to it fails (EPIPE).
func TestReadWriteCloseFD(t *testing.T) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	a, b := fds[0], fds[1]
	defer CloseFD(a)
	buf := make([]byte, 16)
	if _, e := ReadFD(a, buf); e != syscall.EAGAIN {
		t.Fatalf("read of an empty socket: %v, want EAGAIN", e)
	}
	if n, e := WriteFD(b, []byte("hello")); n != 5 || e != 0 {
		t.Fatalf("write: %d %v", n, e)
	}
	if !PendingFD(a) {
		t.Fatal("PendingFD of a socket holding a write: false")
	}
	if n, e := ReadFD(a, buf); e != 0 || string(buf[:n]) != "hello" {
		t.Fatalf("read: %q %v (did PendingFD take a byte?)", buf[:n], e)
	}
	if PendingFD(a) {
		t.Fatal("PendingFD of an empty socket: true")
	}
	CloseFD(b)
	if PendingFD(a) {
		t.Fatal("PendingFD of a socket whose peer closed: true")
	}
	if n, e := ReadFD(a, buf); n != 0 || e != 0 {
		t.Fatalf("read after the peer closed: %d %v, want 0 and no error (end of file)", n, e)
	}
	if _, e := WriteFD(a, []byte("x")); e != syscall.EPIPE {
		t.Fatalf("write to a closed peer: %v, want EPIPE", e)
	}
	CloseFD(-1) // none: nothing happens
}

// Accept4From takes a queued connection as a non-blocking descriptor and
// says who connected; with nobody queued it says EAGAIN.
func TestAccept4From(t *testing.T) {
	l, err := net.Listen("unix", filepath.Join(t.TempDir(), "s"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	rc, err := l.(*net.UnixListener).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	accept := func() (fd int, n uint32, e syscall.Errno) {
		var rsa syscall.RawSockaddrAny
		if err := rc.Control(func(lfd uintptr) { fd, n, e = Accept4From(lfd, &rsa) }); err != nil {
			t.Fatal(err)
		}
		if e == 0 && rsa.Addr.Family != syscall.AF_UNIX {
			t.Errorf("peer address family %d, want AF_UNIX", rsa.Addr.Family)
		}
		return
	}
	if _, _, e := accept(); e != syscall.EAGAIN {
		t.Fatalf("accept with nobody queued: %v, want EAGAIN", e)
	}
	c, err := net.Dial("unix", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fd, n, e := accept()
	if e != 0 || fd < 0 || n < 2 {
		t.Fatalf("accept: fd %d, address of %d bytes, %v", fd, n, e)
	}
	defer CloseFD(fd)
	if _, e := ReadFD(fd, make([]byte, 1)); e != syscall.EAGAIN {
		t.Fatalf("the accepted descriptor blocks or fails: %v, want EAGAIN (non-blocking, nothing sent)", e)
	}
}

// An Epoll parks its waiter in the runtime's poller until a descriptor in
// it is ready, gives the ready events to Poll, and ends Wait on Close.
func TestEpollWaitPollClose(t *testing.T) {
	ep, err := NewEpoll("test")
	if err != nil {
		t.Fatal(err)
	}
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer CloseFD(fds[0])
	defer CloseFD(fds[1])
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(fds[0])}
	if err := ep.Ctl(syscall.EPOLL_CTL_ADD, fds[0], &ev); err != nil {
		t.Fatal(err)
	}
	evs := make([]syscall.EpollEvent, 4)
	if n := ep.Poll(evs); n != 0 {
		t.Fatalf("%d events before anything was written", n)
	}
	got := make(chan int32, 4)
	done := make(chan error, 1)
	go func() {
		done <- ep.Wait(func(uintptr) bool {
			if n := ep.Poll(evs); n > 0 {
				got <- evs[0].Fd
			}
			return false
		})
	}()
	if _, e := WriteFD(fds[1], []byte("x")); e != 0 {
		t.Fatal(e)
	}
	if fd := <-got; fd != int32(fds[0]) {
		t.Fatalf("event for descriptor %d, want %d", fd, fds[0])
	}
	ep.Close()
	if err := <-done; err == nil {
		t.Fatal("Wait returned no error after Close")
	}
}
