package redis

// Healthy reports whether the last exchange with Redis succeeded.
func (s *Store) Healthy() bool { return s.healthy.Load() }

// Errors returns how many calls have failed (bad requests aside).
func (s *Store) Errors() uint64 { return s.errs.Load() }
