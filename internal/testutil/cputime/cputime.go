// Package cputime reports the CPU time per operation of the whole test
// process: the user and system time of every thread of it (not of its
// children, such as worker processes), read with getrusage(RUSAGE_SELF).
// That is the code under test and the benchmark's own client goroutines
// together: a server run in the test process cannot be told apart from
// its clients there (goroutines move between threads), so the metric is
// named proc-cpu-ns/op for what it includes. On a shared machine it moves
// far less with the other load than ns/op does, which counts the time
// spent waiting for a core.
package cputime

import (
	"syscall"
	"testing"
	"time"
)

// Metric is the unit Report gives: the test process's CPU time, code
// under test and benchmark clients alike, per operation.
const Metric = "proc-cpu-ns/op"

// Now is the process's CPU time so far (user plus system).
func Now() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Report adds the metric proc-cpu-ns/op (Metric): the process's CPU time
// since start (a Now taken before the benchmark's loop) over b.N.
func Report(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(Now()-start)/float64(b.N), Metric)
}
