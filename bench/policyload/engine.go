package main

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"runtime"
	"syscall"
	"time"
	"unsafe"

	"sluice/bench/internal/errlog"
	"sluice/bench/internal/hist"
	"sluice/bench/internal/loadgen"
)

// The load run's engine: every connection is driven by one goroutine
// locked to its thread, over an epoll instance of its own with raw
// non-blocking system calls. Per request that is one write and one read
// (epoll_wait's cost is shared by the replies it returns at once), with no
// goroutine switch and no runtime poller: the generator's own CPU per
// request is what a goroutine per connection costs less its scheduling,
// so that the servers, which share the machine with it, get the rest.

// Connection states.
const (
	closed     = iota // no socket; reconnect at retryAt
	connecting        // non-blocking connect under way
	writing           // part of the request written, waiting to write more
	waiting           // request written, waiting for the reply
	finished          // the run is over for this connection
)

// lconn is one load connection.
type lconn struct {
	st       stream
	fd       int
	gen      int32 // bumped per socket, so an event for an old one is ignored
	state    int
	interest uint32 // the events the socket is watched for

	out     []byte // the request being sent
	sent    int
	rb      replyBuf
	start   time.Time // when the request's first write began
	since   time.Time // when the connect or the request began, for timeouts
	retryAt time.Time
	ready   bool // set up: first reply, error or give-up seen
}

// engine is one load run.
type engine struct {
	cfg     *config
	sa      syscall.Sockaddr
	family  int
	ep      int
	conns   []*lconn
	log     *errlog.Log
	events  [128]syscall.EpollEvent
	win     loadgen.Window // in the far future until every connection is set up
	known   bool           // win is the measured window
	grace   time.Duration  // how long a request may hang after the window
	setup   int            // connections started so far
	setupAt time.Time      // when the last one started
	hist    hist.Hist
	actions tally
	errors  uint64
	word    []byte
}

// scanEvery is how often connections are checked for timeouts and
// reconnections.
const scanEvery = 10 * time.Millisecond

// run makes cfg.Conns connections one at a time, starting each one's work
// as soon as it is connected; once all are made, the -warmup period and
// then the measured -duration begin. Errors are counted; the first few are
// described on logw.
//
// Connecting one at a time, each after the previous one got its first
// reply, spares a server that accepts slowly: with a listen backlog of 5,
// connections made faster than it accepts them overflow its accept queue,
// and each dropped SYN costs the client a second or more. Starting work at
// once means no connection sits idle while the others are made, as some
// servers close idle connections. Dialling and the warm-up are not
// measured.
func run(cfg config, logw io.Writer) result {
	res := result{Target: cfg.Label, C: cfg.Conns, Secs: cfg.Duration.Seconds(), Actions: map[string]uint64{}}
	e, err := newEngine(&cfg, logw)
	if err != nil {
		fmt.Fprintf(logw, "policyload: %v\n", err)
		res.Errors = 1
		return res
	}
	defer e.close()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	e.loop()
	res.Errors = e.errors
	e.actions.mergeInto(res.Actions)
	l := loadgen.Summarize(&e.hist, res.Secs)
	res.Reqs, res.RPS, res.P50us, res.P99us, res.P999us = l.Reqs, l.RPS, l.P50us, l.P99us, l.P999us
	return res
}

func newEngine(cfg *config, logw io.Writer) (*engine, error) {
	ta, err := net.ResolveTCPAddr("tcp", cfg.addr)
	if err != nil {
		return nil, fmt.Errorf("address %q: %w", cfg.addr, err)
	}
	e := &engine{cfg: cfg, log: errlog.New(logw, "policyload", 10), word: make([]byte, 0, 64), grace: cfg.grace}
	if e.grace == 0 {
		e.grace = graceAfterEnd
	}
	if ip4 := ta.IP.To4(); ip4 != nil {
		sa := &syscall.SockaddrInet4{Port: ta.Port}
		copy(sa.Addr[:], ip4)
		e.sa, e.family = sa, syscall.AF_INET
	} else {
		sa := &syscall.SockaddrInet6{Port: ta.Port}
		copy(sa.Addr[:], ta.IP.To16())
		e.sa, e.family = sa, syscall.AF_INET6
	}
	if e.ep, err = syscall.EpollCreate1(syscall.EPOLL_CLOEXEC); err != nil {
		return nil, fmt.Errorf("epoll_create1: %w", err)
	}
	p := buildParts(cfg.clients, cfg.senders, cfg.probeSender)
	nonce := uint64(time.Now().UnixNano())
	far := time.Now().Add(100 * 365 * 24 * time.Hour)
	e.win = loadgen.Window{Start: far, End: far}
	e.conns = make([]*lconn, cfg.Conns)
	for i := range e.conns {
		e.conns[i] = &lconn{fd: -1, out: make([]byte, 0, 2048), st: stream{
			parts: p, clients: cfg.clients, senders: cfg.senders, idx: i,
			rng:    rand.New(rand.NewPCG(cfg.seed, uint64(i))),
			prefix: fmt.Appendf(nil, "%x.%x.", nonce&0xffffffff, 0x10000+i),
		}}
	}
	return e, nil
}

