package limiter

import (
	"errors"
	"fmt"
	"strings"

	"sluice/internal/hostmask"
)

// Class is a named group of peers with XLA's two caps. Both count the same
// sessions: incoming sessions are admitted while fewer than Refuse are
// open, outgoing ones while fewer than Queue are open. Zero means no cap
// (XLA itself has no way to say that).
type Class struct {
	Name   string          // for logs, keys and the status page
	Masks  []hostmask.Mask // the peers it holds; any may match
	Refuse int64           // the cap on incoming sessions
	Queue  int64           // the cap on all sessions
	// Reserve is how many of the MTA's sessions are kept for the class:
	// another class's session is refused when admitting it would leave
	// fewer free sessions than the reservations not in use (see Admits).
	// Zero: none.
	Reserve int64

	leaseKey string // LeaseKey, made once by NewClasses
}

// LeaseKey is the store key that counts the class's sessions: made once
// for a class of a table (every session of the class asks for it), on
// each call for a Class made otherwise.
func (c *Class) LeaseKey() string {
	if c.leaseKey != "" {
		return c.leaseKey
	}
	return leaseKeyOf(c.Name)
}

func leaseKeyOf(name string) string { return "class\x00" + name }

// Classes is an ordered class table: the first class with a matching mask
// wins, and the last class matches everything.
type Classes struct {
	list []Class
}

// NewClasses checks the table and returns it. The last class must be the
// catch-all "*"; XLA leaves a miss undefined, sluice refuses it.
func NewClasses(list []Class) (*Classes, error) {
	if len(list) == 0 {
		return nil, errors.New("no classes: the table needs at least the catch-all class \"*\"")
	}
	seen := map[string]bool{}
	var errs []error
	for i, c := range list {
		if c.Name == "" {
			errs = append(errs, fmt.Errorf("class %d has no name", i+1))
		} else if seen[c.Name] {
			errs = append(errs, fmt.Errorf("class %q defined twice", c.Name))
		}
		seen[c.Name] = true
		if len(c.Masks) == 0 {
			errs = append(errs, fmt.Errorf("class %q has no masks", c.Name))
		}
		if c.Refuse < 0 || c.Queue < 0 || c.Reserve < 0 {
			errs = append(errs, fmt.Errorf("class %q: refuse, queue and reserve must not be negative", c.Name))
		}
	}
	last := list[len(list)-1]
	if len(last.Masks) != 1 || !last.Masks[0].IsAny() {
		errs = append(errs, fmt.Errorf("the last class (%q) must match \"*\" and nothing else, so every peer falls in a class", last.Name))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	cs := &Classes{list: append([]Class(nil), list...)}
	for i := range cs.list {
		cs.list[i].leaseKey = leaseKeyOf(cs.list[i].Name)
	}
	return cs, nil
}

// Match returns the first class with a mask matching the peer. It never
// returns nil.
func (cs *Classes) Match(p hostmask.Peer) *Class {
	for i := range cs.list {
		for _, m := range cs.list[i].Masks {
			if m.Match(p) {
				return &cs.list[i]
			}
		}
	}
	return &cs.list[len(cs.list)-1]
}

// All returns the classes in order.
func (cs *Classes) All() []Class { return cs.list }

// Table renders the class table as text, one class per line, as it was
// understood. The reserve column is shown when a class has a reservation.
func (cs *Classes) Table() string {
	var b strings.Builder
	reserve := cs.Reserved() > 0
	if reserve {
		fmt.Fprintf(&b, "%-16s %7s %7s %7s  %s\n", "class", "refuse", "queue", "reserve", "masks")
	} else {
		fmt.Fprintf(&b, "%-16s %7s %7s  %s\n", "class", "refuse", "queue", "masks")
	}
	for _, c := range cs.list {
		masks := make([]string, len(c.Masks))
		for i, m := range c.Masks {
			masks[i] = m.String()
		}
		if reserve {
			fmt.Fprintf(&b, "%-16s %7s %7s %7s  %s\n", c.Name, capText(c.Refuse), capText(c.Queue), capText(c.Reserve), strings.Join(masks, " "))
		} else {
			fmt.Fprintf(&b, "%-16s %7s %7s  %s\n", c.Name, capText(c.Refuse), capText(c.Queue), strings.Join(masks, " "))
		}
	}
	return b.String()
}

func capText(n int64) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprint(n)
}
