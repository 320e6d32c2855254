// Package cputime reports a benchmark's own CPU time per operation: the
// user and system time of every thread of the test process (not of its
// children, such as worker processes), read with getrusage. On a shared
// machine it moves far less with the other load than ns/op does, which
// counts the time spent waiting for a core.
package cputime

import (
	"syscall"
	"testing"
	"time"
)

// Now is the process's CPU time so far (user plus system).
func Now() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Report adds the metric cpu-ns/op: the CPU time since start (a Now taken
// before the benchmark's loop) over b.N.
func Report(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(Now()-start)/float64(b.N), "cpu-ns/op")
}
