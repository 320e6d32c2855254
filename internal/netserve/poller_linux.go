package netserve

import (
	"fmt"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"sluice/internal/clock"
	"sluice/internal/rawio"
)

// poller is the doors' one epoll set: every listener a Server serves and
// every session it accepts are in it, edge-triggered, once. A call that
// finds nothing to read (or no room to write, or no connection to
// accept) parks on its own wake channel, and the set's one waiter
// goroutine takes the events with raw epoll_pwait(2) calls and wakes each
// call they name; between events it waits in epoll_pwait(2) itself, or
// parks on the set's descriptor through the runtime's poller (an epoll
// descriptor is readable while it holds events): see wait. On one
// processor a parking call may take the waiter's place in the raw wait
// (lead), and go on at once when the event is its own.
// Every call on a session or listener descriptor (accept4, read, write,
// getsockopt, epoll_ctl, close) is a raw system call: none enters the
// scheduler, so a session never wakes the runtime's monitor thread
// (docs/milter.md, "What the per-session path is shaped by"), which the
// standard library's accept, getsockname and close did once per session
// each.
//
// There is one set per process while any Server serves: the first Serve
// makes it, and it is closed, its waiter stopped, once no Server uses it
// and no descriptor is left in it.
type poller struct {
	ep *rawio.Epoll

	mu      sync.Mutex
	targets []entry // by descriptor number
	n       int     // descriptors in the set
	users   int     // Servers holding the set
	gen     uint32  // descriptors added, to tell a reused number
	closed  bool
	evs     []syscall.EpollEvent

	// busy counts netserve's goroutines that are not parked in netserve
	// (busy.go); rawWaits the raw waits that took events (the waiter's
	// and those of calls in its place, lead), parks the waiter's parks
	// (tests read both).
	busy     atomic.Int64
	rawWaits atomic.Int64
	parks    atomic.Int64
	// parkedAt is when the waiter last left a park (a clock.Mono reading).
	parkedAt atomic.Int64
	rawMax   atomic.Int64 // rawWaitMax (tests make it longer)

	wg sync.WaitGroup // the waiter

	// leading is set while a goroutine waits in a raw epoll_pwait(2) on
	// the set (the waiter, or a parking call in its place: lead); leads
	// counts the raw waits of the latter that took events (tests read
	// it), into leadEvs.
	leading atomic.Bool
	leads   atomic.Int64
	leadEvs []syscall.EpollEvent
}

// entry is what the set knows of one descriptor number.
type entry struct {
	t   target // nil: free
	gen uint32
}

// target is what waits on a descriptor: told which events it got.
type target interface {
	ready(events uint32)
}

// pollerBatch is how many events one epoll_pwait takes.
const pollerBatch = 128

// epollET is EPOLLET as the uint32 of an epoll event (the syscall
// package's constant is a negative int).
const epollET = 1 << 31

var (
	sharedMu sync.Mutex
	shared   *poller // the process's set, while one is in use
)

// usePoller returns the process's set, made if there is none, and counts
// the caller (a Server) among its users until it calls unuse.
func usePoller() (*poller, error) {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if shared == nil {
		p, err := newPoller()
		if err != nil {
			return nil, err
		}
		shared = p
	}
	shared.mu.Lock()
	shared.users++
	shared.mu.Unlock()
	return shared, nil
}

func newPoller() (*poller, error) {
	ep, err := rawio.NewEpoll("netserve")
	if err != nil {
		return nil, err
	}
	p := &poller{ep: ep, evs: make([]syscall.EpollEvent, pollerBatch), leadEvs: make([]syscall.EpollEvent, pollerBatch)}
	p.rawMax.Store(int64(rawWaitMax))
	p.wg.Add(1)
	go p.wait()
	return p, nil
}

