package netserve

import (
	"errors"
	"os"
	"sync/atomic"
	"time"
)

// Who waits on the set: leader and followers.
//
// A goroutine that has to wait for the set (a session's read or write
// that found nothing to do, a runner waiting for its next connection)
// waits on the set itself when no other goroutine does: it leads. It
// parks in the runtime's poller on the set's descriptor, takes the
// events when the set has some and wakes the calls they name, until one
// of them is its own; then it stops leading and goes on with its call. A
// goroutine that has to wait while another leads follows: it parks on its
// own wake channel, which the leader signals.
//
// On a door with one session at a time (an MTA's milter at c=1), the
// session's goroutine is the only one waiting, so it leads at every wait
// and is woken by the runtime's poller directly, the set's events taken on
// its own stack: no goroutine hands it an event, and the runner that
// waits for the next connection leads too and accepts it itself. With
// many sessions, the standby goroutine leads whenever the leader stops
// leading while calls follow (they wait for events only a leader sees),
// and it keeps leading while calls follow: the shape of one waiter
// goroutine waking each call.
//
// A leader stops leading when its own call is woken. If calls follow, the
// lead passes to the standby at once. If none does, the lead stays free:
// the goroutine that left it is likely to come back to wait before
// anything else happens (its session's next request). Should it block
// elsewhere instead (a store on the network), a watchdog hands the lead
// to the standby once it has been free for leadWatchdog, so a listener's
// connections wait at most that long for an accept.

// leadWatchdog bounds how long the lead stays free while no call follows:
// a connection that arrives meanwhile waits that long at most. It is a
// bound on a rare case (the only goroutine that waited is busy elsewhere),
// not a cost: the watchdog's timer fires at most once per leadWatchdog.
const leadWatchdog = time.Millisecond

// leadState is the poller's leadership: who leads, who follows.
type leadState struct {
	lead    atomic.Bool  // a goroutine leads
	urgent  atomic.Int32 // calls on sessions parked as followers
	standby chan struct{}
	stopped chan struct{} // closed with the set: the standby returns
	// releases counts the times the lead was left; the watchdog looks
	// whether it moved since it was armed.
	releases atomic.Uint64
	wdArmed  atomic.Bool
	wdFrom   atomic.Uint64 // releases when the watchdog was armed
	wdDelay  atomic.Int64  // leadWatchdog (tests lengthen it)
	watchdog *time.Timer

	// The leader's own (only the goroutine that leads touches them).
	own      chan struct{} // its wake channel (nil for the standby)
	woke     int           // events the standby's last drain handed out
	waitFn   func(uintptr) bool
	standbyF func(uintptr) bool
}

// initLead sets up leadership for a set that has waiters (newPoller;
// sets made by tests without one have none: their calls always follow).
func (p *poller) initLead() {
	p.leads = true
	p.standby = make(chan struct{}, 1)
	p.stopped = make(chan struct{})
	p.wdDelay.Store(int64(leadWatchdog))
	p.watchdog = time.AfterFunc(time.Hour, p.watch)
	p.watchdog.Stop()
	// Each Wait drains first: it forgets that the set's descriptor was
	// reported ready while no goroutine waited.
	p.waitFn = func(uintptr) bool {
		p.drain()
		return len(p.own) > 0
	}
	p.standbyF = func(uintptr) bool {
		p.woke = 0
		p.drain()
		return p.woke > 0
	}
	p.lead.Store(true)
	p.standby <- struct{}{}
	p.wg.Add(1)
	go p.standbyLoop()
}

// waiter is what one goroutine waiting on the set waits on: its wake
// channel, and whether it leads or follows meanwhile.
type waiter struct {
	p  *poller
	ch chan struct{} // capacity 1
	// leading is set while it leads: a wake from elsewhere than the set
	// then kicks its wait.
	leading atomic.Bool
	// following is set while it follows as an urgent call (counted in
	// urgent); whoever clears it uncounts it.
	following atomic.Bool
}

