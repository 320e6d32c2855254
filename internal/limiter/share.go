package limiter

import (
	"net/netip"
)

// Fair shares under pressure. The classes without a reservation share the
// sessions nobody reserved, and while there is room for all their
// networks nothing is shed. Once their sessions pass a budget, 4/5 of the
// unreserved capacity, each network (an IPv4 /24, an IPv6 /48) gets a
// max-min fair share of the budget: a network holding less than the share
// keeps what it has, and what it leaves is spread over the others. A new
// session is refused when its network would hold more than the share. The
// share is at least 1, so a sender from a network of its own always fits
// while there is a session left; it is computed from the counts at each
// admission, so it shrinks as networks arrive and relaxes as sessions end.

// ShareBudget returns the sessions the classes without a reservation may
// hold before their networks are held to a fair share: 4/5 of the capacity
// nobody reserved (capacity - reserved), less the sessions the classes with
// a reservation hold beyond it (excess). It is at least 1; with an unknown
// capacity (<= 0) it is 0, meaning no budget and no shedding.
func ShareBudget(capacity, reserved, excess int64) int64 {
	if capacity <= 0 {
		return 0
	}
	return max((capacity-reserved)*4/5-max(excess, 0), 1)
}

// FairShareHist returns the max-min fair share of budget among networks
// where nets[c] networks hold c sessions each (nets[0] is ignored): the
// largest s >= 1 with the sum over the networks of min(sessions, s) within
// budget. It returns 0 (no share: nothing to shed) when every network fits
// as it is, or when budget is 0. It walks the counts, not the networks: a
// table of open sessions keeps such a histogram up to date cheaply.
func FairShareHist(nets []int64, budget int64) int64 {
	if budget <= 0 {
		return 0
	}
	var sum, k int64
	for c := 1; c < len(nets); c++ {
		sum += int64(c) * nets[c]
		k += nets[c]
	}
	if sum <= budget {
		return 0
	}
	left := budget
	for c := 1; c < len(nets); c++ {
		if nets[c] == 0 {
			continue
		}
		// Serving the smallest first: when the k networks left all hold
		// more than an equal split of what is left, that split is the
		// share. (The networks holding c all fit if the first does.)
		if int64(c)*k > left {
			return max(left/k, 1)
		}
		left -= int64(c) * nets[c]
		k -= nets[c]
	}
	return 0 // not reached: the sum exceeds the budget
}

// ShareNet returns the network whose sessions share one fair share: the
// address's /24 for IPv4 (an IPv4-mapped IPv6 address counts as IPv4),
// its /48 for IPv6. An invalid address has none (ok false).
func ShareNet(a netip.Addr) (netip.Prefix, bool) {
	if !a.IsValid() {
		return netip.Prefix{}, false
	}
	a = a.Unmap()
	bits := 48
	if a.Is4() {
		bits = 24
	}
	p, err := a.Prefix(bits)
	return p, err == nil
}

// ShareNetOf returns the network of a prefix (Postfix 3.8's anvil names a
// network rather than an address): the prefix's /24 or /48 when it is as
// narrow, else the prefix itself.
func ShareNetOf(p netip.Prefix) (netip.Prefix, bool) {
	if !p.IsValid() {
		return netip.Prefix{}, false
	}
	bits := 48
	if p.Addr().Unmap().Is4() {
		bits = 24
	}
	if p.Bits() >= bits {
		return ShareNet(p.Addr())
	}
	return p.Masked(), true
}