// rawWaitMax bounds the waiter's raw waits: each waits at most this long
// for the next event, and the waiter parks on the runtime's poller at
// least this often. A raw wait holds the thread: while the doors are busy
// enough to keep it in raw waits, the process's other goroutines (the
// web service, a signal, a store's background work, a timer) wait for
// the thread until the next event or the next park, at most about twice
// this long; the park is where the scheduler polls the runtime's poller
// for them. And once the doors have been quiet this long, the waiter
// parks and the process is idle the runtime's way (its monitor thread
// asleep, nothing polled until something happens).
const rawWaitMax = 20 * time.Millisecond

// wait is the waiter. While rawAllowed holds (on one processor: every
// goroutine of netserve's is parked in netserve, busy.go, once those
// only runnable have had their turn: rawOKAfterYield), it waits for
// the set's next events in epoll_pwait(2) itself, as a raw system call
// (up to rawWaitMax, and for rawWaitMax since it last parked at most),
// unless a session's call holds that raw wait in its place (lead);
// otherwise it parks on the set's descriptor in the runtime's poller.
// After the events it lets the goroutines they woke run
// (runtime.Gosched) before it waits again. A raw wait costs one system
// call an event; a park costs three (the scheduler's look at the
// runtime's poller, its blocking wait, and the set's drain) and the
// scheduler's idle path, which at one session at a time was much of what
// a milter session cost above a C milter's
// (bench/results/2026-12-03-milter-rawwait.md). It returns when the set
// is closed.
func (p *poller) wait() {
	defer p.wg.Done()
	// A park lasts while the goroutines woken stay busy: each time the set
	// wakes it, the waiter looks, before it wakes others, whether those it
	// woke last are all back in netserve, and goes back to raw waits then.
	parked := func(uintptr) bool {
		raw := p.rawOK()
		return p.drain() && raw
	}
	p.parkedAt.Store(int64(clock.Mono()))
	for {
		limit := time.Duration(p.rawMax.Load())
		if p.rawOKAfterYield() && clock.Mono()-time.Duration(p.parkedAt.Load()) < limit && p.leading.CompareAndSwap(false, true) {
			n, err := p.waitRaw(p.evs, limit)
			p.leading.Store(false)
			if err == syscall.EINTR {
				continue
			}
			if err != nil {
				return // closed
			}
			if n > 0 {
				runtime.Gosched()
				continue
			}
		}
		if err := p.ep.Wait(parked); err != nil {
			return // closed
		}
		p.parks.Add(1)
		p.parkedAt.Store(int64(clock.Mono()))
		runtime.Gosched()
	}
}

// lead is a call's raw wait in the waiter's place (side.park): on one
// processor, a call that is about to park while every other goroutine of
// netserve's waits in netserve (rawOK, and within rawWaitMax of the
// waiter's last park, as the waiter's own raw waits) waits for the set's
// events itself, wakes the targets they name, and goes on at once if one
// of them was its own wake (left in s.wst, which park then takes): a
// session whose peer answers at once is served on its own goroutine from
// event to event, without handing each event from the waiter to it and
// back (two goroutine switches an event, and the waiter's yield). It
// reports whether its wake came; false, when the events woke others
// (they run once the caller parks), at the timeout or at the limit, and
// when another goroutine holds the set's raw wait: the caller then
// blocks on s.ch, and the waiter goes on as before. Only on one
// processor: there a wake from elsewhere (Close, a deadline's timer)
// waits for the thread while any raw wait holds it, the waiter's too, and
// no longer than rawWaitMax; with more processors it would wait for this
// one's wait to end, where it now wakes the call at once.
func (p *poller) lead(s *side) bool {
	if runtime.GOMAXPROCS(0) != 1 || !p.rawOKOne() || !p.leading.CompareAndSwap(false, true) {
		return false
	}
	defer p.leading.Store(false)
	limit := time.Duration(p.rawMax.Load())
	for {
		if s.wst.Load() == wakePending {
			return true
		}
		if !p.rawOKOne() || clock.Mono()-time.Duration(p.parkedAt.Load()) >= limit {
			return false
		}
		n, err := p.waitRaw(p.leadEvs, limit)
		if err == syscall.EINTR {
			continue // a signal; the runtime's preemption among them
		}
		if err != nil || n == 0 {
			return false
		}
		p.leads.Add(1)
	}
}

