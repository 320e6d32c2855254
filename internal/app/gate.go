package app

import (
	"log/slog"
	"net"
	"sync"
	"time"
)

// gate wakes whoever waits for a class slot to free: every milter session
// end calls wake. It is a broadcast: all waiters wake.
type gate struct {
	mu sync.Mutex
	ch chan struct{}
}

// wait returns a channel closed at the next wake.
func (g *gate) wait() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ch == nil {
		g.ch = make(chan struct{})
	}
	return g.ch
}

func (g *gate) wake() {
	if g == nil {
		return
	}
	g.mu.Lock()
	if g.ch != nil {
		close(g.ch)
		g.ch = nil
	}
	g.mu.Unlock()
}

// gateRecheck is how often a paused listener looks again on its own: slots
// freed by another door (anvil) or another host (a shared store) send no
// wake.
const gateRecheck = time.Second

// gatedListener stops accepting while full reports true: XLA's listen(0)
// when every class is full. Connections wait in the kernel's backlog
// meanwhile (or, on a unix socket whose backlog is full, the MTA's
// connect fails and it applies its milter default action).
type gatedListener struct {
	net.Listener
	full func() bool
	gate *gate
	log  *slog.Logger
	once sync.Once
	done chan struct{}
}

func newGatedListener(l net.Listener, full func() bool, g *gate, log *slog.Logger) *gatedListener {
	return &gatedListener{Listener: l, full: full, gate: g, log: log, done: make(chan struct{})}
}

// Accept accepts a connection, then holds it while every class is full:
// it is served only once a class has room, and no other is accepted
// meanwhile (they wait in the backlog).
func (l *gatedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	paused := false
	for l.full() {
		if !paused {
			paused = true
			l.log.Warn("milter: every class is full; not accepting connections until a session ends", "listen", l.Addr().String())
		}
		woken := l.gate.wait()
		t := time.NewTimer(gateRecheck)
		select {
		case <-woken:
		case <-t.C:
		case <-l.done:
			t.Stop()
			c.Close()
			return nil, net.ErrClosed
		}
		t.Stop()
	}
	if paused {
		l.log.Info("milter: a class has room again; accepting connections", "listen", l.Addr().String())
	}
	return c, nil
}

// Close stops a paused Accept and closes the listener.
func (l *gatedListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}
