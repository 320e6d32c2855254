package config

import "time"

// Snapshot configures the file the in-memory store's counts are kept in
// across restarts (store.kind = "memory" only; Redis keeps its own).
type Snapshot struct {
	// Enabled writes the store's rate windows (anvil, exact and smooth, and
	// throttle bookings) to the file periodically and at a graceful stop, and
	// restores them at start, dropping what expired while sluice was down.
	// Throttle bookings are also appended to the file as they are made, so
	// a crash loses none. Concurrency counts (leases) are not kept: their
	// connections are gone.
	Enabled bool `toml:"enabled"`
	// File is the snapshot's path; a relative path is under state_dir.
	File string `toml:"file"`
	// Interval is how often the snapshot is written while running. After an
	// unclean stop (kill -9, OOM, power loss) what happened since the last
	// write is lost: at most this much.
	Interval Duration `toml:"interval"`
	// RestartGuard, after an unclean stop (or when the snapshot cannot be
	// read), holds every exact limit back for one period from the start (no
	// grant, throttle slots booked from then on), so the events lost with
	// the crash cannot let more than N through in any window. Anvil and
	// smooth limits are not held.
	RestartGuard bool `toml:"restart_guard"`
}

func defaultSnapshot() Snapshot {
	return Snapshot{Enabled: true, File: "store.snapshot", Interval: Duration(5 * time.Second)}
}

func (c *Config) validateSnapshot() []error {
	s := c.Store.Snapshot
	if !s.Enabled {
		return nil
	}
	var errs []error
	if s.File == "" {
		errs = append(errs, c.errAt("store.snapshot.file", "name the snapshot file (or set enabled = false)"))
	}
	if d := s.Interval.D(); d < 100*time.Millisecond || d > time.Hour {
		errs = append(errs, c.errAt("store.snapshot.interval", "must be between 100ms and 1h"))
	}
	return errs
}