// waitRaw is one raw wait for the set's events, into evs, of up to limit
// (its caller holds leading): it wakes the targets of the events it took,
// and drains the set after a full batch, since the runtime's poller
// reports only the set's next edge. It returns how many it took.
func (p *poller) waitRaw(evs []syscall.EpollEvent, limit time.Duration) (int, error) {
	n, err := p.ep.WaitFor(evs, int(limit/time.Millisecond))
	if err != nil || n == 0 {
		return n, err
	}
	p.rawWaits.Add(1)
	p.takeFrom(evs[:n])
	if n == len(evs) {
		p.drainInto(evs)
	}
	return n, nil
}

// rawOK reports whether the waiter may wait in a raw system call now.
func (p *poller) rawOK() bool {
	return rawAllowed(p.busy.Load(), runtime.GOMAXPROCS(0), rawio.Sets())
}

// rawOKOne is rawOK on one processor, for lead, which asked the runtime
// for the count once (runtime.GOMAXPROCS takes the scheduler's lock).
func (p *poller) rawOKOne() bool { return rawAllowed(p.busy.Load(), 1, rawio.Sets()) }

// rawOKAfterYield is rawOK, asked again after a yield when a busy
// goroutine forbade the raw wait: a goroutine of netserve's that is
// runnable, not blocked (readied behind the waiter, or preempted), is
// busy until it runs and parks, and the waiter would otherwise park on
// its account (bench/results/2026-12-03-milter-rawwait.md, "The yield
// before a park"). One that is still busy after the yield waits
// elsewhere.
func (p *poller) rawOKAfterYield() bool {
	busy, procs, sets := p.busy.Load(), runtime.GOMAXPROCS(0), rawio.Sets()
	if rawAllowed(busy, procs, sets) {
		return true
	}
	if !yieldMayAllow(busy, procs, sets) {
		return false
	}
	runtime.Gosched()
	return p.rawOK()
}

// yieldMayAllow reports whether a raw wait that rawAllowed refuses could
// be allowed after a yield: only the busy goroutines forbid it (not a
// second set, which a yield does not close).
func yieldMayAllow(busy int64, procs, sets int) bool {
	return busy > 0 && rawAllowed(0, procs, sets)
}

// rawAllowed is the rule for a raw wait: the set is the process's only
// one (another, parked on the runtime's poller, would go unwatched while
// the thread waits here), and either every goroutine of netserve's waits
// in netserve (busy is 0) or there is another processor to run the rest
// (the runtime's poller and timers are served by an idle one).
func rawAllowed(busy int64, procs, sets int) bool {
	return sets == 1 && (busy == 0 || procs > 1)
}

// drain takes every event the set holds and wakes the targets they name;
// it reports whether there were any (a park ends only then).
func (p *poller) drain() bool { return p.drainInto(p.evs) }

// drainInto is drain, taking the events into evs.
func (p *poller) drainInto(evs []syscall.EpollEvent) bool {
	any := false
	for {
		n := p.ep.Poll(evs)
		if n == 0 {
			return any
		}
		any = true
		p.takeFrom(evs[:n])
		if n < len(evs) {
			return true
		}
	}
}

// takeFrom wakes the targets of evs.
func (p *poller) takeFrom(evs []syscall.EpollEvent) {
	p.mu.Lock()
	for _, ev := range evs {
		fd, gen := int(ev.Fd), uint32(ev.Pad)
		if fd < len(p.targets) && p.targets[fd].t != nil && p.targets[fd].gen == gen {
			p.targets[fd].t.ready(ev.Events)
		} // else removed since: its successor was not asked about
	}
	p.mu.Unlock()
}

