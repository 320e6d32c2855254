package netserve

import "time"

// maxIdleRunners caps the goroutines that wait for work after their
// connection ended (see runner).
const maxIdleRunners = 16

// work is what a runner is handed: a connection to serve, or a listener
// to accept from; neither tells it to return.
type work struct {
	cn *Conn
	a  *acceptor
}

// runner is one goroutine that serves connections one after the other.
type runner struct {
	s    *Server
	w    waiter
	work work // handed by dispatch before the wake
	acc  accept4Call
}

// start runs cn's handler on a runner. s.wg counts cn already; it is
// above zero, so a new goroutine may be counted too.
func (s *Server) start(cn *Conn) { s.dispatch(work{cn: cn}, true) }

// dispatch hands w to the runner that waited last, or to a new one when
// none waits; false when it is an accept and the server is stopping.
// kick: a waiting runner that leads the set is made to look (false in
// the set's drain, which its leader runs).
func (s *Server) dispatch(w work, kick bool) bool {
	s.rmu.Lock()
	if w.cn == nil && s.closing.Load() {
		s.rmu.Unlock()
		return false
	}
	if n := len(s.idleRunners); n > 0 {
		r := s.idleRunners[n-1]
		s.idleRunners[n-1] = nil
		s.idleRunners = s.idleRunners[:n-1]
		s.idle.Add(-1)
		s.rmu.Unlock()
		r.work = w
		r.w.wake(kick)
		return true
	}
	s.wg.Add(1)
	s.rmu.Unlock()
	go s.runner(w)
	return true
}

// runner runs connections' handlers one after the other: when a
// connection ends, its goroutine waits for the next (while fewer than
// maxIdleRunners wait), until the server stops. While it waits it may
// lead the set (lead_linux.go): a connection that comes then is accepted
// and served on it, with no other goroutine woken. A new goroutine
// starts on a small stack that grows, copied each time, while it runs a
// handler's first request: on a quiet server, whose CPU caches are cold
// at each new session, that copying cost the milter's CONNECT as much as
// the class count it answers (docs/milter.md, "What the per-session path
// is shaped by"). A goroutine that served a connection keeps its stack
// (until a garbage collection shrinks it while it waits). s.wg counts
// each runner, so Wait returns once they are gone: only after Close,
// Shutdown or Drain, since until then a runner that served a connection
// waits for another.
func (s *Server) runner(w work) {
	defer s.wg.Done()
	r := &runner{s: s, w: newWaiter(s.poll)}
	for {
		cn := w.cn
		if w.a != nil {
			cn = r.acceptFrom(w.a)
		}
		if cn != nil {
			cn.run()
		}
		w = r.next()
		if w == (work{}) {
			return
		}
	}
}

// next waits for the runner's next work; none once the server stops, or
// when maxIdleRunners wait already.
func (r *runner) next() work {
	s := r.s
	s.rmu.Lock()
	if s.closing.Load() || len(s.idleRunners) >= maxIdleRunners {
		s.rmu.Unlock()
		return work{}
	}
	s.idleRunners = append(s.idleRunners, r)
	s.idle.Add(1)
	s.rmu.Unlock()
	r.w.park(false)
	w := r.work
	r.work = work{}
	return w
}

// stopRunners makes the runners waiting for work return (the server is
// closing: no runner starts waiting after this).
func (s *Server) stopRunners() {
	s.quitOnce.Do(func() { close(s.quit) })
	s.rmu.Lock()
	idle := s.idleRunners
	s.idleRunners = nil
	s.idle.Store(0)
	s.rmu.Unlock()
	for _, r := range idle {
		r.w.wake(true)
	}
}

// pause waits d, or until the server stops (false).
func (s *Server) pause(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.quit:
		return false
	}
}
