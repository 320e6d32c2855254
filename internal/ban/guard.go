// Package ban is the throttle's ban guard: what a relay's ban does to a
// throttle key. The throttle door judges each send's result (ban signs,
// failures, deliveries) and hands the judgement here; the guard counts
// it per key, corroborates a sign of a ban across distinct sends with
// numbered marks, suspends a banned key for a cool-off that grows with
// each ban, learns a lower limit (halved at most once per event, raised
// back in bounded steps by clean sending), and takes an administrator's
// suspend, resume and reset. Suspensions, ban streaks and learned limits
// are marks (limiter.Marks), shared by every daemon on one Redis. Time is
// the guard's clock.Clock; the policies are its Settings, never the
// configuration itself.
package ban

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"sluice/internal/clock"
	"sluice/internal/limiter"
	"sluice/internal/markset"
	"sluice/internal/status"
)

// Names of the marks the ban guard keeps per throttle key (policy name,
// a space, and the key or "*" for a shared policy).
const (
	markSuspend = "suspend" // value: the ban streak; expires when the cool-off ends
	markBans    = "bans"    // value: the ban streak; expires max_cool_off after the suspension
	markLimit   = "limit"   // value: the learned limit
	// markSign and a number (sign1, sign2...): one send's sign of a ban,
	// waiting for others to corroborate it; expires after the window.
	markSign = "sign"
)

// sharedPoll is how often a daemon with senders waiting on a key reads
// the shared marks for a suspension another daemon made.
const sharedPoll = 250 * time.Millisecond

// Guard reads the results of sends and acts on bans: a key whose relay
// banned it is suspended for a cool-off (its waiting senders defer at
// once, new ones too), the permanent failures the ban caused are reported
// as temporary, and with adapt the key's limit is learned. What must
// outlive the daemon or be shared (suspension, streak, learned limit)
// are marks; consecutive failures and recent deliveries are this daemon's.
// A key is "POLICY BUCKET" (the bucket "*" for a shared policy).
type Guard struct {
	marks limiter.Marks
	log   *slog.Logger
	clock clock.Clock

	mu   sync.Mutex
	keys map[string]*keyState
	// pols are the policies that read results, by name (Configure).
	pols           atomic.Pointer[map[string]*Policy]
	maxCorroborate atomic.Int64
	// readWarned is when readFailed last logged; readErrs counts since
	// (under warnMu: readFailed is called with a key's lock held).
	warnMu     sync.Mutex
	readWarned time.Time
	readErrs   int

	// adminMu orders an administrator's suspensions and resumes (held
	// across their marks calls; no sender waits on it).
	adminMu sync.Mutex
	// susp is the snapshot of suspended keys (suspended.go).
	susp *markset.Set[suspension]
}

// Settings are what the guard is told of the configuration in force.
type Settings struct {
	// Policies are the throttle policies that read results (ban signs,
	// ban_after or adapt); the others have no entry.
	Policies []Policy
	// MaxCorroborate is the most signs of a ban a key can hold (what a
	// reset clears).
	MaxCorroborate int
}

// Policy is one throttle policy's ban settings: what it does when the
// relay bans anyway.
type Policy struct {
	Name string
	// Signs are the ban signs (the front end matches them in results).
	Signs []string
	// After is how many failed sends in a row are a ban (0: off).
	After int
	// CoolOff is a key's first suspension; each ban within MaxCoolOff of
	// the last one's end doubles it, up to MaxCoolOff.
	CoolOff, MaxCoolOff time.Duration
	// Adapt learns the key's limit: halved by a ban, raised back by
	// AdaptWindow of clean sends.
	Adapt       bool
	AdaptWindow time.Duration
	// Corroborate distinct sends must show a sign of a ban within
	// CorroborateWindow before it suspends a key or lowers its limit.
	Corroborate       int
	CorroborateWindow time.Duration
	// Limit is the configured limit's N per Period (the configured period
	// plus the margin); Shown is the period as the configuration writes it.
	Limit  int64
	Period time.Duration
	Shown  string
}