func (e *engine) close() {
	for _, c := range e.conns {
		e.drop(c)
	}
	_ = syscall.Close(e.ep)
}

// loop runs until every connection has finished.
func (e *engine) loop() {
	e.startNext(time.Now())
	next := time.Now()
	for {
		now := time.Now()
		if !now.Before(next) {
			if e.scan(now) {
				return
			}
			next = now.Add(scanEvery)
		}
		n, err := e.wait(next)
		if err != nil && !errors.Is(err, syscall.EINTR) {
			e.errors++
			e.log.Printf("epoll_wait: %v", err)
			return
		}
		// The replies of one batch came by the time epoll_wait returned:
		// that is when each is taken to have arrived, not when the loop
		// gets to it after the batch's earlier events.
		arrived := time.Now()
		for _, ev := range e.events[:max(n, 0)] {
			c := e.conns[ev.Fd]
			if ev.Pad != c.gen || c.fd < 0 {
				continue // an event for a socket closed since
			}
			e.handle(c, arrived)
		}
	}
}

// wait returns the events that have come, waiting for one until next if
// none has. The look without waiting is a raw system call, which the
// runtime does not see: under load it finds events and the thread never
// blocks, so the scheduler never hands its P to another thread.
func (e *engine) wait(next time.Time) (int, error) {
	evs := e.events[:]
	r, _, errno := syscall.RawSyscall6(syscall.SYS_EPOLL_PWAIT, uintptr(e.ep), uintptr(unsafe.Pointer(&evs[0])), uintptr(len(evs)), 0, 0, 0)
	if errno != 0 {
		return 0, errno
	}
	if r > 0 {
		return int(r), nil
	}
	// A negative timeout would wait for ever: next may already be past.
	return syscall.EpollWait(e.ep, evs, max(0, int(time.Until(next)/time.Millisecond)+1))
}

// rawRW is a read or write on a non-blocking socket, which never blocks:
// a raw system call, which spares the runtime's bookkeeping.
func rawRW(trap uintptr, fd int, b []byte) (int, error) {
	r, _, errno := syscall.RawSyscall(trap, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)))
	if errno != 0 {
		return 0, errno
	}
	return int(r), nil
}

// scan reconnects closed connections, fails those past their timeouts,
// moves the set-up on and finishes connections once the window is over.
// It reports whether every connection has finished.
func (e *engine) scan(now time.Time) bool {
	if e.setup > 0 && !e.known && now.Sub(e.setupAt) > dialTimeout {
		e.startNext(now) // the last one is slow: go on without it
	}
	over := e.known && !now.Before(e.win.End)
	all := e.known
	for _, c := range e.conns[:e.setup] {
		switch c.state {
		case closed:
			if over {
				c.state = finished
			} else if !now.Before(c.retryAt) {
				e.connect(c, now)
			}
		case connecting:
			if now.Sub(c.since) > dialTimeout {
				e.failDial(c, errors.New("dial: timed out"), now)
			}
		case writing, waiting:
			deadline := c.since.Add(setupTimeout)
			if end := e.win.End.Add(e.grace); e.known && end.Before(deadline) {
				deadline = end
			}
			if now.After(deadline) {
				e.fail(c, errors.New("request timed out"), now)
			}
		}
		all = all && c.state == finished
	}
	return all && e.setup == len(e.conns)
}

// startNext starts the next connection, or the measured window once every
// connection has started.
func (e *engine) startNext(now time.Time) {
	if e.setup == len(e.conns) {
		if !e.known {
			e.win, e.known = loadgen.NewWindow(e.cfg.Warmup, e.cfg.Duration), true
		}
		return
	}
	c := e.conns[e.setup]
	e.setup++
	e.setupAt = now
	e.connect(c, now)
}

// setReady notes that c is set up, starting the next connection if c was
// the one the set-up waited for.
func (e *engine) setReady(c *lconn, now time.Time) {
	if c.ready {
		return
	}
	c.ready = true
	if c == e.conns[e.setup-1] {
		e.startNext(now)
	}
}

