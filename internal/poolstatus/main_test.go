package poolstatus

import (
	"os"
	"testing"

	"sluice/internal/pool"
	"sluice/internal/pool/pooltest"
)

// TestMain builds the fake worker the agreement test's pool runs.
func TestMain(m *testing.M) { os.Exit(pooltest.Main(m, &fakeWorker)) }

// startPool runs a pool of cfg until the test ends.
func startPool(t *testing.T, cfg pool.Config) *pool.Pool { return pooltest.Start(t, cfg) }

var fakeWorker string
