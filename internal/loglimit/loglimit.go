// Package loglimit is a slog.Handler that caps the lines written per
// second, so a flood (of refusals, of failing clients) cannot fill a disk
// or make journald drop the lines that matter. Lines over the ceiling are
// dropped and counted; one line then says how many were suppressed.
package loglimit

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"sluice/internal/clock"
)

// Handler passes records to its inner handler, at most PerSecond a
// second. Handlers made by WithAttrs and WithGroup share the budget.
type Handler struct {
	h slog.Handler
	s *state
}

type state struct {
	mu         sync.Mutex
	perSec     int
	base       slog.Handler // writes the suppression notices
	sec        int64        // the second (Unix) the budget is for
	n          int          // lines written in it
	suppressed int64        // lines dropped since the last notice
	since      time.Time    // the first of them
	timer      *time.Timer  // writes the notice if no line comes
	clk        clock.Clock
}

// New returns a Handler writing at most perSecond lines a second through h
// (perSecond <= 0: no ceiling). Close it to write a last notice.
func New(h slog.Handler, perSecond int) *Handler {
	return &Handler{h: h, s: &state{perSec: perSecond, base: h, clk: clock.Real{}}}
}

// Enabled implements slog.Handler.
func (h *Handler) Enabled(ctx context.Context, l slog.Level) bool { return h.h.Enabled(ctx, l) }

// WithAttrs implements slog.Handler.
func (h *Handler) WithAttrs(as []slog.Attr) slog.Handler {
	return &Handler{h: h.h.WithAttrs(as), s: h.s}
}

// WithGroup implements slog.Handler.
func (h *Handler) WithGroup(name string) slog.Handler {
	return &Handler{h: h.h.WithGroup(name), s: h.s}
}

// Handle implements slog.Handler.
func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	if h.s.perSec <= 0 {
		return h.h.Handle(ctx, r)
	}
	if !h.s.admit(ctx) {
		return nil
	}
	return h.h.Handle(ctx, r)
}

// admit spends one line of this second's budget, writing the notice of
// earlier suppressed lines first when a new second begins.
func (s *state) admit(ctx context.Context) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clk.Now()
	if sec := now.Unix(); sec != s.sec {
		s.sec, s.n = sec, 0
		s.notice(ctx, now)
	}
	if s.n >= s.perSec {
		if s.suppressed == 0 {
			s.since = now
		}
		s.suppressed++
		if s.timer == nil {
			// If no line comes to write it, the notice goes out by itself.
			s.timer = time.AfterFunc(time.Second, s.flush)
		}
		return false
	}
	s.n++
	return true
}

// notice writes how many lines were suppressed, if any (with s.mu held).
func (s *state) notice(ctx context.Context, now time.Time) {
	if s.suppressed == 0 {
		return
	}
	r := slog.NewRecord(now, slog.LevelWarn, fmt.Sprintf("log: %d lines suppressed in the last %s (ceiling: %d lines a second)",
		s.suppressed, now.Sub(s.since).Round(time.Millisecond), s.perSec), 0)
	r.AddAttrs(slog.Int64("suppressed", s.suppressed))
	s.base.Handle(ctx, r)
	s.suppressed = 0
}

func (s *state) flush() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.timer = nil
	s.notice(context.Background(), s.clk.Now())
}

// Close stops the notice timer and writes the last notice.
func (h *Handler) Close() {
	h.s.mu.Lock()
	if h.s.timer != nil {
		h.s.timer.Stop()
		h.s.timer = nil
	}
	h.s.mu.Unlock()
	h.s.flush()
}
