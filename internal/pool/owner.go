package pool

import "time"

// Owner is what a front end may do on the pool's owner goroutine. A
// front end that reads its clients there (the mux's main socket: its
// listening socket and the connections whose request is not in yet sit
// in the owner's epoll set beside the workers' stdout, as in a
// single-threaded multiplexor) watches its descriptors with Watch, bounds
// their waits with Arm, and hands requests to the pool with Submit and
// SnapshotInto, which skip the inbox. An Owner is valid only on the owner
// goroutine: in a function given to OnOwner, a watch's or a timer's
// function, or a Submit call's done.
type Owner struct{ p *Pool }

// OnOwner runs f on the owner goroutine; if the pool stops before f has
// run, drop runs instead (if not nil), on the goroutine that ends the
// pool. False when the pool has stopped already (neither runs). Like
// Submit, OnOwner waits only while the owner's inbox is full.
func (p *Pool) OnOwner(f func(*Owner), drop func()) bool {
	return p.post(ownerMsg{f: func() { f(&Owner{p: p}) }, drop: drop})
}

// Done is closed once the pool's owner loop has ended: no watch or timer
// fires any more, and what OnOwner has not run yet is dropped (its drop
// runs on the goroutine that ends the pool).
func (p *Pool) Done() <-chan struct{} { return p.done }

// Watch arms a one-shot watch on fd: fn runs on the owner once fd is
// readable or has hung up, then the watch is spent (Watch again for the
// next). fn must tolerate a call when nothing is there (EAGAIN: watch
// again). Forget fd before closing it.
func (o *Owner) Watch(fd int, fn func()) error { return o.p.react.watch(fd, false, fn) }

// Forget removes fd's watch, armed or spent.
func (o *Owner) Forget(fd int) { o.p.react.forget(fd) }

// Now is the pool's clock.
func (o *Owner) Now() time.Time { return o.p.clk.Now() }

// OwnerTimer is a function the owner runs at a deadline (Owner.Arm). Its
// zero value is a timer not armed.
type OwnerTimer struct {
	e timerEntry
	p *Pool
}

// Arm arms t, a timer the caller keeps (so that arming allocates
// nothing), to run fn once d has passed, unless t is stopped first; an
// armed t is moved.
func (o *Owner) Arm(t *OwnerTimer, d time.Duration, fn func()) {
	if t.p == nil {
		t.p, t.e.index = o.p, -1
	}
	t.e.fn = fn
	o.p.schedule(&t.e, d)
}

// Stop cancels t if it is armed (owner only).
func (t *OwnerTimer) Stop() {
	if t.p != nil {
		t.e.cancel(t.p)
	}
}

// Submit is Pool.Submit on the owner: the request goes to a worker or
// the queue at once, and done is called exactly once, on the owner
// (perhaps before Submit returns).
func (o *Owner) Submit(req Request, done func(Result)) {
	o.p.submit(newCall(req, done))
}

// SnapshotInto is the pool's state now, with the load windows qs, into
// sn, reusing its slices: a front end that answers a status poll per
// connection keeps one Snapshot for all.
func (o *Owner) SnapshotInto(sn *Snapshot, qs []LoadQuery) { o.p.snapshotInto(sn, qs) }
