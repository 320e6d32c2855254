package netserve

// maxIdleRunners caps the goroutines that wait for a connection after
// theirs ended (see runner).
const maxIdleRunners = 16

// start runs cn's handler on a goroutine that finished a connection and
// waits for the next one, or on a new goroutine when none waits. s.wg
// counts cn already; it is above zero, so a new goroutine may be counted
// too.
func (s *Server) start(cn *Conn) {
	s.busyAdd(1) // until its handler returns (Conn.run)
	select {
	case s.handoff <- cn:
	default:
		s.wg.Add(1)
		go s.runner(cn)
	}
}

// runner runs connections' handlers one after the other: when a
// connection ends, its goroutine waits for the next one (while fewer
// than maxIdleRunners wait), until the server stops. A new goroutine
// starts on a small stack that grows, copied each time, while it runs a
// handler's first request: on a quiet server, whose CPU caches are cold
// at each new session, that copying cost the milter's CONNECT as much as
// the class count it answers (docs/milter.md, "What the per-session path
// is shaped by"). A goroutine that served a
// connection keeps its stack (until a garbage collection shrinks it while
// it waits). s.wg counts each runner, so Wait returns once they are gone:
// only after Close, Shutdown or Drain, since until then a runner that
// served a connection waits for another.
func (s *Server) runner(cn *Conn) {
	defer s.wg.Done()
	for {
		cn.run()
		cn = nil // not kept reachable while waiting
		if s.closing.Load() {
			return
		}
		if s.idle.Add(1) > maxIdleRunners {
			s.idle.Add(-1)
			return
		}
		select {
		case cn = <-s.handoff:
			s.idle.Add(-1)
		case <-s.quit:
			s.idle.Add(-1)
			return
		}
	}
}

// stopRunners makes the goroutines waiting for a connection return.
func (s *Server) stopRunners() { s.quitOnce.Do(func() { close(s.quit) }) }

// busyAdd moves the poller's count of busy goroutines (busy.go).
func (s *Server) busyAdd(d int64) {
	if s.poll != nil {
		s.poll.busy.Add(d)
	}
}
