package pool

import "context"

// ctxWatch interrupts a client's read of its worker's reply when its ctx
// ends. It is armed only when a read would block (most replies are there
// by the time the client reads), and then joins the client to its
// context's watchGroup: one context.AfterFunc per client context (in
// practice one per server), not one per request, which would cost a
// lock, map operations and three allocations each time.
type ctxWatch struct {
	ctx   context.Context
	c     *call
	group *watchGroup // set while armed
	// prev and next link the calls of group.
	prev, next *call
}

// watchGroup is the armed calls of one context.
type watchGroup struct {
	done  <-chan struct{}
	stop  func() bool
	first *call
}

// maxWatchGroups: beyond this many, a group is dropped once it is empty.
const maxWatchGroups = 4

// arm adds w's call to its context's group (grant holder only).
func (p *Pool) arm(w *ctxWatch) {
	done := w.ctx.Done()
	if w.group != nil || done == nil {
		return
	}
	p.wmu.Lock()
	defer p.wmu.Unlock()
	g := p.groups[done]
	if g == nil {
		g = &watchGroup{done: done}
		if p.groups == nil {
			p.groups = map[<-chan struct{}]*watchGroup{}
		}
		p.groups[done] = g
		g.stop = context.AfterFunc(w.ctx, func() { p.ctxEnded(g) })
	}
	c := w.c
	w.group, w.prev, w.next = g, nil, g.first
	if g.first != nil {
		g.first.watch.prev = c
	}
	g.first = c
}

// disarm takes w's call out of its group again.
func (p *Pool) disarm(w *ctxWatch) {
	g := w.group
	if g == nil {
		return
	}
	p.wmu.Lock()
	defer p.wmu.Unlock()
	if w.prev != nil {
		w.prev.watch.next = w.next
	} else if g.first == w.c {
		g.first = w.next
	}
	if w.next != nil {
		w.next.watch.prev = w.prev
	}
	w.group, w.prev, w.next = nil, nil, nil
	if g.first == nil && len(p.groups) > maxWatchGroups && p.groups[g.done] == g {
		delete(p.groups, g.done)
		g.stop()
	}
}

// ctxEnded interrupts the reads of g's calls: their clients have left.
func (p *Pool) ctxEnded(g *watchGroup) {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	if p.groups[g.done] == g {
		delete(p.groups, g.done)
	}
	for c := g.first; c != nil; c = c.watch.next {
		if c.io.abandon() {
			_ = c.proc.stdout.SetReadDeadline(aLongTimeAgo)
		}
	}
}

// stopWatches unregisters every group (the pool has stopped).
func (p *Pool) stopWatches() {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	for done, g := range p.groups {
		g.stop()
		delete(p.groups, done)
	}
}
