package ban

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"sluice/internal/limiter"
)

// What the ban guard learns of a key: its learned limit (lowered by a
// corroborated sign of a ban, raised back by clean sending, forgotten by
// an administrator's reset) and the signs of a ban that corroborate one
// another (guard.go reads the results and suspends).

// raiseSteps is how many clean adapt_windows bring any learned limit
// back to the configured one: each raises it by that share of it.
const raiseSteps = 8

// learnedTTL is how long a learned limit is kept after its last change.
const learnedTTL = 30 * 24 * time.Hour

// Limit is id's limit in force: the learned one, if lower than configured.
func (g *Guard) Limit(ctx context.Context, id string, bp *Policy) int64 {
	if !bp.Adapt {
		return bp.Limit
	}
	k := g.key(id)
	k.mu.Lock()
	defer k.mu.Unlock()
	g.refreshLearnedLocked(ctx, id, k)
	if k.learned > 0 && k.learned < bp.Limit {
		return k.learned
	}
	return bp.Limit
}

// refreshLearnedLocked reads the learned limit from the marks: once for
// marks of this daemon's own, every second for shared ones.
func (g *Guard) refreshLearnedLocked(ctx context.Context, id string, k *keyState) {
	now := g.clock.Now()
	if !k.learnedChk.IsZero() && (!g.marks.Shared() || now.Sub(k.learnedChk) < time.Second) {
		return
	}
	k.learnedChk = now
	m, ok, err := g.marks.Get(ctx, id, markLimit)
	switch {
	case err != nil:
		g.readFailed("learned limit", id, err)
	case ok:
		k.learned, k.learnedAt = m.Value, m.Since
	default:
		k.learned, k.learnedAt = 0, time.Time{}
	}
}

// corroborated records a sign of a ban from one send for id and says
// whether bp.Corroborate distinct sends (on any daemon sharing the
// marks) have shown one within bp.CorroborateWindow; when they have, the
// record starts afresh. Each send takes a numbered sign mark that is
// free (Add: two daemons never take the same one), so the count is exact
// across daemons. While the marks cannot be written (Redis down), this
// daemon's own signs are counted instead. k's lock is held.
func (g *Guard) corroborated(ctx context.Context, id string, bp *Policy, k *keyState, now time.Time, why string) bool {
	n := bp.Corroborate
	if n <= 1 {
		return true
	}
	mark := limiter.Mark{Value: 1, Since: now, Expires: now.Add(bp.CorroborateWindow)}
	took, held := -1, 0
	for i := 1; i <= n; i++ {
		name := signMark(i)
		if took < 0 {
			added, err := g.marks.Add(ctx, id, name, mark)
			if err != nil {
				g.log.Warn("throttle: recording a sign of a ban failed; counting this daemon's signs alone", "key", id, "err", err)
				return k.localSign(now, bp)
			}
			if added {
				took, held = i, held+1
				continue
			}
		}
		if _, ok, err := g.marks.Get(ctx, id, name); err == nil && ok {
			held++
		}
	}
	if held < n {
		g.log.Info("throttle: a sign of a ban, not yet corroborated", "key", id, "signs", held, "needed", n, "within", bp.CorroborateWindow.String(), "why", why)
		return false
	}
	g.clearSigns(ctx, id, n)
	return true
}

// localSign counts a sign of a ban in k alone (the marks failing) and
// says whether bp.Corroborate of them fell within the window.
func (k *keyState) localSign(now time.Time, bp *Policy) bool {
	i := 0
	for i < len(k.signs) && now.Sub(k.signs[i]) >= bp.CorroborateWindow {
		i++
	}
	k.signs = append(k.signs[i:], now)
	if len(k.signs) < bp.Corroborate {
		return false
	}
	k.signs = nil
	return true
}

// clearSigns deletes id's first n sign marks.
func (g *Guard) clearSigns(ctx context.Context, id string, n int) {
	for i := 1; i <= n; i++ {
		if err := g.marks.Delete(ctx, id, signMark(i)); err != nil {
			g.log.Warn("throttle: clearing the signs of a ban failed", "key", id, "err", err)
			return
		}
	}
}

