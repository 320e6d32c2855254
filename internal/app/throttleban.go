package app

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"sluice/internal/config"
	"sluice/internal/limiter"
	"sluice/internal/rules"
	"sluice/internal/status"
	"sluice/internal/throttle"
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

// banGuard reads the results of sends and acts on bans: a key whose relay
// banned it is suspended for a cool-off (its waiting senders defer at
// once, new ones too), the permanent failures the ban caused are reported
// as temporary, and with adapt the key's limit is learned. What must
// outlive the daemon or be shared (suspension, streak, learned limit)
// are marks; consecutive failures and recent deliveries are this daemon's.
type banGuard struct {
	marks limiter.Marks
	log   *slog.Logger
	now   func() time.Time

	mu   sync.Mutex
	keys map[string]*banKey
	cfg  *config.Config
	pols map[string]*banPolicy
	// readWarned is when readFailed last logged; readErrs counts since
	// (under warnMu: readFailed is called with a key's lock held).
	warnMu     sync.Mutex
	readWarned time.Time
	readErrs   int

	// adminMu orders an administrator's suspensions and resumes (held
	// across their marks calls; no sender waits on it).
	adminMu sync.Mutex
	// susp is the snapshot of suspended keys (throttlesuspend.go);
	// suspGen, under suspMu, counts this daemon's changes to it.
	susp    atomic.Pointer[suspendSet]
	suspMu  sync.Mutex
	suspGen uint64
}

// banPolicy is a policy's ban settings with what the guard derives.
type banPolicy struct {
	config.BanSpec
	name   string
	signs  throttle.Signs
	limit  int64         // the configured limit's N
	period time.Duration // the configured period plus the margin
	shown  string        // the configured period as the configuration writes it
}