// keyState is one key's local state.
type keyState struct {
	mu         sync.Mutex
	watchers   int
	suspended  chan struct{} // closed when the key is suspended
	until      time.Time     // end of the suspension known here
	reason     string
	failures   int         // consecutive failed sends
	delivered  []time.Time // deliveries within the last period, oldest first
	signs      []time.Time // signs of a ban while the marks failed, oldest first
	trouble    time.Time   // the last failure, throttling answer or ban
	learned    int64       // 0: the configured limit
	learnedAt  time.Time   // when the learned limit was set
	learnedChk time.Time   // when the marks were last read for it
	polling    bool
	used       time.Time
	// epoch counts an administrator's suspensions and resumes of the
	// key: a marks read begun before one is not applied after it.
	epoch uint64
}

// NewGuard returns a guard keeping its marks in marks, on clk's time,
// with no policy until Configure.
func NewGuard(marks limiter.Marks, log *slog.Logger, clk clock.Clock) *Guard {
	g := &Guard{marks: boundedMarks{marks}, log: log, clock: clk, keys: map[string]*keyState{}}
	g.susp = markset.New[suspension](g.marks, markSuspend, decodeSuspension, clk)
	g.Configure(Settings{})
	return g
}

// Configure puts s in force (at start and on each reload).
func (g *Guard) Configure(s Settings) {
	pols := make(map[string]*Policy, len(s.Policies))
	for i := range s.Policies {
		p := s.Policies[i]
		pols[p.Name] = &p
	}
	g.pols.Store(&pols)
	g.maxCorroborate.Store(int64(s.MaxCorroborate))
}

// Policy returns the ban settings of the named policy, nil when it reads
// no results.
func (g *Guard) Policy(name string) *Policy { return (*g.pols.Load())[name] }

// Now is the time by the guard's clock.
func (g *Guard) Now() time.Time { return g.clock.Now() }

// Shared says whether other daemons share the guard's marks.
func (g *Guard) Shared() bool { return g.marks.Shared() }

// markTimeout bounds each call to the marks (Redis down must not hold a
// sender longer than this).
const markTimeout = time.Second

// boundedMarks gives each call to the marks markTimeout at most.
type boundedMarks struct{ limiter.Marks }

func (b boundedMarks) Get(ctx context.Context, key, name string) (limiter.Mark, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, markTimeout)
	defer cancel()
	return b.Marks.Get(ctx, key, name)
}

func (b boundedMarks) Put(ctx context.Context, key, name string, m limiter.Mark) error {
	ctx, cancel := context.WithTimeout(ctx, markTimeout)
	defer cancel()
	return b.Marks.Put(ctx, key, name, m)
}

func (b boundedMarks) Add(ctx context.Context, key, name string, m limiter.Mark) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, markTimeout)
	defer cancel()
	return b.Marks.Add(ctx, key, name, m)
}

func (b boundedMarks) Delete(ctx context.Context, key, name string) error {
	ctx, cancel := context.WithTimeout(ctx, markTimeout)
	defer cancel()
	return b.Marks.Delete(ctx, key, name)
}

// readFailed logs a failed read of the marks, at most once every
// readWarnEvery with the count since (a Redis outage would otherwise log
// once per sender).
func (g *Guard) readFailed(what, id string, err error) {
	now := g.clock.Now()
	g.warnMu.Lock()
	g.readErrs++
	if now.Sub(g.readWarned) < readWarnEvery {
		g.warnMu.Unlock()
		return
	}
	n := g.readErrs
	g.readWarned, g.readErrs = now, 0
	g.warnMu.Unlock()
	g.log.Warn("throttle: reading the marks failed; sending as if the key had none", "what", what, "key", id, "failures", n, "err", err)
}

// readWarnEvery spaces the warnings of readFailed.
const readWarnEvery = 10 * time.Second

func (g *Guard) key(id string) *keyState {
	g.mu.Lock()
	defer g.mu.Unlock()
	k := g.keys[id]
	now := g.clock.Now()
	if k == nil {
		if len(g.keys) >= 4096 {
			g.prune(now)
		}
		k = &keyState{suspended: make(chan struct{})}
		g.keys[id] = k
	}
	k.used = now
	return k
}

// prune forgets keys idle for an hour with nobody waiting (their marks
// stay in the marks store). A key whose lock is held is in use: it is
// skipped, not waited for (g.mu is held).
func (g *Guard) prune(now time.Time) {
	for id, k := range g.keys {
		if !k.mu.TryLock() {
			continue
		}
		idle := k.watchers == 0 && now.Sub(k.used) > time.Hour && !now.Before(k.until)
		k.mu.Unlock()
		if idle {
			delete(g.keys, id)
		}
	}
}

