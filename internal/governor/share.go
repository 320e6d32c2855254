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
// table only while it holds a session, and a refused session leaves it at
// once, so the table never holds more networks than there are open
// sessions: a flood from a million /24s costs the sessions the MTA
// serves, not a million entries.
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

	// refused holds when each network was last refused a session of the
	// classes without a reservation (for its share, for the sessions the
	// reservations keep, or for the headroom), for RefusedFor: past the
	// budget such a network gets no session (see take). At most
	// RefusedMax networks; a sweep of the expired makes room, at most
	// once a second, and a network that finds no room is not remembered.
	refused map[netip.Prefix]time.Time
	swept   time.Time
}

// RefusedFor is how long a network refused a session stays out of the
// headroom between the share budget and the unreserved capacity.
const RefusedFor = time.Minute

// RefusedMax bounds the networks remembered as refused (about 80 bytes
// each): a flood from more networks than this leaves the newest
// unremembered, which only lets them into the headroom as before.
const RefusedMax = 16384

// NewShares returns an empty table.
func NewShares() *Shares {
	return &Shares{nets: map[netip.Prefix]int64{}, refused: map[netip.Prefix]time.Time{}}
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

// take counts a session of net and decides it against the fair share of
// budget: it returns whether it is admitted, the network's sessions with
// it, the share (0: none, everyone fits), and for a refused session
// whether it was refused as a network refused within RefusedFor before
// now (recent) rather than for its share. A session past the budget is
// admitted only for a network not refused recently: the sessions between
// the budget and the unreserved capacity are the headroom of networks
// that ask for no more than their share, such as a single sender's,
// while a flood's networks, refused over and over, keep to the budget.
// A refused session is not counted, and its network is marked refused.
func (s *Shares) take(net netip.Prefix, budget int64, now time.Time) (ok bool, held, share int64, recent bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	held = s.nets[net] + 1
	s.nets[net] = held
	s.moved(held-1, held)
	s.total++
	if s.total > budget {
		share = s.shareLocked(budget)
		recent = s.refusedLocked(net, now)
	}
	if share > 0 && (held > share || recent) {
		s.giveLocked(net)
		s.markLocked(net, now)
		return false, held, share, recent && held <= share
	}
	return true, held, share, false
}

// mark notes that a session of net was refused at now.
func (s *Shares) mark(net netip.Prefix, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.markLocked(net, now)
}

func (s *Shares) markLocked(net netip.Prefix, now time.Time) {
	if _, ok := s.refused[net]; !ok && len(s.refused) >= RefusedMax {
		if now.Sub(s.swept) < time.Second {
			return
		}
		s.swept = now
		for n, at := range s.refused {
			if now.Sub(at) >= RefusedFor {
				delete(s.refused, n)
			}
		}
		if len(s.refused) >= RefusedMax {
			return
		}
	}
	s.refused[net] = now
}

// refusedLocked reports whether net was refused within RefusedFor of now.
func (s *Shares) refusedLocked(net netip.Prefix, now time.Time) bool {
	at, ok := s.refused[net]
	if !ok {
		return false
	}
	if now.Sub(at) >= RefusedFor {
		delete(s.refused, net)
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
// refused within RefusedFor before now.
func (s *Shares) state(budget int64, now time.Time) (nets int, sessions, largest, share int64, refused int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	largest = max(int64(len(s.hist))-1, 0)
	if budget > 0 && s.total > budget {
		share = s.shareLocked(budget)
	}
	for _, at := range s.refused {
		if now.Sub(at) < RefusedFor {
			refused++
		}
	}
	return len(s.nets), s.total, largest, share, refused
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
	// Refused is the networks refused a session within RefusedFor:
	// past the budget they get none (the headroom is the others').
	Refused int
}

// ShareState returns the fair share now; o is the occupancy the status
// page counted (for the sessions reserved classes hold beyond their
// reservations).
func (g *Governor) ShareState(o Occupancy) ShareState {
	b := limiter.ShareBudget(g.capacity.Sessions, g.reserved, g.reserveExcess(o.Held))
	if b <= 0 {
		return ShareState{}
	}
	n, sessions, largest, share, refused := g.shares.state(b, g.lim.Clock().Now())
	return ShareState{Budget: b, Networks: n, Sessions: sessions, Largest: largest, Share: share, Refused: refused}
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
	net    netip.Prefix
	held   int64 // the network's sessions without it
	share  int64
	recent bool // within its share, but past the budget and refused recently
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
	admit, held, share, recent := g.shares.take(net, budget, g.lim.Clock().Now())
	if !admit {
		return shareLease{}, &shareRefusal{net: net, held: held - 1, share: share, recent: recent}
	}
	return shareLease{s: g.shares, net: net}, nil
}

// markRefused notes that the reservations refused a session of cls from
// net: a network of a class without a reservation is then kept out of the
// headroom past the share budget for RefusedFor.
func (g *Governor) markRefused(cls *limiter.Class, net netip.Prefix, ok bool) {
	if ok && cls.Reserve == 0 && g.shares != nil && g.capacity.Sessions > 0 {
		g.shares.mark(net, g.lim.Clock().Now())
	}
}

// shareVerdict is the verdict of a session the fair share refused: its
// count is the network's sessions without it, its limit the share.
func shareVerdict(door string, cls *limiter.Class, r *shareRefusal, msg string, args ...any) Verdict {
	reply := "421 4.7.0 Server busy: too many sessions from your network (" + r.net.String() + " holds " +
		strconv.FormatInt(r.held, 10) + ", its share is " + strconv.FormatInt(r.share, 10) + "); try again later"
	if r.recent {
		reply = "421 4.7.0 Server busy: the sessions left are kept for networks not refused in the last minute (" +
			r.net.String() + " was); try again later"
		args = append(args, "refused_recently", true)
	}
	return Verdict{Door: door, Rule: "share", Key: cls.Name, Count: r.held, Limit: sessionCap(r.share), Refused: true,
		Reply: reply, Reason: ReasonShare, Window: SummaryEvery, Msg: msg, Args: args}
}