// connect starts a non-blocking connect for c.
func (e *engine) connect(c *lconn, now time.Time) {
	fd, err := syscall.Socket(e.family, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		e.failDial(c, fmt.Errorf("socket: %w", err), now)
		return
	}
	// As Go's net package, and smtpd's policy client, do.
	_ = syscall.SetsockoptInt(fd, syscall.IPPROTO_TCP, syscall.TCP_NODELAY, 1)
	c.fd, c.gen, c.since, c.interest = fd, c.gen+1, now, syscall.EPOLLOUT
	c.rb.reset()
	ev := syscall.EpollEvent{Events: syscall.EPOLLOUT, Fd: int32(c.st.idx), Pad: c.gen}
	if err := syscall.EpollCtl(e.ep, syscall.EPOLL_CTL_ADD, fd, &ev); err != nil {
		e.failDial(c, fmt.Errorf("epoll_ctl: %w", err), now)
		return
	}
	c.state = connecting
	switch err := syscall.Connect(fd, e.sa); {
	case err == nil:
		e.connected(c)
	case errors.Is(err, syscall.EINPROGRESS):
	default:
		e.failDial(c, fmt.Errorf("dial: %w", err), now)
	}
}

// connected starts c's first request once its connect is complete.
func (e *engine) connected(c *lconn) {
	if e.watch(c, syscall.EPOLLIN) {
		e.send(c)
	}
}

// handle takes an event on c's socket; arrived is when the batch it came
// in was returned.
func (e *engine) handle(c *lconn, arrived time.Time) {
	switch c.state {
	case connecting:
		soErr, err := syscall.GetsockoptInt(c.fd, syscall.SOL_SOCKET, syscall.SO_ERROR)
		if err == nil && soErr != 0 {
			err = syscall.Errno(soErr)
		}
		if err != nil {
			e.failDial(c, fmt.Errorf("dial: %w", err), time.Now())
			return
		}
		e.connected(c)
	case writing:
		e.write(c)
	case waiting:
		e.read(c, arrived)
	}
}

// send writes c's next request.
func (e *engine) send(c *lconn) {
	c.out = c.st.appendNext(c.out[:0])
	c.sent = 0
	c.start = time.Now()
	c.since = c.start
	c.state = writing
	e.write(c)
}

// write writes what is left of c's request, waiting for the socket to
// take more if it takes only part.
func (e *engine) write(c *lconn) {
	for c.sent < len(c.out) {
		n, err := rawRW(syscall.SYS_WRITE, c.fd, c.out[c.sent:])
		if errors.Is(err, syscall.EAGAIN) {
			e.watch(c, syscall.EPOLLOUT) // the rest when it can take more
			return
		}
		if err != nil {
			e.fail(c, fmt.Errorf("write: %w", err), time.Now())
			return
		}
		c.sent += n
	}
	if e.watch(c, syscall.EPOLLIN) {
		c.state = waiting
	}
}

// watch sets what c's socket is watched for, when that changes.
func (e *engine) watch(c *lconn, events uint32) bool {
	if c.interest == events {
		return true
	}
	ev := syscall.EpollEvent{Events: events, Fd: int32(c.st.idx), Pad: c.gen}
	if err := syscall.EpollCtl(e.ep, syscall.EPOLL_CTL_MOD, c.fd, &ev); err != nil {
		e.fail(c, fmt.Errorf("epoll_ctl: %w", err), time.Now())
		return false
	}
	c.interest = events
	return true
}

// read reads what came on c and takes its reply, as arrived at now.
func (e *engine) read(c *lconn, now time.Time) {
	n, err := rawRW(syscall.SYS_READ, c.fd, c.rb.space())
	switch {
	case errors.Is(err, syscall.EAGAIN):
		return
	case err != nil:
		e.fail(c, fmt.Errorf("reading reply: %w", err), now)
		return
	case n == 0:
		e.fail(c, errors.New("reading reply: EOF"), now)
		return
	}
	c.rb.n += n
	act, ok, err := c.rb.next()
	switch {
	case err != nil:
		e.fail(c, err, now)
		return
	case !ok:
		return
	}
	if e.win.Holds(c.start, now) {
		e.hist.Record(now.Sub(c.start))
		e.word = firstWord(e.word, act)
		e.actions.add(e.word)
	}
	e.setReady(c, now)
	c.st.answered()
	if e.known && now.After(e.win.End) {
		e.drop(c)
		c.state = finished
		return
	}
	e.send(c)
}

// failDial counts a failed connect; c tries again after a pause.
func (e *engine) failDial(c *lconn, err error, now time.Time) {
	e.fail(c, err, now)
	c.retryAt = now.Add(10 * time.Millisecond)
}

// fail counts an error on c and closes it; it reconnects at the next scan.
func (e *engine) fail(c *lconn, err error, now time.Time) {
	e.errors++
	e.log.Printf("%v", err)
	e.drop(c)
	c.st.abandon()
	c.retryAt = now
	e.setReady(c, now)
}

// drop closes c's socket.
func (e *engine) drop(c *lconn) {
	if c.fd >= 0 {
		_ = syscall.Close(c.fd) // closing removes it from the epoll set
		c.fd = -1
	}
	if c.state != finished {
		c.state = closed
	}
}
