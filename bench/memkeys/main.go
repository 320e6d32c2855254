// Command memkeys measures the memory store (internal/store/memory) at
// the store level: where its bytes go per key, and what its persistence
// costs. For each key count and algorithm it runs one child process (a
// clean heap each) that fills a store with that many keys, one limit and
// one hit each (a "10/1h exact" key then holds one event, a "10/1h smooth"
// key one bucket) and prints:
//
//	rss_per_key          growth of VmRSS over the empty store, per key,
//	                     after as many looks again at those keys, each
//	                     leaving 1 KiB of garbage as a decoded request
//	                     does (the collector's headroom included, as a
//	                     daemon under load has it)
//	rss_settled_per_key  the same once the garbage is collected and free
//	                     pages are given back to the system
//	heap_per_key         growth of the Go heap in use (HeapInuse), per key
//	fill_s               time to insert the keys
//
// and, with -persist, the snapshot's figures: a first (full) write, a
// write after an idle interval (nothing changed: the bytes it wrote), a
// write after 1,000 decisions, and a restore of the files into an empty
// store (read, decode, insert). With -idle D it then leaves the store
// idle for D, its sweeper running and a snapshot write every 5 s (the
// daemon's default interval), and prints the bytes written (wchar) and
// the CPU used (user + system) over that time.
//
//	go run ./bench/memkeys                       # 1e5 and 1e6 keys, both algorithms
//	go run ./bench/memkeys -keys 1e7 -persist    # one step further
//	go run ./bench/memkeys -child -n 1000000 -algo smooth -memprofile heap.out
//
// The keys look like the policy door's for a rule keyed on the sender
// (about 40 bytes). Figures are RSS of this process, not of sluice serve:
// bench/scale measures the daemon through its policy door.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"sluice/internal/limiter"
	"sluice/internal/store/memory"
)

func main() {
	child := flag.Bool("child", false, "measure one store in this process (-n, -algo)")
	n := flag.Int("n", 1_000_000, "keys (with -child)")
	algo := flag.String("algo", "exact", "exact or smooth (with -child)")
	keys := flag.String("keys", "1e5,1e6", "key counts, comma-separated")
	persist := flag.Bool("persist", false, "also measure the snapshot: write, idle write, restore")
	idle := flag.Duration("idle", 0, "with -persist: then stay idle this long, writing every 5s")
	memprofile := flag.String("memprofile", "", "write a heap profile after filling (with -child)")
	flag.Parse()
	if *child {
		if err := measure(*n, *algo, *persist, *idle, *memprofile); err != nil {
			fmt.Fprintln(os.Stderr, "memkeys:", err)
			os.Exit(1)
		}
		return
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "memkeys:", err)
		os.Exit(1)
	}
	fmt.Printf("go %s, GOMAXPROCS %d\n", runtime.Version(), runtime.GOMAXPROCS(0))
	for _, ks := range strings.Split(*keys, ",") {
		f, err := strconv.ParseFloat(strings.TrimSpace(ks), 64)
		if err != nil || f < 1 {
			fmt.Fprintf(os.Stderr, "memkeys: bad key count %q\n", ks)
			os.Exit(2)
		}
		for _, a := range []string{"exact", "smooth"} {
			args := []string{"-child", "-n", strconv.Itoa(int(f)), "-algo", a}
			if *persist {
				args = append(args, "-persist", "-idle", idle.String())
			}
			cmd := exec.Command(self, args...)
			cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
			if err := cmd.Run(); err != nil {
				fmt.Fprintln(os.Stderr, "memkeys:", a, ks, err)
				os.Exit(1)
			}
		}
	}
}

// sink keeps the garbage of the simulated requests from being optimised
// away.
var sink []byte

// key is the i-th sender key, shaped as the policy door's.
func key(i int) string {
	return "policy\x00{sender\x00s" + strconv.Itoa(10_000_000+i) + "@sender.example}\x000"
}

func measure(n int, algo string, persist bool, idle time.Duration, memprofile string) error {
	lim := limiter.Limit{Algorithm: limiter.Exact, N: 10, Period: time.Hour}
	if algo == "smooth" {
		lim.Algorithm = limiter.Smooth
	} else if algo != "exact" {
		return fmt.Errorf("algorithm %q: exact or smooth", algo)
	}
	s := memory.New(memory.Options{MaxKeys: 2*n + 1000})
	defer s.Close()
	rss0, heap0 := settle()
	ctx := context.Background()
	now := time.Now()
	checks := []limiter.Check{{Limit: lim}}
	out := make([]limiter.Decision, 1)
	start := time.Now()
	for i := range n {
		checks[0].Key = key(i)
		if err := s.Hit(ctx, now.Add(time.Duration(i)), 1, limiter.Leaky, checks, out); err != nil {
			return fmt.Errorf("hit %d: %w", i, err)
		}
	}
	fill := time.Since(start)
	// Then as many looks at those keys (Peek: an exact key keeps its one
	// event), each leaving 1 KiB of garbage as a request decoded by a
	// door does: the process then stands as a daemon under load, with the
	// collector's headroom on top of the live heap (GOGC).
	for i := range n {
		sink = make([]byte, 1024)
		checks[0].Key = key(i)
		if err := s.Peek(ctx, now.Add(time.Duration(n+i)), 1, checks, out); err != nil {
			return fmt.Errorf("hit %d: %w", i, err)
		}
	}
	if len(sink) != 1024 {
		return fmt.Errorf("no garbage made")
	}
	rssNow := procField("/proc/self/status", "VmRSS:") * 1024
	rss1, heap1 := settle()
	if s.Len() != n {
		return fmt.Errorf("%d keys held, want %d", s.Len(), n)
	}
	fmt.Printf("memkeys %-6s keys=%-9d rss_per_key=%6.1f B  rss_settled_per_key=%6.1f B  heap_per_key=%6.1f B  fill_s=%.2f\n",
		algo, n, float64(rssNow-rss0)/float64(n), float64(rss1-rss0)/float64(n), float64(heap1-heap0)/float64(n), fill.Seconds())
	if memprofile != "" {
		f, err := os.Create(memprofile)
		if err != nil {
			return err
		}
		if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
			return err
		}
		f.Close()
	}
	if persist {
		return measurePersist(s, n, lim, now.Add(time.Duration(n)), idle)
	}
	return nil
}

