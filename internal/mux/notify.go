package mux

import (
	"errors"
	"log/slog"
	"net"
	"sync"
	"time"
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
// loses messages instead, as with the reference).
type Notifier struct {
	log       *slog.Logger
	timeout   time.Duration // -c: for the "no free slots" reply
	mu        sync.Mutex
	ls        map[*listener]struct{}
	listeners map[net.Listener]struct{}
	closed    bool
	wg        sync.WaitGroup
}

type listener struct {
	n    *Notifier
	conn net.Conn
	wake chan struct{} // capacity 1: the writer has work
	// Guarded by n.mu.
	types   [notifyTypeCount]bool
	pending []byte // messages waiting while a write is in progress
	writing bool   // a write is in progress (or about to start)
	gone    bool
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
	return &Notifier{log: log, timeout: timeout, ls: map[*listener]struct{}{}, listeners: map[net.Listener]struct{}{}}
}

// Serve accepts listeners on l until Close.
func (n *Notifier) Serve(l net.Listener) error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		l.Close()
		return ErrServerClosed
	}
	n.listeners[l] = struct{}{}
	n.wg.Add(1)
	n.mu.Unlock()
	defer n.wg.Done()
	var delay time.Duration
	for {
		c, err := l.Accept()
		if err != nil {
			n.mu.Lock()
			closed := n.closed
			n.mu.Unlock()
			if closed {
				return ErrServerClosed
			}
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			time.Sleep(delay)
			continue
		}
		delay = 0
		n.accept(c)
	}
}

func (n *Notifier) accept(c net.Conn) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		c.Close()
		return
	}
	if len(n.ls) >= maxListeners {
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			_ = c.SetWriteDeadline(time.Now().Add(n.timeout))
			_, _ = c.Write([]byte(notifyNoSlots))
			c.Close()
		}()
		return
	}
	l := &listener{n: n, conn: c, wake: make(chan struct{}, 1)}
	n.ls[l] = struct{}{}
	n.wg.Add(2)
	go l.read()
	go l.write()
	l.enqueueLocked(notifyBanner)
}

// Notify sends msg (one line, without its newline) to every listener that
// subscribed to its type (its first letter); lines starting with '*' go
// to all. It never blocks.
func (n *Notifier) Notify(msg string) {
	line := msg + "\n"
	n.mu.Lock()
	defer n.mu.Unlock()
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
// timeout; a failed or timed-out write drops the listener.
func (l *listener) write() {
	defer l.n.wg.Done()
	for range l.wake {
		for {
			l.n.mu.Lock()
			if l.gone {
				l.n.mu.Unlock()
				return
			}
			if len(l.pending) == 0 {
				l.writing = false
				l.n.mu.Unlock()
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
// lines are ignored; EOF drops the listener. There is no read timeout.
func (l *listener) read() {
	defer l.n.wg.Done()
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
			l.drop()
			return
		}
	}
}

func (l *listener) subscribe(line []byte) {
	if len(line) == 0 || line[0] != '?' {
		return
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

// Close stops accepting, drops every listener and waits for their
// goroutines.
func (n *Notifier) Close() error {
	n.mu.Lock()
	n.closed = true
	for l := range n.listeners {
		l.Close()
	}
	var all []*listener
	for l := range n.ls {
		all = append(all, l)
	}
	n.mu.Unlock()
	for _, l := range all {
		l.drop()
	}
	n.wg.Wait()
	return nil
}
