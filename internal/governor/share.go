package governor

import (
	"net/netip"
	"strconv"
	"sync"
	"time"

	"sluice/internal/limiter"
)

// Shares counts, on this daemon, the SMTP sessions of each network (IPv4
// /24, IPv6 /48) of the classes without a reservation: what their fair
// shares are computed from (see limiter.FairShareHist). A network is in the
// counts only while it holds a session, and a refused session leaves them
// at once, so they never hold more networks than there are open sessions;
// the busy networks are a table of at most BusyMax. A flood from a
// million /24s costs the sessions the MTA serves and that bound, not a
// million entries.
//
// The table is in memory because a max-min share needs every network's
// count, which a store cannot give cheaply. Daemons sharing a Redis store
// each divide by the networks they serve (see docs/flood.md).
//
// A Shares must outlive reloads: the daemon makes one.
type Shares struct {
	mu    sync.Mutex
	nets  map[netip.Prefix]int64
	total int64
	// hist[c] is how many networks hold c sessions, up to the largest
	// (see limiter.FairShareHist): a share costs a walk over the counts.
	hist []int64

	// busy holds when each busy network was last refused a session of
	// the classes without a reservation (for its share, for the sessions
	// the reservations keep, or for the headroom) or admitted one beyond
	// its first; it is busy for BusyFor after: past the budget it gets no
	// session (see take). At most BusyMax networks; a sweep of the
	// expired makes room, at most once a second, and a network that
	// finds no room is not remembered.
	busy  map[netip.Prefix]time.Time
	swept time.Time
}

// BusyFor is how long a busy network (refused a session, or admitted one
// beyond its first) stays out of the headroom between the share budget
// and the unreserved capacity.
const BusyFor = time.Minute

// BusyMax bounds the busy networks remembered (about 80 bytes each): a
// flood from more networks than this leaves the newest unremembered,
// which lets them into the headroom as if they were not busy.
const BusyMax = 16384

// NewShares returns an empty table.
func NewShares() *Shares {
	return &Shares{nets: map[netip.Prefix]int64{}, busy: map[netip.Prefix]time.Time{}}
}

// shareLease is one session counted in a Shares; the zero value counts
// nothing.
type shareLease struct {
	s   *Shares
	net netip.Prefix
}

// Total returns the sessions the table counts.
func (s *Shares) Total() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.total
}

// shareTake is what take decided.
type shareTake struct {
	ok       bool
	held     int64 // the network's sessions with the new one
	share    int64 // the fair share; 0: none, everyone fits the budget
	total    int64 // the sessions counted without the new one
	headroom bool  // refused past the budget as a network holding one or busy
}

// take counts a session of net and decides it against budget. Within
// the budget every session is admitted. Past it, a network is held to
// its max-min fair share, and only a network that holds no session and
// was not busy in the last BusyFor gets one: the sessions between the
// budget and the unreserved capacity are the headroom of networks that
// asked for at most one, such as a single sender's, while a flood's
// networks keep to the budget. A network is busy when a session of it is
// refused, or admitted as its second or more. A refused session is not
// counted.
func (s *Shares) take(net netip.Prefix, budget int64, now time.Time) shareTake {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := shareTake{held: s.nets[net] + 1, total: s.total}
	s.nets[net] = t.held
	s.moved(t.held-1, t.held)
	s.total++
	if s.total > budget {
		t.share = s.shareLocked(budget)
		t.headroom = t.held <= t.share && (t.held > 1 || s.busyLocked(net, now))
	}
	if t.share > 0 && (t.held > t.share || t.headroom) {
		s.giveLocked(net)
		s.markLocked(net, now)
		return t
	}
	if t.held > 1 {
		s.markLocked(net, now)
	}
	t.ok, t.headroom = true, false
	return t
}

// mark notes that net is busy at now (a session of it refused).
func (s *Shares) mark(net netip.Prefix, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.markLocked(net, now)
}

func (s *Shares) markLocked(net netip.Prefix, now time.Time) {
	if _, ok := s.busy[net]; !ok && len(s.busy) >= BusyMax {
		if now.Sub(s.swept) < time.Second {
			return
		}
		s.swept = now
		for n, at := range s.busy {
			if now.Sub(at) >= BusyFor {
				delete(s.busy, n)
			}
		}
		if len(s.busy) >= BusyMax {
			return
		}
	}
	s.busy[net] = now
}

// busyLocked reports whether net was busy within BusyFor of now.
func (s *Shares) busyLocked(net netip.Prefix, now time.Time) bool {
	at, ok := s.busy[net]
	if !ok {
		return false
	}
	if now.Sub(at) >= BusyFor {
		delete(s.busy, net)
		return false
	}
	return true
}

// give ends a session that take counted.
func (s *Shares) give(net netip.Prefix) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.giveLocked(net)
}

func (s *Shares) giveLocked(net netip.Prefix) {
	n, ok := s.nets[net]
	if !ok {
		return
	}
	if n <= 1 {
		delete(s.nets, net)
	} else {
		s.nets[net] = n - 1
	}
	s.moved(n, n-1)
	s.total--
}

// moved notes a network going from holding from sessions to holding to.
func (s *Shares) moved(from, to int64) {
	if from > 0 {
		s.hist[from]--
	}
	if to > 0 {
		for int64(len(s.hist)) <= to {
			s.hist = append(s.hist, 0)
		}
		s.hist[to]++
	}
	for len(s.hist) > 0 && s.hist[len(s.hist)-1] == 0 {
		s.hist = s.hist[:len(s.hist)-1]
	}
}

