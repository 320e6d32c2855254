package limiter

// Reservations keep part of the MTA's session capacity for some classes.
// Each class claims the larger of its open sessions and its reservation;
// a session is admitted while the claims fit in the capacity. A session
// within its own class's reservation is always admitted: it takes a
// claimed session, and the sum of the claims does not change. So a class
// with Reserve = R can always open R sessions, whatever the other classes
// hold, as long as the reservations together fit in the capacity.

// Reserved returns the sum of the classes' reservations.
func (cs *Classes) Reserved() int64 {
	if cs == nil {
		return 0
	}
	var n int64
	for _, c := range cs.list {
		n += c.Reserve
	}
	return n
}

// Claimed returns what the classes claim of the capacity: for each class
// the larger of its sessions, held[i] for class i of All, and its
// reservation. A missing figure counts as no sessions.
func (cs *Classes) Claimed(held []int64) int64 {
	var n int64
	for i, c := range cs.list {
		var h int64
		if i < len(held) {
			h = max(held[i], 0)
		}
		n += max(h, c.Reserve)
	}
	return n
}

// Unused returns the reserved sessions not in use: for each class the
// part of its reservation its sessions (held[i]) leave free.
func (cs *Classes) Unused(held []int64) int64 {
	var n int64
	for i, c := range cs.list {
		var h int64
		if i < len(held) {
			h = max(held[i], 0)
		}
		n += max(c.Reserve-h, 0)
	}
	return n
}

// Admits reports whether class i may keep a session it has just taken:
// held are the classes' sessions with the new one counted, capacity the
// sessions the MTA serves at once (<= 0: unknown, every session is
// admitted). Equivalently, the session is refused when admitting it would
// leave fewer free sessions (capacity minus all sessions) than the
// reservations not in use.
func (cs *Classes) Admits(i int, held []int64, capacity int64) bool {
	if capacity <= 0 || i < 0 || i >= len(cs.list) || i >= len(held) {
		return true
	}
	if held[i] <= cs.list[i].Reserve {
		return true
	}
	return cs.Claimed(held) <= capacity
}

// Index returns the position of c in All, or -1 when c is not one of the
// table's classes.
func (cs *Classes) Index(c *Class) int {
	for i := range cs.list {
		if &cs.list[i] == c {
			return i
		}
	}
	return -1
}
