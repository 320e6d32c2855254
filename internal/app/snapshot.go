package app

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"time"

	"sluice/internal/config"
	"sluice/internal/limiter"
	"sluice/internal/store/memory"
)

// snapshotter keeps the memory store's counts in a file across restarts:
// restored when the daemon is built, written every interval while it runs
// and once more, marked clean, after the last decision of a graceful stop.
type snapshotter struct {
	mem      *memory.Store
	path     string
	interval time.Duration
	log      *slog.Logger
	failing  bool  // the last write failed (logged once per run of failures)
	limit    int64 // the largest store file read back
}

// newSnapshotter restores the store file into mem (which must be empty)
// and writes to it at once, unclean: a crash before the first periodic
// write must not find a clean mark from the previous stop. A file that
// cannot be read is refused whole with one log line, and the daemon
// starts empty. nil means snapshots are off (or the store is Redis).
func newSnapshotter(cfg *config.Config, store limiter.Store, log *slog.Logger) *snapshotter {
	mem, ok := store.(*memory.Store)
	sc := cfg.Store.Snapshot
	if !ok || cfg.Store.Kind != "memory" || !sc.Enabled {
		return nil
	}
	s := &snapshotter{mem: mem, path: cfg.StatePath(sc.File), interval: sc.Interval.D(), log: log, limit: memory.SnapshotLimit(cfg.Limiter.MaxKeys)}
	if n := memory.RemoveTemps(s.path); n > 0 {
		log.Info("store snapshot: removed temporary files of a write cut short", "files", n)
	}
	now := time.Now()
	st, err := mem.Restore(s.path, s.limit, now)
	switch {
	case errors.Is(err, os.ErrNotExist):
		log.Info("store snapshot: none yet; starting with empty counts", "file", s.path)
	case err != nil:
		log.Error("store snapshot refused; starting with empty counts", "file", s.path, "err", err)
		if sc.RestartGuard {
			// The counts existed but are lost: hold exact limits back.
			s.guard(now, "the snapshot could not be read")
		}
	default:
		s.restored(st, now, sc.RestartGuard)
	}
	s.write(now, false)
	return s
}

// restored logs what a restore read, and holds exact limits back after
// an unclean stop when the guard is on.
func (s *snapshotter) restored(st memory.SnapStats, now time.Time, guard bool) {
	s.log.Info("store snapshot restored", "file", s.path, "keys", st.Keys, "expired_while_down", st.Dropped,
		"age", now.Sub(st.Taken).Round(time.Millisecond).String(), "clean_stop", st.Clean)
	if st.Cut > 0 {
		s.log.Warn("store snapshot: the bytes after the last whole record are dropped (a write cut short)", "file", s.path, "bytes", st.Cut)
	}
	if st.Bookings > 0 {
		s.log.Info("store snapshot: throttle slots booked after the last write restored", "file", s.path, "bookings", st.Bookings)
	}
	if !st.Clean {
		lost := "what happened after " + st.Taken.Format(time.RFC3339Nano) + " (at most " + s.interval.String() + ") is lost"
		if guard {
			s.guard(now, lost)
		} else {
			s.log.Warn("store snapshot: the last stop was not clean; "+lost, "file", s.path)
		}
	}
}

func (s *snapshotter) guard(now time.Time, why string) {
	s.mem.SetRestartGuard(now)
	s.log.Warn("restart guard: the last stop was not clean; every exact limit grants nothing for one period from now",
		"reason", why, "since", now.Format(time.RFC3339Nano))
}

// run writes the snapshot every interval until ctx ends.
func (s *snapshotter) run(ctx context.Context) {
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			s.write(now, false)
		}
	}
}

// write writes one snapshot; a failure is logged at its first occurrence
// and the recovery once, not at every interval (each failure after the
// first at debug level).
func (s *snapshotter) write(now time.Time, clean bool) {
	st, err := s.mem.WriteSnapshot(s.path, now, clean)
	switch {
	case err != nil && !s.failing:
		s.failing = true
		s.log.Error("store snapshot: write failed; counts since the last good one would be lost in a crash", "file", s.path, "err", err)
	case err != nil:
		s.log.Debug("store snapshot: write failed again", "file", s.path, "err", err)
	case s.failing:
		s.failing = false
		s.log.Info("store snapshot: writing again", "file", s.path, "keys", st.Keys)
	case clean:
		s.log.Info("store snapshot written", "file", s.path, "keys", st.Keys, "bytes", st.Bytes, "took", st.Took.Round(time.Microsecond).String(), "longest_lock", st.MaxHold.String())
	default:
		s.log.Debug("store snapshot written", "file", s.path, "keys", st.Keys, "bytes", st.Bytes, "took", st.Took.Round(time.Microsecond).String(), "longest_lock", st.MaxHold.String())
	}
}
