// Command throttleload measures sluice's throttle service: slot grants per
// second and grant latency with many keys and concurrent senders, and
// checks that no key ever gets more grants in a window than its limit.
//
// Each sender connects, asks for a slot for a key, records the slot time
// and the time the answer took, and says DONE at once (it does not wait
// for the slot: the measurement is the decision path; the slot times, all
// kept booked, are checked).
package main

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"sync"
	"time"

	"sluice/internal/throttle"
)

func main() {
	sock := flag.String("socket", "", "throttle socket path (required)")
	conc := flag.Int("c", 64, "concurrent senders")
	keys := flag.Int("keys", 1000, "distinct keys")
	dur := flag.Duration("duration", 5*time.Second, "how long to run")
	limit := flag.Int("limit", 5, "the policy's N (for the window check)")
	period := flag.Duration("period", time.Second, "the policy's period plus margin (for the window check)")
	flag.Parse()
	if *sock == "" {
		fmt.Fprintln(os.Stderr, "throttleload: -socket is required")
		os.Exit(2)
	}
	type rec struct {
		key int
		at  time.Time
	}
	var mu sync.Mutex
	var slots []rec
	var lat []time.Duration
	errs := 0
	deadline := time.Now().Add(*dur)
	start := time.Now()
	var wg sync.WaitGroup
	for w := range *conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			var mine []rec
			var myLat []time.Duration
			myErrs := 0
			for time.Now().Before(deadline) {
				k := rng.IntN(*keys)
				t0 := time.Now()
				cl, err := throttle.Dial("unix", *sock, 5*time.Second)
				if err != nil {
					myErrs++
					continue
				}
				rep, err := cl.Acquire(fmt.Sprintf("relay%d.example", k))
				d := time.Since(t0)
				cl.Done() // as if sent: the slot stays booked
				if err != nil || rep.Defer != "" {
					myErrs++
					continue
				}
				mine = append(mine, rec{k, rep.At})
				myLat = append(myLat, d)
			}
			mu.Lock()
			slots = append(slots, mine...)
			lat = append(lat, myLat...)
			errs += myErrs
			mu.Unlock()
		}()
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	pct := func(p float64) float64 {
		if len(lat) == 0 {
			return 0
		}
		return float64(lat[int(p*float64(len(lat)-1))].Microseconds())
	}
	// The largest number of slots any key got in any window of period.
	perKey := map[int][]time.Time{}
	for _, s := range slots {
		perKey[s.key] = append(perKey[s.key], s.at)
	}
	maxIn := 0
	for _, ts := range perKey {
		sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
		for i := range ts {
			j := sort.Search(len(ts), func(k int) bool { return !ts[k].Before(ts[i].Add(*period)) })
			maxIn = max(maxIn, j-i)
		}
	}
	fmt.Printf("c=%d keys=%d grants=%d secs=%.3f grants_per_s=%.1f p50_us=%.0f p99_us=%.0f p999_us=%.0f max_in_window=%d limit=%d errors=%d\n",
		*conc, *keys, len(slots), secs, float64(len(slots))/secs, pct(0.5), pct(0.99), pct(0.999), maxIn, *limit, errs)
	if errs > 0 || maxIn > *limit {
		os.Exit(1)
	}
}
