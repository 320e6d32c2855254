package memory

import (
	"fmt"
	"testing"

	"sluice/internal/limiter"
	"sluice/internal/store/storetest"
)

// TestExactnessUnderConcurrency: every limit kind admits exactly its
// limit when 1, 8 or 64 goroutines hit one key at once (see
// storetest.Exactness). Concurrency leases and reservations are held to
// the same in the conformance suite (LeasesConcurrent,
// ReserveConcurrentExact).
func TestExactnessUnderConcurrency(t *testing.T) {
	for _, shards := range []int{0, 1} {
		s := New(Options{Shards: shards})
		defer s.Close()
		storetest.Exactness(t, fmt.Sprintf("memory (shards=%d)", shards), []limiter.Store{s}, t0)
	}
}