// resumeNowLocked ends the key's suspension at once (an administrator's
// resume).
func (k *keyState) resumeNowLocked() {
	k.until, k.reason = time.Time{}, ""
	select {
	case <-k.suspended:
		k.suspended = make(chan struct{})
	default:
	}
}

// The reasons of a suspension: an administrator's, or the relay's ban
// (with why, when this daemon saw it).
const (
	reasonAdmin = "suspended by an administrator"
	reasonBan   = "the relay banned it"
)

// suspendReason is why a suspension mark was set: a value below zero is
// an administrator's, else the relay's ban (the value is the ban streak).
func suspendReason(m limiter.Mark) string {
	if m.Value < 0 {
		return reasonAdmin
	}
	return reasonBan
}

// Suspend suspends id until until, for an administrator: its waiting
// senders defer at once, and new ones until then or a resume; with
// shared marks every daemon's senders do.
func (g *Guard) Suspend(ctx context.Context, id string, until time.Time) error {
	g.adminMu.Lock()
	defer g.adminMu.Unlock()
	const why = reasonAdmin
	if err := g.marks.Put(ctx, id, markSuspend, limiter.Mark{Value: -1, Since: g.clock.Now(), Expires: until}); err != nil {
		return fmt.Errorf("suspend %s: %w", id, err)
	}
	k := g.key(id)
	k.mu.Lock()
	k.epoch++
	k.until = time.Time{}
	k.suspendLocked(until, why)
	k.mu.Unlock()
	g.susp.Put(id, suspension{until, why})
	return nil
}

// Resume ends id's suspension, whoever set it, and says whether it was
// suspended.
func (g *Guard) Resume(ctx context.Context, id string) (bool, error) {
	g.adminMu.Lock()
	defer g.adminMu.Unlock()
	m, ok, err := g.marks.Get(ctx, id, markSuspend)
	if err != nil {
		return false, fmt.Errorf("resume %s: %w", id, err)
	}
	if err := g.marks.Delete(ctx, id, markSuspend); err != nil {
		return false, fmt.Errorf("resume %s: %w", id, err)
	}
	k := g.key(id)
	k.mu.Lock()
	now := g.clock.Now()
	was := (ok && now.Before(m.Expires)) || now.Before(k.until)
	k.epoch++
	k.resumeNowLocked()
	k.mu.Unlock()
	g.susp.Delete(id)
	return was, nil
}

// resumeLocked starts a new suspension channel once the last suspension
// is over.
func (k *keyState) resumeLocked(now time.Time) {
	select {
	case <-k.suspended:
		if !now.Before(k.until) {
			k.suspended = make(chan struct{})
		}
	default:
	}
}

// suspendLocked records a suspension until until and tells the waiting
// senders.
func (k *keyState) suspendLocked(until time.Time, reason string) {
	if until.After(k.until) {
		k.until, k.reason = until, reason
	}
	select {
	case <-k.suspended:
	default:
		close(k.suspended)
	}
}

// SuspendedUntil returns the end of id's suspension (zero when not
// suspended) and its reason, reading the marks.
func (g *Guard) SuspendedUntil(ctx context.Context, id string) (time.Time, string) {
	return g.admit(ctx, id)
}

// admit returns the end of id's suspension (zero when not suspended) and
// its reason. The key's lock is not held across the marks read.
func (g *Guard) admit(ctx context.Context, id string) (time.Time, string) {
	k := g.key(id)
	now := g.clock.Now()
	k.mu.Lock()
	k.resumeLocked(now)
	if now.Before(k.until) && !g.marks.Shared() {
		defer k.mu.Unlock()
		return k.until, k.reason
	}
	epoch := k.epoch
	k.mu.Unlock()
	m, ok, err := g.marks.Get(ctx, id, markSuspend)
	k.mu.Lock()
	defer k.mu.Unlock()
	switch {
	case err != nil:
		g.readFailed("suspension", id, err)
	case k.epoch != epoch:
		// An administrator suspended or resumed the key during the
		// read: that stands.
	case ok && now.Before(m.Expires):
		k.suspendLocked(m.Expires, suspendReason(m))
	case now.Before(k.until):
		// Resumed on another daemon sharing the marks.
		k.resumeNowLocked()
	}
	if now.Before(k.until) {
		return k.until, k.reason
	}
	return time.Time{}, ""
}

