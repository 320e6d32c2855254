package governor

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"sluice/internal/clock"
	"sluice/internal/limiter"
	"sluice/internal/markset"
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
// call (markset). A change made here applies at once; one another daemon
// made applies at the next Refresh.
type Exemptions struct {
	marks limiter.Marks
	set   *markset.Set[Exemption] // by rule "\x00" key (the store's form)
}

// NewExemptions returns the exemptions kept in marks (nil: none can be
// set), without reading them yet (Refresh).
func NewExemptions(marks limiter.Marks) *Exemptions {
	return &Exemptions{marks: marks, set: markset.New(marks, MarkExempt, decodeExemption, clock.Real{})}
}

func decodeExemption(k limiter.KeyMark) (Exemption, bool) {
	rule, key, ok := strings.Cut(k.Key, "\x00")
	if !ok {
		return Exemption{}, false
	}
	return Exemption{Rule: rule, Key: keyText(key), Through: k.Value < 0, Raise: max(k.Value, 0), Since: k.Since, Until: k.Expires}, true
}

// Shared says whether other daemons change the same exemptions.
func (e *Exemptions) Shared() bool { return e.set.Shared() }

// Refresh reads the exemptions from the marks. A read that a Set or
// Delete here overtook is dropped: the next Refresh reads again.
func (e *Exemptions) Refresh(ctx context.Context) error {
	if err := e.set.Refresh(ctx); err != nil {
		return fmt.Errorf("exemptions: %w", err)
	}
	return nil
}

// Run refreshes the exemptions every interval until ctx ends: how a
// daemon learns of those another daemon set in a shared store.
func (e *Exemptions) Run(ctx context.Context, every time.Duration, onErr func(error)) {
	e.set.Run(ctx, every, func(err error) { onErr(fmt.Errorf("exemptions: %w", err)) })
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
	e.set.Put(id, x)
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
	e.set.Delete(id)
	return had, nil
}

// List returns the exemptions in force at now, by rule and key, and when
// they were last read from the marks.
func (e *Exemptions) List(now time.Time) ([]Exemption, time.Time) {
	snap := e.set.Load()
	out := make([]Exemption, 0, snap.Len())
	snap.All(func(_ string, x Exemption) {
		if x.Until.IsZero() || now.Before(x.Until) {
			out = append(out, x)
		}
	})
	slices.SortFunc(out, func(a, b Exemption) int { return strings.Compare(a.Rule+"\x00"+a.Key, b.Rule+"\x00"+b.Key) })
	return out, e.set.Read()
}

// lookup returns the exemption of rule's key (the store's form) at now.
// empty reports whether no exemption is held: a decision then needs no
// look-up.
func (e *Exemptions) empty() bool { return e == nil || e.set.Load().Len() == 0 }

func (e *Exemptions) lookup(rule, key string, now time.Time) (Exemption, bool) {
	if e.empty() {
		return Exemption{}, false
	}
	x, ok := e.set.Load().Get(rule + "\x00" + key)
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
