package governor

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"sluice/internal/limiter"
)

// MarkExempt is the name of the marks that hold exemptions: key
// RULE "\x00" KEY, value -1 to let the key through the rule, or N > 0 to
// raise each of the rule's limits by N for it.
const MarkExempt = "exempt"

// Exemption is an administrator's exception to one rule for one key: the
// key goes through the rule uncounted (Through), or its limits are raised
// by Raise, until Until (zero: until removed).
type Exemption struct {
	Rule    string    `json:"rule"`
	Key     string    `json:"key"`
	Through bool      `json:"through,omitempty"`
	Raise   int64     `json:"raise,omitempty"`
	Since   time.Time `json:"since"`
	Until   time.Time `json:"until,omitzero"`
}

// Exemptions are the exemptions in force, kept as marks (in the state
// directory's marks file, or in Redis where every daemon sharing it sees
// them) and held here as a snapshot that decisions read without a store
// call. A change made here applies at once; one another daemon made
// applies at the next Refresh.
type Exemptions struct {
	marks limiter.Marks
	mu    sync.RWMutex
	m     map[string]Exemption // rule "\x00" key (the store's form)
	read  time.Time
	// gen counts the changes made here (Set, Delete): a Refresh whose
	// read began before one drops what it read (the next reads again), so
	// a change is never undone by an older read.
	gen uint64
	// n is len(m): a decision with no exemption held takes no lock.
	n atomic.Int64
}

// NewExemptions returns the exemptions kept in marks (nil: none can be
// set), without reading them yet (Refresh).
func NewExemptions(marks limiter.Marks) *Exemptions {
	return &Exemptions{marks: marks, m: map[string]Exemption{}}
}

// Shared says whether other daemons change the same exemptions.
func (e *Exemptions) Shared() bool { return e.marks != nil && e.marks.Shared() }

// Refresh reads the exemptions from the marks. A read that a Set or
// Delete here overtook is dropped: the next Refresh reads again.
func (e *Exemptions) Refresh(ctx context.Context) error {
	if e.marks == nil {
		return nil
	}
	e.mu.RLock()
	gen := e.gen
	e.mu.RUnlock()
	list, err := e.marks.List(ctx)
	if err != nil {
		return fmt.Errorf("exemptions: %w", err)
	}
	m := map[string]Exemption{}
	for _, k := range list {
		if k.Name != MarkExempt {
			continue
		}
		rule, key, ok := strings.Cut(k.Key, "\x00")
		if !ok {
			continue
		}
		m[k.Key] = Exemption{Rule: rule, Key: keyText(key), Through: k.Value < 0, Raise: max(k.Value, 0), Since: k.Since, Until: k.Expires}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if gen != e.gen {
		return nil
	}
	e.m, e.read = m, time.Now()
	e.n.Store(int64(len(m)))
	return nil
}

// Run refreshes the exemptions every interval until ctx ends: how a
// daemon learns of those another daemon set in a shared store.
func (e *Exemptions) Run(ctx context.Context, every time.Duration, onErr func(error)) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := e.Refresh(ctx); err != nil && ctx.Err() == nil {
				onErr(err)
			}
		}
	}
}

// Set records an exemption of rule r (x.Rule is r's name; x.Key in text
// form, "attr=value, ...", made canonical by CanonicalKey) and returns
// it as recorded.
func (e *Exemptions) Set(ctx context.Context, r *PolicyRule, x Exemption) (Exemption, error) {
	if e.marks == nil {
		return x, fmt.Errorf("exemptions: no marks store")
	}
	if !x.Through && (x.Raise <= 0 || x.Raise > MaxRaise) {
		return x, fmt.Errorf("exemption of %s in %s: neither through nor a raise of 1 to %d", x.Key, x.Rule, MaxRaise)
	}
	key, err := CanonicalKey(r, x.Key)
	if err != nil {
		return x, fmt.Errorf("exemption: %w", err)
	}
	v := x.Raise
	if x.Through {
		v = -1
	}
	x.Rule, x.Key = r.Name, keyText(key)
	id := x.Rule + "\x00" + key
	if err := e.marks.Put(ctx, id, MarkExempt, limiter.Mark{Value: v, Since: x.Since, Expires: x.Until}); err != nil {
		return x, fmt.Errorf("exemption: %w", err)
	}
	e.mu.Lock()
	e.gen++
	e.m[id] = x
	e.n.Store(int64(len(e.m)))
	e.mu.Unlock()
	return x, nil
}

// Delete removes the exemption of rule's key (the store's form:
// CanonicalKey's, or KeyFromText's for a rule no longer in force) and
// says whether one was in force.
func (e *Exemptions) Delete(ctx context.Context, rule, key string, now time.Time) (bool, error) {
	id := rule + "\x00" + key
	_, had := e.lookup(rule, key, now)
	if e.marks == nil {
		return false, nil
	}
	if err := e.marks.Delete(ctx, id, MarkExempt); err != nil {
		return had, fmt.Errorf("exemption: %w", err)
	}
	e.mu.Lock()
	e.gen++
	delete(e.m, id)
	e.n.Store(int64(len(e.m)))
	e.mu.Unlock()
	return had, nil
}

// List returns the exemptions in force at now, by rule and key, and when
// they were last read from the marks.
func (e *Exemptions) List(now time.Time) ([]Exemption, time.Time) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	out := make([]Exemption, 0, len(e.m))
	for _, x := range e.m {
		if x.Until.IsZero() || now.Before(x.Until) {
			out = append(out, x)
		}
	}
	slices.SortFunc(out, func(a, b Exemption) int { return strings.Compare(a.Rule+"\x00"+a.Key, b.Rule+"\x00"+b.Key) })
	return out, e.read
}

// lookup returns the exemption of rule's key (the store's form) at now.
// empty reports whether no exemption is held: a decision then needs no
// look-up.
func (e *Exemptions) empty() bool { return e == nil || e.n.Load() == 0 }

func (e *Exemptions) lookup(rule, key string, now time.Time) (Exemption, bool) {
	if e == nil || e.n.Load() == 0 {
		return Exemption{}, false
	}
	e.mu.RLock()
	x, ok := e.m[rule+"\x00"+key]
	e.mu.RUnlock()
	if !ok || (!x.Until.IsZero() && !now.Before(x.Until)) {
		return Exemption{}, false
	}
	return x, true
}

// KeyFromText turns a key as logs and the status page show it
// ("sender=a@b.example, client_address=192.0.2.1") into the store's form
// as it stands, without checking or normalising it (CanonicalKey does,
// for a rule in force).
func KeyFromText(s string) string {
	parts := strings.Split(s, ",")
	for i, p := range parts {
		parts[i] = strings.TrimSpace(p)
	}
	return strings.Join(parts, "\x00")
}
