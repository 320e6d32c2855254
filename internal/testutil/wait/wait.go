// Package wait is the tests' poll loop with a deadline: a condition
// that never comes true fails the test with what it waited for, instead
// of hanging until the test binary's timeout.
package wait

import (
	"fmt"
	"testing"
	"time"
)

// Timeout is how long For waits: far beyond any event the tests wait
// for on a loaded machine, short of go test's own timeout.
const Timeout = 10 * time.Second

// For polls cond every millisecond until it holds, and fails the test
// (t.Fatalf, from the test's goroutine) when it has not held within
// Timeout; what (formatted with args) names the awaited event.
func For(t testing.TB, cond func() bool, what string, args ...any) {
	t.Helper()
	for deadline := time.Now().Add(Timeout); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", Timeout, fmt.Sprintf(what, args...))
		}
	}
}
