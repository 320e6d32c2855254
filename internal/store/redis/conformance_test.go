package redis

import (
	"testing"

	"sluice/internal/limiter"
	"sluice/internal/store/storetest"
)

// TestConformance holds the store to the suite every backend passes, on a
// real redis-server, with the suite's times (UseCallerTime).
func TestConformance(t *testing.T) {
	srv := needServer(t)
	storetest.Run(t, func(t *testing.T) limiter.Store {
		return newTestStore(t, srv, Options{UseCallerTime: true})
	})
}