// banKey is one key's local state.
type banKey struct {
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

func newBanGuard(marks limiter.Marks, log *slog.Logger) *banGuard {
	g := &banGuard{marks: boundedMarks{marks}, log: log, now: time.Now, keys: map[string]*banKey{}}
	g.susp.Store(newSuspendSet(map[string]suspension{}))
	return g
}

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
func (g *banGuard) readFailed(what, id string, err error) {
	now := g.now()
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

// policy returns the ban settings of the named policy in cfg, nil when it
// reads no results.
func (g *banGuard) policy(cfg *config.Config, name string) *banPolicy {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cfg != cfg {
		g.cfg, g.pols = cfg, map[string]*banPolicy{}
		specs, _ := cfg.ThrottlePolicies()
		for _, s := range specs {
			if s.Ban.On() {
				g.pols[s.Name] = &banPolicy{BanSpec: s.Ban, name: s.Name, signs: throttle.NewSigns(s.Ban.Signs), limit: s.Limit.N, period: s.Limit.Period + s.Margin, shown: rules.FormatPeriod(s.Limit.Period)}
			}
		}
	}
	return g.pols[name]
}

func (g *banGuard) key(id string) *banKey {
	g.mu.Lock()
	defer g.mu.Unlock()
	k := g.keys[id]
	now := g.now()
	if k == nil {
		if len(g.keys) >= 4096 {
			g.prune(now)
		}
		k = &banKey{suspended: make(chan struct{})}
		g.keys[id] = k
	}
	k.used = now
	return k
}

// prune forgets keys idle for an hour with nobody waiting (their marks
// stay in the marks store). A key whose lock is held is in use: it is
// skipped, not waited for (g.mu is held).
func (g *banGuard) prune(now time.Time) {
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
func (k *banKey) resumeNowLocked() {
	k.until, k.reason = time.Time{}, ""
	select {
	case <-k.suspended:
		k.suspended = make(chan struct{})
	default:
	}
}

// suspendReason is why a suspension mark was set: a value below zero is
// an administrator's, else the relay's ban (the value is the ban streak).
func suspendReason(m limiter.Mark) string {
	if m.Value < 0 {
		return "suspended by an administrator"
	}
	return "the relay banned it"
}

// suspend suspends id until until, for an administrator: its waiting
// senders defer at once, and new ones until then or a resume; with
// shared marks every daemon's senders do.
func (g *banGuard) suspend(ctx context.Context, id string, until time.Time) error {
	g.adminMu.Lock()
	defer g.adminMu.Unlock()
	const why = "suspended by an administrator"
	if err := g.marks.Put(ctx, id, markSuspend, limiter.Mark{Value: -1, Since: g.now(), Expires: until}); err != nil {
		return fmt.Errorf("suspend %s: %w", id, err)
	}
	k := g.key(id)
	k.mu.Lock()
	k.epoch++
	k.until = time.Time{}
	k.suspendLocked(until, why)
	k.mu.Unlock()
	g.setSuspended(id, until, why)
	return nil
}

// resume ends id's suspension, whoever set it, and says whether it was
// suspended.
func (g *banGuard) resume(ctx context.Context, id string) (bool, error) {
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
	now := g.now()
	was := (ok && now.Before(m.Expires)) || now.Before(k.until)
	k.epoch++
	k.resumeNowLocked()
	k.mu.Unlock()
	g.setSuspended(id, time.Time{}, "")
	return was, nil
}

// resumeLocked starts a new suspension channel once the last suspension
// is over.
func (k *banKey) resumeLocked(now time.Time) {
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
func (k *banKey) suspendLocked(until time.Time, reason string) {
	if until.After(k.until) {
		k.until, k.reason = until, reason
	}
	select {
	case <-k.suspended:
	default:
		close(k.suspended)
	}
}

// admit returns the end of id's suspension (zero when not suspended) and
// its reason. The key's lock is not held across the marks read.
func (g *banGuard) admit(ctx context.Context, id string) (time.Time, string) {
	k := g.key(id)
	now := g.now()
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
func (g *banGuard) watch(id string) (<-chan struct{}, func()) {
	k := g.key(id)
	k.mu.Lock()
	defer k.mu.Unlock()
	k.resumeLocked(g.now())
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
func (g *banGuard) poll(id string, k *banKey) {
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
func (g *banGuard) pollOnce(id string, k *banKey) bool {
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
	if err == nil && ok && g.now().Before(m.Expires) {
		k.mu.Lock()
		if k.epoch == epoch {
			k.suspendLocked(m.Expires, suspendReason(m))
		}
		k.mu.Unlock()
	}
	return true
}

// revokeReason is what a sender told to defer hears.
func (g *banGuard) revokeReason(id string) string {
	k := g.key(id)
	k.mu.Lock()
	defer k.mu.Unlock()
	return suspendedText(id, k.until, k.reason)
}

func suspendedText(id string, until time.Time, reason string) string {
	return fmt.Sprintf("%s is suspended until %s: %s", id, until.UTC().Format(time.RFC3339), reason)
}

// judge reads a trusted send's result for id: counts it, starts a ban,
// adapts the limit, and returns the verdict flags for the sender. A sign
// of a ban suspends the key or lowers its limit only once corroborated
// (corroborated); the sender's own failure is made temporary at once.
func (g *banGuard) judge(ctx context.Context, id string, bp *banPolicy, lines []throttle.ResultLine) string {
	j := throttle.Judge(lines, bp.signs)
	k := g.key(id)
	k.mu.Lock()
	defer k.mu.Unlock()
	now := g.now()
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
	case j.Slow && bp.Adapt && !now.Before(k.learnedAt.Add(bp.period)):
		why := fmt.Sprintf("throttling answer matching %q", j.Sign)
		if g.corroborated(ctx, id, bp, k, now, why) {
			g.lowerLocked(ctx, id, bp, k, now, why)
		}
	}
	return throttle.Verdict(lines, bp.signs, now.Before(k.until))
}

// untrusted returns the verdict for a report from a peer not trusted to
// steer the key: its own lines as judge would rewrite them, with nothing
// counted, suspended or learned.
func (g *banGuard) untrusted(id string, bp *banPolicy, lines []throttle.ResultLine) string {
	k := g.key(id)
	k.mu.Lock()
	suspended := g.now().Before(k.until)
	k.mu.Unlock()
	return throttle.Verdict(lines, bp.signs, suspended)
}

func (k *banKey) trimDelivered(now time.Time, bp *banPolicy) {
	i := 0
	for i < len(k.delivered) && now.Sub(k.delivered[i]) > bp.period {
		i++
	}
	k.delivered = k.delivered[i:]
	if n := len(k.delivered); int64(n) > bp.limit {
		k.delivered = k.delivered[n-int(bp.limit):]
	}
}

// banLocked suspends id, unless it is already: the cool-off doubles for
// each ban within max_cool_off of the last one's end.
func (g *banGuard) banLocked(ctx context.Context, id string, bp *banPolicy, k *banKey, now time.Time, why string) {
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
			k.suspendLocked(m.Expires, "the relay banned it")
		}
		return
	}
	if err := g.marks.Put(ctx, id, markBans, limiter.Mark{Value: streak, Since: now, Expires: until.Add(bp.MaxCoolOff)}); err != nil {
		g.log.Warn("throttle: recording the ban streak failed", "key", id, "err", err)
	}
	k.suspendLocked(until, "the relay banned it ("+why+")")
	g.log.Warn("throttle: relay ban; key suspended", "key", id, "until", until.UTC().Format(time.RFC3339Nano), "cool_off", cool.String(), "ban", streak, "why", why)
	k.trimDelivered(now, bp)
	if bp.Adapt && len(k.delivered) > 0 {
		// Nothing delivered in the last period (a ban again right after
		// a cool-off): the relay's ban is still on, the rate says nothing.
		g.lowerLocked(ctx, id, bp, k, now, why)
	}
}

// states lists the keys with a mark: suspended, in a ban streak, or at a
// learned limit, with their policy's configured limit.
func (g *banGuard) states(ctx context.Context, cfg *config.Config) ([]status.ThrottleKey, error) {
	list, err := g.marks.List(ctx)
	if err != nil {
		return nil, err
	}
	now := g.now()
	var out []status.ThrottleKey
	for _, m := range list {
		if strings.HasPrefix(m.Name, markSign) {
			continue // not yet a decision
		}
		if len(out) == 0 || out[len(out)-1].Key != m.Key {
			out = append(out, status.ThrottleKey{Key: m.Key})
			name, _, _ := strings.Cut(m.Key, " ")
			if bp := g.policy(cfg, name); bp != nil {
				out[len(out)-1].Configured, out[len(out)-1].Period = bp.limit, bp.shown
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
