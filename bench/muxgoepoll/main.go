// Command muxgoepoll is bench/mux.sh's C floor written in Go, line for
// line: one goroutine locked to its thread, an epoll instance of its own,
// raw system calls, no goroutine per connection and no runtime poller. It
// accepts, reads the request line, relays it over a pipe to an idle
// worker (queueing it while all are busy), relays the reply line back and
// closes; status is answered from the workers' states. No limits,
// timeouts, recycling, logging or statistics.
//
// It tells what the C floor's design costs in Go, against what sluice's
// design (a goroutine per connection, a pool owner goroutine) costs: see
// bench/results/2026-11-26-mux-notebook.md, "What the rest of the gap is: goroutines, not Go". Like
// bench/muxgofloor it takes sluice mux's command line as bench/mux.sh
// passes it (-s, -f, -x and -I are used, the rest is ignored), so that it
// can stand in for a sluice binary:
//
//	go build -o /tmp/muxgoepoll ./bench/muxgoepoll
//	BASELINE=/tmp/muxgoepoll COMMANDS=relayok CONCURRENCY=64 bench/mux.sh
//
// It runs as the user that starts it, workers included, until SIGTERM.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"sluice/bench/internal/floorcmd"
	"syscall"
	"unsafe"
)

const line = 4096

type client struct {
	fd   int
	n    int
	buf  [line]byte
	next *client
}

type worker struct {
	in, out int
	c       *client
	n       int
	buf     [line]byte
}

type floor struct {
	ep      int
	lfd     int
	ws      []*worker
	byOut   map[int]*worker
	clients map[int]*client
	qh, qt  *client
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "muxgoepoll:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	a, err := floorcmd.Parse("muxgoepoll", args)
	if err != nil {
		return err
	}
	sock, prog, n, backlog := a.Socket, a.Program, a.Workers, a.Backlog
	runtime.GOMAXPROCS(1)
	signal.Ignore(syscall.SIGPIPE)
	f, err := newFloor(sock, prog, n, backlog)
	if err != nil {
		return err
	}
	return f.loop(-1)
}

// newFloor starts n workers running prog and listens on sock.
func newFloor(sock, prog string, n, backlog int) (*floor, error) {
	ep, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("epoll_create1: %w", err)
	}
	f := &floor{ep: ep, lfd: -1, byOut: map[int]*worker{}, clients: map[int]*client{}}
	for range n {
		w, err := startWorker(prog)
		if err != nil {
			f.close()
			return nil, err
		}
		f.ws = append(f.ws, w)
		f.byOut[w.out] = w
		f.add(w.out)
	}
	_ = os.Remove(sock)
	l, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		f.close()
		return nil, fmt.Errorf("socket: %w", err)
	}
	f.lfd = l
	if err := syscall.Bind(l, &syscall.SockaddrUnix{Name: sock}); err != nil {
		f.close()
		return nil, fmt.Errorf("bind %s: %w", sock, err)
	}
	if err := syscall.Listen(l, backlog); err != nil {
		f.close()
		return nil, fmt.Errorf("listen %s: %w", sock, err)
	}
	f.add(l)
	return f, nil
}

// close closes the listener, the workers' pipes (they see EOF and exit),
// the clients and the epoll instance.
func (f *floor) close() {
	if f.lfd >= 0 {
		closeFd(f.lfd)
	}
	for _, w := range f.ws {
		closeFd(w.in)
		closeFd(w.out)
	}
	for fd := range f.clients {
		closeFd(fd)
	}
	closeFd(f.ep)
}

func (f *floor) add(fd int) {
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(fd)}
	_ = syscall.EpollCtl(f.ep, syscall.EPOLL_CTL_ADD, fd, &ev)
}

func (f *floor) del(fd int) {
	var ev syscall.EpollEvent
	_ = syscall.EpollCtl(f.ep, syscall.EPOLL_CTL_DEL, fd, &ev)
}

// startWorker starts prog on two pipes and keeps their bare descriptors,
// off the runtime's poller.
func startWorker(prog string) (*worker, error) {
	inW, outR, err := floorcmd.StartWorker(prog)
	if err != nil {
		return nil, err
	}
	defer inW.Close()
	defer outR.Close()
	in, err := syscall.Dup(int(inW.Fd()))
	if err != nil {
		return nil, fmt.Errorf("dup: %w", err)
	}
	out, err := syscall.Dup(int(outR.Fd()))
	if err != nil {
		closeFd(in)
		return nil, fmt.Errorf("dup: %w", err)
	}
	syscall.CloseOnExec(in)
	syscall.CloseOnExec(out)
	if err := syscall.SetNonblock(out, true); err != nil {
		return nil, fmt.Errorf("set non-blocking: %w", err)
	}
	return &worker{in: in, out: out}, nil
}