// watch returns a channel closed when id is suspended, and a function to
// call when the sender is gone. With shared marks, a poller reads them
// while anyone watches.
func (g *Guard) watch(id string) (<-chan struct{}, func()) {
	k := g.key(id)
	k.mu.Lock()
	defer k.mu.Unlock()
	k.resumeLocked(g.clock.Now())
	k.watchers++
	if g.marks.Shared() && !k.polling {
		k.polling = true
		go g.poll(id, k)
	}
	return k.suspended, func() {
		k.mu.Lock()
		k.watchers--
		k.mu.Unlock()
	}
}

// poll reads the shared suspension of id for as long as senders watch
// it; it ends with the last of them.
func (g *Guard) poll(id string, k *keyState) {
	t := time.NewTicker(sharedPoll)
	defer t.Stop()
	for range t.C {
		if !g.pollOnce(id, k) {
			return
		}
	}
}

// pollOnce reads id's shared suspension once and applies it, unless an
// administrator suspended or resumed the key during the read (a resume
// must not be undone by a mark read before it). It says whether to poll
// on: false once nobody watches.
func (g *Guard) pollOnce(id string, k *keyState) bool {
	k.mu.Lock()
	if k.watchers == 0 {
		k.polling = false
		k.mu.Unlock()
		return false
	}
	epoch := k.epoch
	k.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), sharedPoll)
	m, ok, err := g.marks.Get(ctx, id, markSuspend)
	cancel()
	if err == nil && ok && g.clock.Now().Before(m.Expires) {
		k.mu.Lock()
		if k.epoch == epoch {
			k.suspendLocked(m.Expires, suspendReason(m))
		}
		k.mu.Unlock()
	}
	return true
}

// revoked is the deferral of a sender of id whose key was suspended
// while it waited or sent.
func (g *Guard) revoked(id string) *Deferral {
	k := g.key(id)
	k.mu.Lock()
	until, reason := k.until, k.reason
	k.mu.Unlock()
	return g.deferral(id, until, reason)
}

// Result is what one send's result says about the relay, as the front
// end read it from the sender's report.
type Result struct {
	// Delivered: the relay took the message (for some recipient).
	Delivered bool
	// Failed: the relay took nothing, and not for a recipient's own
	// reason. Consecutive failures count toward a ban.
	Failed bool
	// Ban: a permanent failure matched a ban sign.
	Ban bool
	// Slow: a temporary failure matched a ban sign (a throttling answer).
	Slow bool
	// Sign is the sign that matched.
	Sign string
}

// Judge reads a trusted send's result for id: counts it, starts a ban,
// adapts the limit, and says whether the key is suspended now (the
// sender's failures are then reported as temporary). A sign of a ban
// suspends the key or lowers its limit only once corroborated
// (corroborated); the sender's own failure is made temporary at once.
func (g *Guard) Judge(ctx context.Context, id string, bp *Policy, j Result) bool {
	k := g.key(id)
	k.mu.Lock()
	defer k.mu.Unlock()
	now := g.clock.Now()
	k.resumeLocked(now)
	if bp.Adapt {
		g.refreshLearnedLocked(ctx, id, k)
	}
	switch {
	case j.Delivered:
		k.failures = 0
		k.delivered = append(k.delivered, now)
		k.trimDelivered(now, bp)
		if bp.Adapt {
			g.raiseLocked(ctx, id, bp, k, now)
		}
	case j.Failed:
		k.failures++
		k.trouble = now
	}
	if j.Ban || j.Slow {
		k.trouble = now
	}
	suspended := now.Before(k.until)
	switch {
	case suspended:
		// A send under way when the ban began: it says nothing new.
	case j.Ban || bp.After > 0 && k.failures >= bp.After:
		why := fmt.Sprintf("%d failed sends in a row", k.failures)
		if j.Ban {
			why = fmt.Sprintf("the relay's answer matched the ban sign %q", j.Sign)
		}
		// ban_after failures in a row are distinct sends already.
		if (!j.Ban && bp.After >= bp.Corroborate) || g.corroborated(ctx, id, bp, k, now, why) {
			k.failures = 0
			g.banLocked(ctx, id, bp, k, now, why)
		}
	case j.Slow && bp.Adapt && !now.Before(k.learnedAt.Add(bp.Period)):
		why := fmt.Sprintf("throttling answer matching %q", j.Sign)
		if g.corroborated(ctx, id, bp, k, now, why) {
			g.lowerLocked(ctx, id, bp, k, now, why)
		}
	}
	return now.Before(k.until)
}

