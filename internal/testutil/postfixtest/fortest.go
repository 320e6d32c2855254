package postfixtest

import (
	"context"
	"testing"
)

// StartTest is Start for a test: a failure to start ends the test, and
// the instance is stopped at the test's cleanup, with its maillog logged
// first if the test failed.
func StartTest(tb testing.TB, ctx context.Context, o Options) *Instance {
	tb.Helper()
	inst, err := Start(ctx, o)
	if err != nil {
		tb.Fatalf("start postfix: %v", err)
	}
	tb.Cleanup(func() {
		if tb.Failed() {
			if log, err := inst.Log(); err == nil {
				tb.Logf("postfix maillog:\n%s", log)
			}
		}
		if err := inst.Stop(); err != nil {
			tb.Errorf("stop postfix: %v", err)
		}
	})
	return inst
}
