package governor

import (
	"context"
	"sync"
	"time"
)

// CarriedTTL bounds how long a session carried over from the previous
// daemon is counted without smtpd coming back for it (an smtpd that died
// with its session): anvil's own idle limit for a client stream, Postfix's
// ipc_timeout, one hour.
const CarriedTTL = time.Hour

// AnvilCarried holds the SMTP sessions the previous daemon counted on
// anvil streams it had to close when it stopped: smtpd still serves
// them, and will come back for each, on a new stream, with an event or a
// disconnect for its ident. Until then they hold their connection count
// and class slot here, so that a restart admits no session beyond a cap.
// It outlives reloads: the daemon makes one and gives it to every
// Governor.
type AnvilCarried struct {
	mu sync.Mutex
	m  map[string][]AnvilStream // by ident
	n  int
}

// NewAnvilCarried returns an empty table.
func NewAnvilCarried() *AnvilCarried { return &AnvilCarried{m: map[string][]AnvilStream{}} }

// Len returns the number of sessions carried and not yet claimed.
func (c *AnvilCarried) Len() int {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

func (c *AnvilCarried) put(st AnvilStream) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m[st.ident] = append(c.m[st.ident], st)
	c.n++
}

// take removes one session carried for ident.
func (c *AnvilCarried) take(ident string) (AnvilStream, bool) {
	if c == nil {
		return AnvilStream{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	l := c.m[ident]
	if len(l) == 0 {
		return AnvilStream{}, false
	}
	st := l[len(l)-1]
	if len(l) == 1 {
		delete(c.m, ident)
	} else {
		c.m[ident] = l[:len(l)-1]
	}
	c.n--
	return st, true
}

// AnvilCarry counts one session of ident that the previous daemon
// counted when it stopped: its connection and its class slot, even over
// the class cap (the session exists), each ending by itself after
// CarriedTTL unless smtpd claims it first.
func (g *Governor) AnvilCarry(ctx context.Context, ident string) error {
	cls := g.classes.Match(AnvilPeer(ident))
	lease, _, _, err := g.lim.Acquire(ctx, anvilCountKey(ident), 0, CarriedTTL, "connection count")
	if err != nil {
		return err
	}
	st := AnvilStream{ident: ident, lease: lease}
	if cl, _, ok, err := g.lim.Acquire(ctx, cls.LeaseKey(), 0, CarriedTTL, "class sessions"); err == nil && ok {
		st.classLease, st.class, st.classQueue = cl, cls.Name, cls.Queue
	}
	g.carried.put(st)
	return nil
}

// claimCarried moves a session carried over for ident into the stream,
// which holds nothing else: smtpd came back for it.
func (g *Governor) claimCarried(ctx context.Context, st *AnvilStream, ident string) bool {
	c, ok := g.carried.take(ident)
	if !ok {
		return false
	}
	g.anvilDrop(ctx, st)
	c.pid = st.pid
	*st = c
	return true
}

// StreamIdent returns the ident whose connection the stream holds, or "".
func (st *AnvilStream) StreamIdent() string {
	if !st.Holding() {
		return ""
	}
	return st.ident
}