// SuspendedHere says whether id is suspended as this daemon knows it,
// without a marks read: what a report from a peer not trusted to steer
// the key is judged by, with nothing counted, suspended or learned.
func (g *Guard) SuspendedHere(id string) bool {
	k := g.key(id)
	k.mu.Lock()
	defer k.mu.Unlock()
	return g.clock.Now().Before(k.until)
}

func (k *keyState) trimDelivered(now time.Time, bp *Policy) {
	i := 0
	for i < len(k.delivered) && now.Sub(k.delivered[i]) > bp.Period {
		i++
	}
	k.delivered = k.delivered[i:]
	if n := len(k.delivered); int64(n) > bp.Limit {
		k.delivered = k.delivered[n-int(bp.Limit):]
	}
}

// banLocked suspends id, unless it is already: the cool-off doubles for
// each ban within max_cool_off of the last one's end.
func (g *Guard) banLocked(ctx context.Context, id string, bp *Policy, k *keyState, now time.Time, why string) {
	if now.Before(k.until) {
		return // the ban already on
	}
	streak := int64(1)
	if m, ok, err := g.marks.Get(ctx, id, markBans); err == nil && ok {
		streak = m.Value + 1
	}
	cool := bp.CoolOff
	for i := int64(1); i < streak && cool < bp.MaxCoolOff; i++ {
		cool *= 2
	}
	cool = min(cool, bp.MaxCoolOff)
	until := now.Add(cool)
	added, err := g.marks.Add(ctx, id, markSuspend, limiter.Mark{Value: streak, Since: now, Expires: until})
	if err != nil {
		g.log.Error("throttle: recording the key's suspension failed; suspended on this daemon only", "key", id, "err", err)
		added = true
	}
	if !added { // another daemon got there first
		if m, ok, err := g.marks.Get(ctx, id, markSuspend); err == nil && ok {
			k.suspendLocked(m.Expires, reasonBan)
		}
		return
	}
	if err := g.marks.Put(ctx, id, markBans, limiter.Mark{Value: streak, Since: now, Expires: until.Add(bp.MaxCoolOff)}); err != nil {
		g.log.Warn("throttle: recording the ban streak failed", "key", id, "err", err)
	}
	k.suspendLocked(until, reasonBan+" ("+why+")")
	g.log.Warn("throttle: relay ban; key suspended", "key", id, "until", until.UTC().Format(time.RFC3339Nano), "cool_off", cool.String(), "ban", streak, "why", why)
	k.trimDelivered(now, bp)
	if bp.Adapt && len(k.delivered) > 0 {
		// Nothing delivered in the last period (a ban again right after
		// a cool-off): the relay's ban is still on, the rate says nothing.
		g.lowerLocked(ctx, id, bp, k, now, why)
	}
}

// States lists the keys with a mark: suspended, in a ban streak, or at a
// learned limit, with their policy's configured limit.
func (g *Guard) States(ctx context.Context) ([]status.ThrottleKey, error) {
	list, err := g.marks.List(ctx)
	if err != nil {
		return nil, err
	}
	now := g.clock.Now()
	var out []status.ThrottleKey
	for _, m := range list {
		if strings.HasPrefix(m.Name, markSign) {
			continue // not yet a decision
		}
		if len(out) == 0 || out[len(out)-1].Key != m.Key {
			out = append(out, status.ThrottleKey{Key: m.Key})
			name, _, _ := strings.Cut(m.Key, " ")
			if bp := g.Policy(name); bp != nil {
				out[len(out)-1].Configured, out[len(out)-1].Period = bp.Limit, bp.Shown
			}
		}
		k := &out[len(out)-1]
		switch m.Name {
		case markSuspend:
			if now.Before(m.Expires) {
				k.SuspendedUntil = m.Expires
			}
		case markBans:
			k.Bans = m.Value
		case markLimit:
			k.Limit = m.Value
		}
	}
	return out, nil
}
