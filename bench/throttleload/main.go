// Command throttleload measures sluice's throttle service: slot grants per
// second and grant latency with many keys and concurrent senders, and
// checks, at the receiving end, that no key ever gets more sends in a
// window than its limit.
//
// Each sender keeps one connection to a recording relay (a loopback
// listener inside this program), and in a loop connects to sluice, asks
// for a slot for a random key, sleeps until the slot, writes the key to
// the relay, and says DONE. The relay stamps every line with its own clock
// when it reads it; max_in_window is the largest number of one key's lines
// in any window of -period by those stamps. With -wait=false the senders
// say DONE at once and send nothing: that measures the decision path only,
// and no window is checked.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"sort"
	"strconv"
	"sync"
	"time"

	"sluice/internal/throttle"
)

// arrival is one send as the relay saw it.
type arrival struct {
	key int
	at  time.Time
}

// relay is the recording receiver: it stamps each line (a key number)
// with its clock when it reads it.
type relay struct {
	l    net.Listener
	wg   sync.WaitGroup
	mu   sync.Mutex
	seen []arrival
	bad  int
}

func newRelay() (*relay, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &relay{l: l}
	r.wg.Add(1)
	go r.accept()
	return r, nil
}

func (r *relay) accept() {
	defer r.wg.Done()
	for {
		c, err := r.l.Accept()
		if err != nil {
			return // closed
		}
		r.wg.Add(1)
		go r.serve(c)
	}
}

func (r *relay) serve(c net.Conn) {
	defer r.wg.Done()
	defer c.Close()
	var mine []arrival
	bad := 0
	sc := bufio.NewScanner(c)
	for sc.Scan() {
		at := time.Now()
		k, err := strconv.Atoi(sc.Text())
		if err != nil {
			bad++
			continue
		}
		mine = append(mine, arrival{k, at})
	}
	r.mu.Lock()
	r.seen = append(r.seen, mine...)
	r.bad += bad
	r.mu.Unlock()
}

// close stops accepting and waits until every connection has ended.
func (r *relay) close() {
	r.l.Close()
	r.wg.Wait()
}

// maxInWindow is the largest number of one key's arrivals within any
// window of length period.
func maxInWindow(seen []arrival, period time.Duration) int {
	perKey := map[int][]time.Time{}
	for _, s := range seen {
		perKey[s.key] = append(perKey[s.key], s.at)
	}
	m := 0
	for _, ts := range perKey {
		sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
		for i := range ts {
			j := sort.Search(len(ts), func(k int) bool { return !ts[k].Before(ts[i].Add(period)) })
			m = max(m, j-i)
		}
	}
	return m
}

// result is what the senders did.
type result struct {
	grants int
	lat    []time.Duration // time to the server's answer
	late   []time.Duration // wake-up after the slot, before the send
	errs   int
}

// sender runs one sender until deadline.
func sender(w int, sock, prefix string, keys int, wait bool, dst string, deadline time.Time) result {
	var res result
	var out *bufio.Writer
	if wait {
		c, err := net.Dial("tcp", dst)
		if err != nil {
			res.errs++
			return res
		}
		defer c.Close()
		out = bufio.NewWriter(c)
	}
	rng := rand.New(rand.NewPCG(uint64(w), 7))
	for time.Now().Before(deadline) {
		k := rng.IntN(keys)
		t0 := time.Now()
		cl, err := throttle.Dial("unix", sock, 5*time.Second)
		if err != nil {
			res.errs++
			continue
		}
		rep, err := cl.Acquire(fmt.Sprintf("%s%d.example", prefix, k))
		d := time.Since(t0)
		if err != nil || rep.Defer != "" {
			cl.Close()
			res.errs++
			continue
		}
		if wait {
			time.Sleep(time.Until(rep.At))
			res.late = append(res.late, time.Since(rep.At))
			out.WriteString(strconv.Itoa(k) + "\n")
			if err := out.Flush(); err != nil {
				res.errs++
			}
		}
		cl.Done() // sent: the slot stays booked
		res.grants++
		res.lat = append(res.lat, d)
	}
	return res
}

func pct(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds[int(p*float64(len(ds)-1))]
}

func main() {
	sock := flag.String("socket", "", "throttle socket path (required)")
	conc := flag.Int("c", 64, "concurrent senders")
	keys := flag.Int("keys", 1000, "distinct keys")
	prefix := flag.String("prefix", "relay", "the keys are PREFIX0.example, PREFIX1.example...")
	dur := flag.Duration("duration", 5*time.Second, "how long to ask for slots")
	wait := flag.Bool("wait", true, "sleep until each slot and send to the recording relay (false: decision path only)")
	limit := flag.Int("limit", 5, "the policy's N (for the window check)")
	period := flag.Duration("period", time.Second, "the policy's period, without its margin: the relay's window")
	flag.Parse()
	if *sock == "" {
		fmt.Fprintln(os.Stderr, "throttleload: -socket is required")
		os.Exit(2)
	}
	var rl *relay
	dst := ""
	if *wait {
		var err error
		if rl, err = newRelay(); err != nil {
			fmt.Fprintln(os.Stderr, "throttleload: relay:", err)
			os.Exit(1)
		}
		dst = rl.l.Addr().String()
	}
	var mu sync.Mutex
	var all result
	deadline := time.Now().Add(*dur)
	start := time.Now()
	var wg sync.WaitGroup
	for w := range *conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := sender(w, *sock, *prefix, *keys, *wait, dst, deadline)
			mu.Lock()
			all.grants += r.grants
			all.errs += r.errs
			all.lat = append(all.lat, r.lat...)
			all.late = append(all.late, r.late...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	line := fmt.Sprintf("c=%d keys=%d wait=%v grants=%d secs=%.3f grants_per_s=%.1f p50_us=%d p99_us=%d p999_us=%d",
		*conc, *keys, *wait, all.grants, secs, float64(all.grants)/secs,
		pct(all.lat, 0.5).Microseconds(), pct(all.lat, 0.99).Microseconds(), pct(all.lat, 0.999).Microseconds())
	fail := all.errs > 0
	if *wait {
		rl.close()
		maxIn := maxInWindow(rl.seen, *period)
		line += fmt.Sprintf(" received=%d late_p99_us=%d late_max_us=%d max_in_window=%d limit=%d",
			len(rl.seen), pct(all.late, 0.99).Microseconds(), pct(all.late, 1).Microseconds(), maxIn, *limit)
		fail = fail || maxIn > *limit || len(rl.seen) != all.grants || rl.bad > 0
	}
	fmt.Printf("%s errors=%d\n", line, all.errs)
	if fail {
		os.Exit(1)
	}
}