// add puts fd into the set for events, edge-triggered, with t to wake.
func (p *poller) add(fd int, events uint32, t target) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errStopped
	}
	if fd >= len(p.targets) {
		p.targets = append(p.targets, make([]entry, fd+1-len(p.targets)+len(p.targets)/2)...)
	}
	if p.targets[fd].t != nil {
		// A listener closed by its owner, not yet stopped: its number is
		// this descriptor's now, and the kernel dropped its registration.
		p.targets[fd] = entry{}
		p.n--
	}
	p.gen++
	ev := syscall.EpollEvent{Events: events | syscall.EPOLLRDHUP | epollET, Fd: int32(fd), Pad: int32(p.gen)}
	if err := p.ep.Ctl(syscall.EPOLL_CTL_ADD, fd, &ev); err != nil {
		return fmt.Errorf("netserve: epoll_ctl ADD: %w", err)
	}
	p.targets[fd] = entry{t: t, gen: p.gen}
	p.n++
	return nil
}

// modify changes the events fd is in the set for (edge-triggered), if t
// is what it holds; its owner calls it while fd is surely open. The
// kernel looks at fd's state when the events change: one already ready
// for a new event is reported at once.
func (p *poller) modify(fd int, events uint32, t target) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if fd >= len(p.targets) || p.targets[fd].t != t {
		return errStopped
	}
	ev := syscall.EpollEvent{Events: events | syscall.EPOLLRDHUP | epollET, Fd: int32(fd), Pad: int32(p.targets[fd].gen)}
	if err := p.ep.Ctl(syscall.EPOLL_CTL_MOD, fd, &ev); err != nil {
		return fmt.Errorf("netserve: epoll_ctl MOD: %w", err)
	}
	return nil
}

// remove takes fd out of the set if t is what it holds (del: with
// epoll_ctl, which its owner does while fd is surely open, so that a
// later descriptor with the same number starts afresh). The set closes
// when it was the last descriptor of a set no Server uses.
func (p *poller) remove(fd int, t target, del bool) {
	p.mu.Lock()
	if fd >= len(p.targets) || p.targets[fd].t != t {
		p.mu.Unlock()
		return
	}
	p.targets[fd] = entry{}
	if del {
		var ev syscall.EpollEvent
		_ = p.ep.Ctl(syscall.EPOLL_CTL_DEL, fd, &ev)
	}
	p.n--
	idle := p.n == 0 && p.users == 0
	p.mu.Unlock()
	if idle {
		p.closeIfIdle()
	}
}

// unuse ends a Server's use of the set.
func (p *poller) unuse() {
	p.mu.Lock()
	p.users--
	idle := p.n == 0 && p.users == 0
	p.mu.Unlock()
	if idle {
		p.closeIfIdle()
	}
}

// closeIfIdle closes the set and stops its waiter if nothing uses it.
func (p *poller) closeIfIdle() {
	sharedMu.Lock()
	p.mu.Lock()
	idle := !p.closed && p.n == 0 && p.users == 0
	if idle {
		p.closed = true
	}
	p.mu.Unlock()
	if idle && shared == p {
		shared = nil
	}
	sharedMu.Unlock()
	if idle {
		p.ep.Close() // ends the waiter's Wait
		p.wg.Wait()
	}
}

// startPoller makes the server a user of the process's set if it is not
// one yet (s.mu held); dropPoller ends that, once, when it closes.
func (s *Server) startPoller() error {
	if s.poll != nil {
		return nil
	}
	p, err := usePoller()
	if err != nil {
		return err
	}
	s.poll = p
	return nil
}

func (s *Server) dropPoller() {
	if s.poll != nil && !s.pollDropped {
		s.pollDropped = true
		s.poll.unuse()
	}
}

// newConn makes the connection of an accepted descriptor, in the set.
func (s *Server) newConn(a *acceptor, fd int, raddr net.Addr) (net.Conn, error) {
	if s.closing.Load() {
		return nil, errStopped
	}
	return newFDConn(s.poll, fd, a.netw, a.laddr, raddr)
}
