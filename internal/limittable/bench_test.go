package limittable

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"sluice/internal/testutil/cputime"
)

// BenchmarkReadFile reads tables of 10^4, 10^5 and 10^6 lines (a
// provider's customers, five distinct quotas, one in 50 exempt) from a
// file, as a reload does. Besides -benchmem's allocations per load it
// reports what one loaded table keeps on the heap (retained-B) and the
// file's size, and the CPU time per load (proc-cpu-ns/op: the machine
// is shared, so wall time says little).
//
//	go test -run XX -bench ReadFile -benchmem ./internal/limittable/
func BenchmarkReadFile(b *testing.B) {
	for _, n := range []int{10_000, 100_000, 1_000_000} {
		b.Run(fmt.Sprintf("lines=%d", n), func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "customers")
			size := writeTable(b, path, n)
			b.ReportAllocs()
			b.ResetTimer()
			cpu := cputime.Now()
			var tab *Table
			for range b.N {
				var errs []error
				tab, errs = ReadFile(path, nil)
				if len(errs) > 0 {
					b.Fatal(errs)
				}
			}
			cputime.Report(b, cpu)
			b.StopTimer()
			if tab.Len() != n {
				b.Fatalf("%d entries", tab.Len())
			}
			b.ReportMetric(float64(retained(func() any { t, _ := ReadFile(path, nil); return t })), "retained-B")
			b.ReportMetric(float64(size), "file-B")
		})
	}
}

// retained is the heap that the value load returns keeps alive.
func retained(load func() any) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	v := load()
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(v)
	if after.HeapAlloc < before.HeapAlloc {
		return 0
	}
	return after.HeapAlloc - before.HeapAlloc
}

func writeTable(tb testing.TB, path string, n int) int64 {
	tb.Helper()
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	w := bufio.NewWriter(f)
	quotas := []string{"20/1h", "50/1h", "100/1h exact, 1000/1d", "500/1h smooth burst=50", "5/10m"}
	fmt.Fprintln(w, "# customer             quota")
	for i := range n {
		v := quotas[i%len(quotas)]
		if i%50 == 0 {
			v = Exempt
		}
		fmt.Fprintf(w, "customer%07d@example%d.com  %s\n", i, i%1000, v)
	}
	if err := w.Flush(); err != nil {
		tb.Fatal(err)
	}
	st, err := f.Stat()
	if err != nil {
		tb.Fatal(err)
	}
	f.Close()
	return st.Size()
}
