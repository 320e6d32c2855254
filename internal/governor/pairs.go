package governor

import (
	"context"
	"net/netip"
	"sync"

	"sluice/internal/limiter"
)

// SessionPairs links the two doors that see one Postfix SMTP session, so
// that the session holds one slot of its class, not one per door.
//
// smtpd asks anvil at the start of each SMTP session ("connect", with the
// service and the client's address) and then sends its milters CONNECT
// (the client's address and port). One smtpd process serves one SMTP
// session at a time, and it makes both connections itself: over unix
// sockets the kernel gives sluice its process id on both (SO_PEERCRED).
// So the session anvil counted for process P, with client address A, is
// the one the milter hears about next from process P with address A: an
// identity, not a guess. A client address alone would not do (many
// sessions share one), nor would its port (anvil never gets it).
//
// The anvil door takes the slot at connect and records it here; the
// milter door then adopts it instead of taking a second one (or, when the
// client's host name puts it in another class, which anvil cannot know,
// moves it into that class). The slot ends with anvil's disconnect. A
// session anvil did not see (a client in smtpd_client_event_limit_exceptions,
// Sendmail, an MTA on TCP) takes its slot at the milter, as before.
//
// A SessionPairs must outlive reloads: the daemon makes one.
type SessionPairs struct {
	mu    sync.Mutex
	byPID map[int]*pairSlot
}

// NewSessionPairs returns an empty SessionPairs.
func NewSessionPairs() *SessionPairs { return &SessionPairs{byPID: map[int]*pairSlot{}} }

// pairSlot is the class slot of one SMTP session that anvil counted.
type pairSlot struct {
	addr    netip.Addr
	class   string
	lease   limiter.Lease
	queue   int64 // the class's queue cap
	adopted bool  // a milter session holds it too
	shared  bool  // anvil counted the session in its network's fair share
}

// Len returns how many sessions anvil holds for a milter to adopt.
func (p *SessionPairs) Len() int {
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.byPID)
}

// put records the slot anvil took for process pid's session with addr.
func (p *SessionPairs) put(pid int, addr netip.Addr, class string, lease limiter.Lease, queue int64, shared bool) *pairSlot {
	s := &pairSlot{addr: addr, class: class, lease: lease, queue: queue, shared: shared}
	p.mu.Lock()
	p.byPID[pid] = s
	p.mu.Unlock()
	return s
}

// drop forgets s (anvil's disconnect) and returns the lease to release:
// none when a milter session moved the slot away.
func (p *SessionPairs) drop(pid int, s *pairSlot) (limiter.Lease, int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.byPID[pid] == s {
		delete(p.byPID, pid)
	}
	l, q := s.lease, s.queue
	s.lease = limiter.Lease{}
	return l, q
}

// adopt finds the slot anvil holds for process pid's session with addr,
// not yet adopted, and marks it adopted. It returns the slot's class and,
// when that is not class (the milter's), takes its lease out for the
// caller to release once the session holds a slot of its own class.
// shared reports that anvil counted the session in its network's fair
// share (it stays counted there until anvil's disconnect).
func (p *SessionPairs) adopt(pid int, addr netip.Addr, class string) (found bool, moved limiter.Lease, queue int64, shared bool) {
	if p == nil || pid <= 0 || !addr.IsValid() {
		return false, limiter.Lease{}, 0, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.byPID[pid]
	if s == nil || s.adopted || s.addr != addr || s.lease.ID == 0 {
		return false, limiter.Lease{}, 0, false
	}
	s.adopted = true
	if s.class == class {
		return true, limiter.Lease{}, 0, s.shared
	}
	moved, queue = s.lease, s.queue
	s.lease = limiter.Lease{}
	return true, moved, queue, s.shared
}

// pairAnvil records the class slot the stream's session took, when its
// smtpd process is known, so that the milter adopts it; the slot then
// belongs to the pair.
func (g *Governor) pairAnvil(st *AnvilStream, ident string) {
	if g.pairs == nil || st.pid <= 0 || st.classLease.ID == 0 {
		return
	}
	addr, err := netip.ParseAddr(anvilClient(ident))
	if err != nil {
		return // Postfix 3.8's network idents name no one client
	}
	st.slot = g.pairs.put(st.pid, addr.Unmap(), st.class, st.classLease, st.classQueue, st.share.s != nil)
	st.classLease = limiter.Lease{}
}

// unpairAnvil ends the stream's paired slot.
func (g *Governor) unpairAnvil(ctx context.Context, st *AnvilStream) {
	if st.slot == nil {
		return
	}
	l, q := g.pairs.drop(st.pid, st.slot)
	st.slot = nil
	g.releaseClass(ctx, l, q)
}