func newWaiter(p *poller) waiter { return waiter{p: p, ch: make(chan struct{}, 1)} }

// wake wakes the waiter: from the set's drain (which only the leader
// runs: it looks at its channel after), or from elsewhere (kick: a
// deadline, Close, a runner handed work), which kicks it if it leads.
func (w *waiter) wake(kick bool) {
	if w.following.CompareAndSwap(true, false) {
		w.p.urgent.Add(-1) // woken: no longer a call that needs a leader
	}
	select {
	case w.ch <- struct{}{}:
	default:
	}
	if kick && w.leading.Load() {
		w.p.kick()
	}
}

// park waits for a wake, leading if no goroutine leads. urgent: the call
// is a session's, whose events only a leader sees, so the lead must not
// stay free while it follows.
func (w *waiter) park(urgent bool) {
	p := w.p
	if !p.leads {
		<-w.ch
		return
	}
	if urgent {
		w.following.Store(true)
		p.urgent.Add(1)
	}
	if p.lead.CompareAndSwap(false, true) {
		if w.following.CompareAndSwap(true, false) {
			p.urgent.Add(-1)
		}
		p.leadUntil(w)
	}
	<-w.ch
	if w.following.CompareAndSwap(true, false) {
		p.urgent.Add(-1)
	}
}

// leadUntil leads until w has a wake, then leaves the lead.
func (p *poller) leadUntil(w *waiter) {
	w.leading.Store(true)
	p.own = w.ch
	for len(w.ch) == 0 {
		err := p.ep.Wait(p.waitFn)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			p.ep.Unkick() // a kick: look at the channel again
			continue
		}
		if err != nil {
			break // the set is closed: its last descriptor is gone, and w is woken by its owner
		}
	}
	p.own = nil
	w.leading.Store(false)
	p.release()
}

// kick makes the leader look at its wake channel (a wake from elsewhere
// than the set's events).
func (p *poller) kick() { p.ep.Kick() }

// release leaves the lead: to the standby at once if calls follow (they
// wait for events only a leader sees), else free, with the watchdog
// armed.
func (p *poller) release() {
	p.releases.Add(1)
	p.lead.Store(false)
	if p.urgent.Load() > 0 {
		if p.lead.CompareAndSwap(false, true) {
			p.handToStandby()
		}
		return
	}
	p.armWatchdog()
}

func (p *poller) handToStandby() {
	select {
	case p.standby <- struct{}{}:
	default:
	}
}

func (p *poller) armWatchdog() {
	if p.wdArmed.CompareAndSwap(false, true) {
		p.wdFrom.Store(p.releases.Load())
		p.watchdog.Reset(time.Duration(p.wdDelay.Load()))
	}
}

// watch is the watchdog: a lead free since it was armed goes to the
// standby; one left again since is watched from then on.
func (p *poller) watch() {
	select {
	case <-p.stopped:
		return
	default:
	}
	if p.lead.Load() {
		p.wdArmed.Store(false)
		if !p.lead.Load() { // left meanwhile, by a release that saw the watchdog armed
			p.armWatchdog()
		}
		return
	}
	if from := p.releases.Load(); from != p.wdFrom.Load() {
		p.wdFrom.Store(from)
		p.watchdog.Reset(time.Duration(p.wdDelay.Load()))
		return
	}
	p.wdArmed.Store(false)
	if p.lead.CompareAndSwap(false, true) {
		p.handToStandby()
	}
}

// standbyLoop is the standby: handed the lead, it leads until a drain
// woke some call (that call leads when it next waits), then leaves it.
func (p *poller) standbyLoop() {
	defer p.wg.Done()
	for {
		select {
		case <-p.standby:
		case <-p.stopped:
			return
		}
		for {
			err := p.ep.Wait(p.standbyF)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				p.ep.Unkick() // a kick meant for a leader before it
				continue
			}
			if err != nil {
				return // the set is closed
			}
			break
		}
		p.release()
	}
}
