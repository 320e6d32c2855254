package redis

import (
	"fmt"
	"testing"

	"sluice/internal/limiter"
	"sluice/internal/store/storetest"
)

// TestExactnessUnderConcurrency: every limit kind admits exactly its
// limit when 1, 8 or 64 goroutines hit one key at once through two
// stores sharing one Redis, as two daemons would (see
// storetest.Exactness). Concurrency leases and reservations are held to
// the same in the conformance suite (LeasesConcurrent,
// ReserveConcurrentExact).
func TestExactnessUnderConcurrency(t *testing.T) {
	srv := needServer(t)
	o := Options{KeyPrefix: fmt.Sprintf("ex%d:", prefixSeq.Add(1)), UseCallerTime: true}
	stores := []limiter.Store{newTestStore(t, srv, o), newTestStore(t, srv, o)}
	storetest.Exactness(t, "redis", stores, storetest.T0)
}
