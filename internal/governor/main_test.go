package governor

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test or benchmark leaves a goroutine
// behind (a store's sweeper whose cleanup never ran, for one).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