func (s *Shares) shareLocked(budget int64) int64 { return limiter.FairShareHist(s.hist, budget) }

// state returns the networks holding sessions, their sessions, the
// largest network's, the fair share of budget now and the networks
// busy within BusyFor before now.
func (s *Shares) state(budget int64, now time.Time) (nets int, sessions, largest, share int64, busy int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	largest = max(int64(len(s.hist))-1, 0)
	if budget > 0 && s.total > budget {
		share = s.shareLocked(budget)
	}
	for n, at := range s.busy {
		if now.Sub(at) < BusyFor {
			busy++
		} else {
			delete(s.busy, n)
		}
	}
	return len(s.nets), s.total, largest, share, busy
}

// release ends the counted session, if any.
func (l *shareLease) release() {
	if l.s != nil {
		l.s.give(l.net)
	}
	*l = shareLease{}
}

// ShareState is the fair share as the status page shows it.
type ShareState struct {
	// Budget is the sessions the classes without a reservation hold
	// before their networks are held to a share (0: no capacity known).
	Budget   int64
	Networks int   // networks holding sessions of those classes
	Sessions int64 // their sessions (on this daemon)
	Largest  int64 // the most any one network holds
	Share    int64 // each network's share now; 0 while everyone fits
	// Busy is the networks refused a session, or admitted one beyond
	// their first, within BusyFor: past the budget they get none (the
	// headroom is the others').
	Busy int
}

// ShareState returns the fair share now; o is the occupancy the status
// page counted (for the sessions reserved classes hold beyond their
// reservations).
func (g *Governor) ShareState(o Occupancy) ShareState {
	b := limiter.ShareBudget(g.capacity.Sessions, g.reserved, g.reserveExcess(o.Held))
	if b <= 0 {
		return ShareState{}
	}
	n, sessions, largest, share, busy := g.shares.state(b, g.lim.Clock().Now())
	return ShareState{Budget: b, Networks: n, Sessions: sessions, Largest: largest, Share: share, Busy: busy}
}

// reserveExcess returns the sessions the classes with a reservation hold
// beyond it (held in class-table order); they take sessions nobody
// reserved, like the classes that share them.
func (g *Governor) reserveExcess(held []int64) int64 {
	var n int64
	for i, c := range g.classes.All() {
		if c.Reserve > 0 && i < len(held) {
			n += max(held[i]-c.Reserve, 0)
		}
	}
	return n
}

// shareRefusal is a session the fair share refused.
type shareRefusal struct {
	net      netip.Prefix
	held     int64 // the network's sessions without it
	share    int64
	headroom bool  // within its share, but past the budget: the headroom's rule
	total    int64 // the sessions counted without it
	budget   int64
}

// shareAdmits counts a session of cls from net in the fair shares and
// decides it: sessions of a class with a reservation, with no capacity
// known, or without a network (ok false) are admitted and not counted.
// o is the occupancy reserveAdmits read for the session: the classes'
// sessions when some class reserves (and so the sessions they hold beyond
// their reservations, which the budget leaves out), none otherwise. So
// the share costs no store read of its own.
func (g *Governor) shareAdmits(cls *limiter.Class, net netip.Prefix, ok bool, o Occupancy) (shareLease, *shareRefusal) {
	if !ok || cls.Reserve > 0 || g.capacity.Sessions <= 0 || g.shares == nil {
		return shareLease{}, nil
	}
	budget := limiter.ShareBudget(g.capacity.Sessions, g.reserved, g.reserveExcess(o.Held))
	t := g.shares.take(net, budget, g.lim.Clock().Now())
	if !t.ok {
		return shareLease{}, &shareRefusal{net: net, held: t.held - 1, share: t.share, headroom: t.headroom, total: t.total, budget: budget}
	}
	return shareLease{s: g.shares, net: net}, nil
}

// markRefused notes that the reservations refused a session of cls from
// net: a network of a class without a reservation is then busy, kept out
// of the headroom past the share budget for BusyFor.
func (g *Governor) markRefused(cls *limiter.Class, net netip.Prefix, ok bool) {
	if ok && cls.Reserve == 0 && g.shares != nil && g.capacity.Sessions > 0 {
		g.shares.mark(net, g.lim.Clock().Now())
	}
}

// shareVerdict is the verdict of a session the fair share refused: its
// count is the network's sessions without it, its limit the share; for
// the headroom's rule (reason headroom), the sessions of the classes
// without a reservation and the budget.
func shareVerdict(door string, cls *limiter.Class, r *shareRefusal, msg string, args ...any) Verdict {
	if r.headroom {
		return Verdict{Door: door, Rule: "share", Key: cls.Name, Count: r.total, Limit: sessionCap(r.budget), Refused: true,
			Reply: "421 4.7.0 Server busy: the sessions left are kept for networks that asked for at most one in the last minute (" +
				r.net.String() + " asked for more); try again later",
			Reason: ReasonHeadroom, Window: SummaryEvery, Msg: msg, Args: append(args, "headroom", true, "budget", r.budget)}
	}
	return Verdict{Door: door, Rule: "share", Key: cls.Name, Count: r.held, Limit: sessionCap(r.share), Refused: true,
		Reply: "421 4.7.0 Server busy: too many sessions from your network (" + r.net.String() + " holds " +
			strconv.FormatInt(r.held, 10) + ", its share is " + strconv.FormatInt(r.share, 10) + "); try again later",
		Reason: ReasonShare, Window: SummaryEvery, Msg: msg, Args: args}
}