// measureIdle leaves s idle for d, writing its snapshot every 5 s, and
// prints what that wrote and cost.
func measureIdle(s *memory.Store, path string, n int, lim limiter.Limit, d time.Duration) error {
	w0, cpu0, start := wchar(), cpuTime(), time.Now()
	written := int64(0)
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	for time.Since(start) < d {
		now := <-t.C
		st, err := s.WriteSnapshot(path, now, false)
		if err != nil {
			return err
		}
		written += st.Bytes
	}
	el := time.Since(start)
	fmt.Printf("memkeys %-6s keys=%-9d idle_s=%.0f idle_wchar_bytes=%d snapshot_bytes=%d idle_cpu_pct=%.2f\n",
		lim.Algorithm, n, el.Seconds(), wchar()-w0, written, 100*(cpuTime()-cpu0).Seconds()/el.Seconds())
	return nil
}

// cpuTime is the user and system CPU time this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// measurePersist writes the store's snapshot, writes again with nothing
// changed, again after 1,000 decisions, and restores it into a new store.
func measurePersist(s *memory.Store, n int, lim limiter.Limit, now time.Time, idle time.Duration) error {
	dir, err := os.MkdirTemp("", "memkeys-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "store.snapshot")
	st, err := s.WriteSnapshot(path, now, false)
	if err != nil {
		return err
	}
	fmt.Printf("memkeys %-6s keys=%-9d first_write_bytes=%d first_write_s=%.2f\n", lim.Algorithm, n, st.Bytes, st.Took.Seconds())
	w0 := wchar()
	idleSt, err := s.WriteSnapshot(path, now.Add(5*time.Second), false)
	if err != nil {
		return err
	}
	w1 := wchar()
	checks := []limiter.Check{{Limit: lim}}
	out := make([]limiter.Decision, 1)
	t := now.Add(6 * time.Second)
	for i := range 1000 {
		checks[0].Key = key(i * (n / 1000))
		if err := s.Hit(context.Background(), t, 1, limiter.Leaky, checks, out); err != nil {
			return err
		}
	}
	w2 := wchar()
	busy, err := s.WriteSnapshot(path, now.Add(10*time.Second), false)
	if err != nil {
		return err
	}
	w3 := wchar()
	fmt.Printf("memkeys %-6s keys=%-9d idle_write_bytes=%d (wchar %d)  after_1000_decisions_bytes=%d (wchar %d, %.3f s)\n",
		lim.Algorithm, n, idleSt.Bytes, w1-w0, busy.Bytes, w3-w2, busy.Took.Seconds())
	r := memory.New(memory.Options{MaxKeys: 2*n + 1000})
	defer r.Close()
	start, cpu0 := time.Now(), cpuTime()
	rst, err := r.Restore(path, memory.SnapshotLimit(2*n+1000), now.Add(11*time.Second))
	if err != nil {
		return err
	}
	took, cpu := time.Since(start), cpuTime()-cpu0
	if rst.Keys != n {
		return fmt.Errorf("restored %d keys, want %d", rst.Keys, n)
	}
	fmt.Printf("memkeys %-6s keys=%-9d restore_s=%.2f restore_cpu_s=%.2f (read, decode, insert)\n", lim.Algorithm, n, took.Seconds(), cpu.Seconds())
	if idle > 0 {
		r.Close()
		return measureIdle(s, path, n, lim, idle)
	}
	return nil
}

// settle collects the garbage, returns free pages to the system and
// reports VmRSS and the heap in use, in bytes.
func settle() (rss, heap uint64) {
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return procField("/proc/self/status", "VmRSS:") * 1024, ms.HeapInuse
}

// wchar is the bytes this process has passed to write calls so far.
func wchar() uint64 { return procField("/proc/self/io", "wchar:") }

// procField reads the number after name in a /proc file.
func procField(path, name string) uint64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), name); ok {
			v, _ := strconv.ParseUint(strings.Fields(rest)[0], 10, 64)
			return v
		}
	}
	return 0
}
