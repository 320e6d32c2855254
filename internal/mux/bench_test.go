package mux_test

import (
	"sluice/internal/testutil/cputime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// The hot paths of bench/mux.sh, one new connection per request as the
// milter makes them: a command forwarded to a (fake) worker, and one the
// multiplexor answers itself. The server runs in the test process, so
// proc-cpu-ns/op (internal/testutil/cputime) is the CPU of the server and
// of the benchmark's clients together (their dial, write, read and
// close), not the multiplexor's alone: bench/mux.sh measures that, with
// the server in a process of its own.

func benchSettings() settings {
	return settings{min: 8, max: 8, queue: 128, busy: 30, queueTime: 30, slew: time.Millisecond}
}

// waitIdle waits until tg's first n slots have their workers up and idle
// (polling its status for 5 s).
func waitIdle(tb testing.TB, tg target, n int) {
	tb.Helper()
	for range 500 {
		if strings.HasPrefix(query(tb, tg.main, "status\n", false), strings.Repeat("I", n)) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	tb.Fatalf("%s: workers not idle", tg.name)
}

func benchConn(b *testing.B, req, prefix string, parallel bool) {
	tg := startSluice(b, benchSettings())
	waitIdle(b, tg, 8)
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cputime.Now()
	defer cputime.Report(b, cpu)
	if !parallel {
		for b.Loop() {
			if r := query(b, tg.main, req, false); !strings.HasPrefix(r, prefix) {
				b.Fatalf("reply %q", r)
			}
		}
		return
	}
	var bad atomic.Value
	b.SetParallelism(8) // 8 clients per CPU, as the milter's many connections
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if r := query(b, tg.main, req, false); !strings.HasPrefix(r, prefix) {
				bad.Store(r)
			}
		}
	})
	if r := bad.Load(); r != nil {
		b.Fatalf("reply %q", r)
	}
}

// BenchmarkForwarded: relayok through the pool to a worker and back.
func BenchmarkForwarded(b *testing.B) {
	benchConn(b, "relayok 192.0.2.1 host.example 25 127.0.0.1 25 NOQUEUE\n", "ok 1 ", false)
}

// BenchmarkForwardedParallel: the same with concurrent clients.
func BenchmarkForwardedParallel(b *testing.B) {
	benchConn(b, "relayok 192.0.2.1 host.example 25 127.0.0.1 25 NOQUEUE\n", "ok 1 ", true)
}

// BenchmarkBuiltinFree: `free`, which the milter sends on every SMTP
// connection.
func BenchmarkBuiltinFree(b *testing.B) {
	benchConn(b, "free\n", "8\n", false)
}

// BenchmarkBuiltinStatus: `status`.
func BenchmarkBuiltinStatus(b *testing.B) {
	benchConn(b, "status\n", "IIIIIIII ", false)
}
