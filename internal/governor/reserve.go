package governor

import (
	"context"
	"strconv"

	"sluice/internal/limiter"
)

// Capacity is how many SMTP sessions the MTA serves at once, which the
// classes' reservations divide, and where the figure came from.
type Capacity struct {
	// Sessions is the capacity; 0 when unknown, and then no reservation
	// is enforced.
	Sessions int64
	// From says where it was found, for check and the status page:
	// "mta.sessions" or the MTA file it was read from.
	From string
}

// Capacity returns the MTA's capacity the governor divides.
func (g *Governor) Capacity() Capacity { return g.capacity }

// Occupancy is the MTA's sessions as sluice counts them: the sessions
// every class holds, against the capacity and the reservations.
type Occupancy struct {
	Held     []int64 // the sessions of each class, in class-table order
	Sessions int64   // their sum
	Unused   int64   // reserved sessions their classes do not use
	Claimed  int64   // each class the larger of its sessions and its reservation
}

// Free returns the sessions neither in use nor reserved (never negative);
// 0 too when the capacity is unknown.
func (o Occupancy) Free(capacity int64) int64 { return max(capacity-o.Claimed, 0) }

// Occupancy counts the sessions of every class now. A class the store
// cannot count is left out of Held's sum and the error returned.
func (g *Governor) Occupancy(ctx context.Context) (Occupancy, error) {
	all := g.classes.All()
	o := Occupancy{Held: make([]int64, len(all))}
	var firstErr error
	for i := range all {
		n, err := g.lim.Held(ctx, all[i].LeaseKey())
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		o.Held[i] = n
	}
	o.fill(g.classes)
	return o, firstErr
}

func (o *Occupancy) fill(cs *limiter.Classes) {
	o.Sessions = 0
	for _, n := range o.Held {
		o.Sessions += n
	}
	o.Unused = cs.Unused(o.Held)
	o.Claimed = cs.Claimed(o.Held)
}

// reserveAdmits decides a session cls has just taken a slot for, holding
// held sessions with it: beyond the class's own reservation it needs a
// free session that no other class has reserved (see limiter.Admits).
// A refused session's Occupancy counts the sessions without it.
//
// Every session takes its class's slot first and reads the others' counts
// after, so of two sessions deciding at once the later sees the earlier:
// the check never admits more than the capacity allows, across daemons
// sharing a store too. The cost of that order is that a session being
// refused holds its slot for the moment of the check, and can make
// another one, deciding then, be refused as well.
func (g *Governor) reserveAdmits(ctx context.Context, cls *limiter.Class, held int64) (bool, Occupancy) {
	c := g.capacity.Sessions
	if c <= 0 || held <= cls.Reserve || g.reserved == 0 {
		return true, Occupancy{}
	}
	i := g.classes.Index(cls)
	all := g.classes.All()
	o := Occupancy{Held: make([]int64, len(all))}
	for k := range all {
		if k == i {
			o.Held[k] = held
			continue
		}
		n, err := g.lim.Held(ctx, all[k].LeaseKey())
		if err != nil {
			g.log.Warn("reservations: class count failed", "class", all[k].Name, "err", err)
			return g.lim.FailOpen(), o
		}
		o.Held[k] = n
	}
	o.fill(g.classes)
	if g.classes.Admits(i, o.Held, c) {
		return true, o
	}
	o.Held[i]-- // the refused session gives its slot back
	o.fill(g.classes)
	return false, o
}

// reserveReply is what a session refused for the reservations is told.
func reserveReply(cls *limiter.Class, capacity int64) string {
	return "421 4.7.0 Server busy: its free sessions are reserved for other peers (class " + cls.Name +
		", capacity " + strconv.FormatInt(capacity, 10) + "); try again later"
}

// reserveVerdict is the verdict of a session the reservations refused:
// its count is the sessions open without it, its limit the capacity.
func (g *Governor) reserveVerdict(door string, cls *limiter.Class, o Occupancy) Verdict {
	return Verdict{Door: door, Rule: "reserve", Key: cls.Name, Count: o.Sessions, Limit: sessionCap(g.capacity.Sessions),
		Refused: true, Reply: reserveReply(cls, g.capacity.Sessions)}
}
