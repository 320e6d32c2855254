package mux

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"time"

	"sluice/internal/netserve"
)

// Notification socket limits (docs/protocols/mimedefang-multiplexor.md, "Notifications").
const (
	maxListeners    = 5
	maxNotifyMsg    = 256 // a listener's pending buffer, and its input lines
	notifyTimeout   = 10 * time.Second
	notifyBanner    = "*OK\n"
	notifyNoSlots   = "*ERR No free listening slots\n"
	notifyTypeCount = 26 // message types 'A' to 'Z'
)

// Notifier is the -O notification socket (docs/protocols/mimedefang-multiplexor.md, "Notifications"): up to five listeners, each
// greeted with "*OK", each choosing message types with a "?" line, each
// fed by its own writer so that a slow one never holds up the pool (it
// loses messages instead, as with the reference). Connections run on
// netserve: a panic serving one listener costs that listener only.
type Notifier struct {
	srv     *netserve.Server
	log     *slog.Logger
	timeout time.Duration // -c: for the "no free slots" reply
	mu      sync.Mutex
	ls      map[*listener]struct{}
	closed  bool
	// onSubscribe, when set (by tests), sees each "?" line.
	onSubscribe func(line []byte)
}

type listener struct {
	n    *Notifier
	conn net.Conn
	wake chan struct{} // capacity 1: the writer has work
	// Guarded by n.mu.
	types     [notifyTypeCount]bool
	pending   []byte // messages waiting while a write is in progress
	writing   bool   // a write is in progress (or about to start)
	finishing bool   // Shutdown: drop once pending is written
	gone      bool
}

// NewNotifier returns a Notifier; timeout is the -c client timeout, used
// for the reply to a listener refused for want of a slot.
func NewNotifier(log *slog.Logger, timeout time.Duration) *Notifier {
	if log == nil {
		log = slog.Default()
	}
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	n := &Notifier{log: log, timeout: timeout, ls: map[*listener]struct{}{}}
	n.srv = netserve.New(netserve.Options{
		Name: "notification socket", Logger: log, Refuse: n.refuse,
		ConnLimits: netserve.ConnLimits{MaxConns: maxListeners, IdleTimeout: -1, RequestTimeout: -1},
	}, n.serveListener)
	return n
}

// Serve accepts listeners on l until Shutdown or Close.
func (n *Notifier) Serve(l net.Listener) error { return n.srv.Serve(l) }

// refuse answers a listener beyond the five slots.
func (n *Notifier) refuse(c net.Conn) {
	_ = c.SetWriteDeadline(time.Now().Add(n.timeout))
	_, _ = c.Write([]byte(notifyNoSlots))
}

// serveListener runs one listener: its writer in a goroutine of its own,
// its reader here; it returns once both are done.
func (n *Notifier) serveListener(c *netserve.Conn) {
	l := &listener{n: n, conn: c.Conn, wake: make(chan struct{}, 1)}
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return
	}
	n.ls[l] = struct{}{}
	l.enqueueLocked(notifyBanner)
	n.mu.Unlock()
	written := make(chan struct{})
	c.Go(func() { defer close(written); l.write() })
	defer func() {
		if c.Closing() {
			l.finish()
		} else {
			l.drop()
		}
		<-written
	}()
	l.read()
}

// Notify sends msg (one line, without its newline) to every listener that
// subscribed to its type (its first letter); lines starting with '*' go
// to all. It never blocks.
func (n *Notifier) Notify(msg string) {
	line := msg + "\n"
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return
	}
	for l := range n.ls {
		if c := line[0]; c >= 'A' && c <= 'Z' && !l.types[c-'A'] {
			continue
		}
		l.enqueueLocked(line)
	}
}

// enqueueLocked is the reference's notify(): write at once when idle;
// while a write is in progress, append to the pending buffer if it fits
// in 256 bytes, else replace the buffer with this message.
func (l *listener) enqueueLocked(line string) {
	if l.gone {
		return
	}
	if l.writing {
		switch {
		case len(l.pending)+len(line) <= maxNotifyMsg:
			l.pending = append(l.pending, line...)
		case len(line) <= maxNotifyMsg:
			l.pending = append(l.pending[:0], line...)
		}
		return
	}
	l.writing = true
	l.pending = append(l.pending[:0], line...)
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// write sends what is pending, one batch at a time, each under the 10 s
// timeout; a failed or timed-out write drops the listener, and so does
// an empty buffer once Shutdown began.
func (l *listener) write() {
	for range l.wake {
		for {
			l.n.mu.Lock()
			if l.gone {
				l.n.mu.Unlock()
				return
			}
			if len(l.pending) == 0 {
				l.writing = false
				finished := l.finishing
				l.n.mu.Unlock()
				if finished {
					l.drop()
					return
				}
				break
			}
			buf := l.pending
			l.pending = nil
			l.n.mu.Unlock()
			_ = l.conn.SetWriteDeadline(time.Now().Add(notifyTimeout))
			if _, err := l.conn.Write(buf); err != nil {
				l.drop()
				return
			}
		}
	}
}

// read takes "?" lines as the reference reads them (up to a newline or
// 256 bytes, the last byte dropped, the rest of that read ignored): their
// letters A-Z, or '*' for all, replace the listener's subscription. Other
// lines are ignored. It returns on EOF or a read error. There is no read
// timeout.
func (l *listener) read() {
	buf := make([]byte, maxNotifyMsg)
	got := 0
	for {
		m, err := l.conn.Read(buf[got:])
		if i := indexNL(buf[got : got+m]); i >= 0 {
			// As on the main socket, the rest of this read is dropped.
			l.subscribe(buf[:got+i])
			got = 0
		} else if got += m; got == len(buf) {
			l.subscribe(buf[:got-1])
			got = 0
		}
		if err != nil {
			return
		}
	}
}

func (l *listener) subscribe(line []byte) {
	if len(line) == 0 || line[0] != '?' {
		return
	}
	if f := l.n.onSubscribe; f != nil {
		f(line)
	}
	var types [notifyTypeCount]bool
	for _, c := range line[1:] {
		if c == 0 {
			break
		}
		if c >= 'A' && c <= 'Z' {
			types[c-'A'] = true
		}
		if c == '*' {
			for i := range types {
				types[i] = true
			}
		}
	}
	l.n.mu.Lock()
	l.types = types
	l.n.mu.Unlock()
}

// drop closes the listener and frees its slot.
func (l *listener) drop() {
	l.n.mu.Lock()
	defer l.n.mu.Unlock()
	if l.gone {
		return
	}
	l.gone = true
	delete(l.n.ls, l)
	l.conn.Close()
	close(l.wake)
}

// finish drops the listener once its pending messages are written.
func (l *listener) finish() {
	l.n.mu.Lock()
	l.finishing = true
	idle := !l.writing
	l.n.mu.Unlock()
	if idle {
		l.drop()
	}
}

// Shutdown stops accepting, lets each listener's writer send what is
// pending, then drops it; when ctx ends first, it closes the rest.
// Messages notified after Shutdown began are not sent.
func (n *Notifier) Shutdown(ctx context.Context) error {
	n.mu.Lock()
	n.closed = true
	n.mu.Unlock()
	return n.srv.Shutdown(ctx)
}

// Close stops accepting, drops every listener and waits for their
// goroutines.
func (n *Notifier) Close() error {
	n.mu.Lock()
	n.closed = true
	n.mu.Unlock()
	n.srv.Close()
	n.srv.Wait()
	return nil
}