// signMark names the i-th sign of a ban a key holds.
func signMark(i int) string { return markSign + strconv.Itoa(i) }

// lowerLocked halves id's limit in force (the learned one, or the
// configured): one event never lowers it by more.
func (g *Guard) lowerLocked(ctx context.Context, id string, bp *Policy, k *keyState, now time.Time, why string) {
	cur := bp.Limit
	if k.learned > 0 && k.learned < cur {
		cur = k.learned
	}
	next := max(cur/2, 1)
	if err := g.marks.Put(ctx, id, markLimit, limiter.Mark{Value: next, Since: now, Expires: now.Add(learnedTTL)}); err != nil {
		g.log.Warn("throttle: recording the learned limit failed", "key", id, "err", err)
	}
	k.learned, k.learnedAt, k.learnedChk = next, now, now
	g.log.Warn("throttle: limit lowered", "key", id, "limit", next, "was", cur, "per", bp.Period.String(), "why", why)
}

// raiseLocked raises a learned limit by an eighth of the configured one
// (at least one) after each adapt_window of clean sends; at the
// configured limit the mark goes. From any learned limit the configured
// one is back within raiseSteps windows of clean sending.
func (g *Guard) raiseLocked(ctx context.Context, id string, bp *Policy, k *keyState, now time.Time) {
	// A window of clean sends: none during a suspension.
	if k.learned <= 0 || now.Sub(k.learnedAt) < bp.AdaptWindow || now.Sub(k.trouble) < bp.AdaptWindow || now.Sub(k.until) < bp.AdaptWindow {
		return
	}
	next := k.learned + max(1, (bp.Limit+raiseSteps-1)/raiseSteps)
	var err error
	if next >= bp.Limit {
		next = 0
		err = g.marks.Delete(ctx, id, markLimit)
	} else {
		err = g.marks.Put(ctx, id, markLimit, limiter.Mark{Value: next, Since: now, Expires: now.Add(learnedTTL)})
	}
	if err != nil {
		g.log.Warn("throttle: recording the learned limit failed", "key", id, "err", err)
		return
	}
	k.learned, k.learnedAt, k.learnedChk = next, now, now
	shown := next
	if next == 0 {
		shown = bp.Limit
	}
	g.log.Info("throttle: limit raised", "key", id, "limit", shown, "configured", bp.Limit)
}

// Reset forgets id's learned limit, ban streak and signs of a ban (an
// administrator's word: the relay's limit is the configured one again),
// on every daemon sharing the marks. A suspension stays: resume ends it.
func (g *Guard) Reset(ctx context.Context, id string) (learned, bans int64, err error) {
	g.adminMu.Lock()
	defer g.adminMu.Unlock()
	// Under the key's lock, as judge changes the marks: a result judged
	// meanwhile cannot write a lowered limit after the reset.
	k := g.key(id)
	k.mu.Lock()
	defer k.mu.Unlock()
	if m, ok, err := g.marks.Get(ctx, id, markLimit); err == nil && ok {
		learned = m.Value
	}
	if m, ok, err := g.marks.Get(ctx, id, markBans); err == nil && ok {
		bans = m.Value
	}
	for _, name := range []string{markLimit, markBans} {
		if err := g.marks.Delete(ctx, id, name); err != nil {
			return 0, 0, fmt.Errorf("reset %s: %w", id, err)
		}
	}
	g.clearSigns(ctx, id, int(g.maxCorroborate.Load()))
	k.learned, k.learnedAt, k.learnedChk = 0, time.Time{}, time.Time{}
	k.failures, k.delivered, k.trouble, k.signs = 0, nil, time.Time{}, nil
	g.log.Warn("throttle: learned limit and ban streak reset", "key", id, "learned_limit", learned, "bans", bans)
	return learned, bans, nil
}