// rw is read(2) or write(2) (trap) on a descriptor, retried on EINTR: the
// count, or minus the errno.
func rw(trap uintptr, fd int, b []byte) int {
	for {
		n, _, e := syscall.RawSyscall(trap, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)))
		if e == syscall.EINTR {
			continue
		}
		if e != 0 {
			return -int(e)
		}
		return int(n)
	}
}

// put writes all of b to fd, as far as it goes.
func put(fd int, b []byte) {
	for len(b) > 0 {
		k := rw(syscall.SYS_WRITE, fd, b)
		if k <= 0 {
			return
		}
		b = b[k:]
	}
}

func closeFd(fd int) { _, _, _ = syscall.RawSyscall(syscall.SYS_CLOSE, uintptr(fd), 0, 0) }

// loop serves until stop (a descriptor, -1 for none) is readable.
func (f *floor) loop(stop int) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if stop >= 0 {
		f.add(stop)
	}
	evs := make([]syscall.EpollEvent, 64)
	for {
		k, err := syscall.EpollWait(f.ep, evs, -1)
		if err != nil {
			if err == syscall.EINTR {
				continue
			}
			return err
		}
		for _, ev := range evs[:k] {
			fd := int(ev.Fd)
			switch {
			case fd == stop:
				return nil
			case fd == f.lfd:
				f.acceptAll()
			case f.byOut[fd] != nil:
				f.reply(f.byOut[fd])
			default:
				f.read(f.clients[fd])
			}
		}
	}
}

// acceptAll accepts every pending connection and waits for its request.
func (f *floor) acceptAll() {
	for {
		r, _, e := syscall.RawSyscall6(syscall.SYS_ACCEPT4, uintptr(f.lfd), 0, 0, syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0, 0)
		if e != 0 {
			return
		}
		c := &client{fd: int(r)}
		f.clients[c.fd] = c
		f.add(c.fd)
	}
}

func (f *floor) read(c *client) {
	if c == nil {
		return
	}
	n := rw(syscall.SYS_READ, c.fd, c.buf[c.n:])
	if n == -int(syscall.EAGAIN) {
		return
	}
	if n <= 0 {
		f.done(c)
		return
	}
	c.n += n
	if c.n == line {
		f.done(c)
		return
	}
	if c.buf[c.n-1] == '\n' {
		f.request(c)
	}
}

func (f *floor) done(c *client) {
	f.del(c.fd)
	delete(f.clients, c.fd)
	closeFd(c.fd)
}

// request: c has a whole line; answer status, or hand it to a worker.
func (f *floor) request(c *client) {
	f.del(c.fd)
	delete(f.clients, c.fd)
	if string(c.buf[:c.n]) == "status\n" {
		var s [line]byte
		i := 0
		for _, w := range f.ws {
			s[i] = 'I'
			if w.c != nil {
				s[i] = 'B'
			}
			i++
		}
		i += copy(s[i:], " 0 0 0 0 0\n")
		put(c.fd, s[:i])
		closeFd(c.fd)
		return
	}
	for _, w := range f.ws {
		if w.c == nil {
			f.assign(w, c)
			return
		}
	}
	c.next = nil
	if f.qt != nil {
		f.qt.next = c
	} else {
		f.qh = c
	}
	f.qt = c
}

func (f *floor) assign(w *worker, c *client) {
	w.c = c
	w.n = 0
	put(w.in, c.buf[:c.n])
}

func (f *floor) reply(w *worker) {
	n := rw(syscall.SYS_READ, w.out, w.buf[w.n:])
	if n == -int(syscall.EAGAIN) {
		return
	}
	if n <= 0 {
		fmt.Fprintln(os.Stderr, "muxgoepoll: a worker exited")
		os.Exit(1)
	}
	w.n += n
	if w.buf[w.n-1] != '\n' || w.c == nil {
		return
	}
	put(w.c.fd, w.buf[:w.n])
	closeFd(w.c.fd)
	w.c = nil
	if c := f.qh; c != nil {
		f.qh = c.next
		if f.qh == nil {
			f.qt = nil
		}
		f.assign(w, c)
	}
}
