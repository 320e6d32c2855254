package app

import (
	"bufio"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestRedisKilledAndRestartedMidLoad: eight policy clients keep asking
// while redis-server is killed and, a second later, started again on the
// same port (empty: it keeps nothing on disk). While it is down every
// request is still answered, within the deadline, by the fail mode
// (open: DUNNO); no client connection is dropped; once it is back,
// counting resumes by itself and is exact again.
func TestRedisKilledAndRestartedMidLoad(t *testing.T) {
	srv := startRedis(t)
	d := startDaemon(t, redisConfig(t, srv, "restart:", "open", ""))
	addr := d.Addrs()[0].String()
	type stats struct {
		answers, errs atomic.Int64
		maxNanos      atomic.Int64 // slowest answer
	}
	var st stats
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", addr)
			if err != nil {
				st.errs.Add(1)
				return
			}
			defer c.Close()
			r := bufio.NewReader(c)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				t0 := time.Now()
				// A fresh sender each time: the limit never refuses, so
				// every answer is DUNNO whether counted or failed open.
				v, err := policyAsk(c, r, fmt.Sprintf("load%d.%d@x", w, i), fmt.Sprint(w, ".", i))
				if err != nil || v != "DUNNO" {
					st.errs.Add(1)
					t.Errorf("client %d: %q %v", w, v, err)
					return
				}
				st.answers.Add(1)
				for took := time.Since(t0).Nanoseconds(); ; {
					m := st.maxNanos.Load()
					if took <= m || st.maxNanos.CompareAndSwap(m, took) {
						break
					}
				}
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()
	waitAnswers := func(n int64) {
		t.Helper()
		want := st.answers.Load() + n
		for deadline := time.Now().Add(30 * time.Second); st.answers.Load() < want; {
			if time.Now().After(deadline) || st.errs.Load() > 0 {
				t.Fatalf("%d answers, %d errors", st.answers.Load(), st.errs.Load())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitAnswers(200)
	srv.Kill()
	killed := time.Now()
	st.maxNanos.Store(0)
	before := st.answers.Load()
	waitAnswers(50)
	time.Sleep(time.Second)
	down := st.answers.Load() - before
	slowest := time.Duration(st.maxNanos.Load())
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	// Counting resumes: a new sender is refused after its 10th message.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	var resumed time.Duration
	for i := 0; ; i++ {
		v, err := policyAsk(c, r, fmt.Sprintf("probe%d@x", i/11), fmt.Sprint("p", i))
		if err != nil {
			t.Fatal(err)
		}
		if v == "DEFER_IF_PERMIT" {
			resumed = time.Since(restarted)
			break
		}
		if time.Since(restarted) > 30*time.Second {
			t.Fatal("counting did not resume after Redis came back")
		}
	}
	// And is exact: 40 messages of one sender from four connections,
	// exactly 10 pass.
	var passed atomic.Int64
	var cw sync.WaitGroup
	for w := range 4 {
		cw.Add(1)
		go func() {
			defer cw.Done()
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			r := bufio.NewReader(c)
			for i := range 10 {
				v, err := policyAsk(c, r, "exact@x", fmt.Sprint("e", w, ".", i))
				if err != nil {
					t.Error(err)
					return
				}
				if v == "DUNNO" {
					passed.Add(1)
				}
			}
		}()
	}
	cw.Wait()
	if passed.Load() != 10 {
		t.Errorf("after the restart %d of 40 messages passed a limit of 10", passed.Load())
	}
	if st.errs.Load() > 0 {
		t.Fatalf("%d client errors", st.errs.Load())
	}
	t.Logf("Redis down %v: %d requests answered DUNNO (fail open) meanwhile, slowest %v (deadline 100ms); after the restart counting resumed within %v and was exact (10 of 40)",
		restarted.Sub(killed).Round(time.Millisecond), down, slowest.Round(time.Millisecond), resumed.Round(time.Millisecond))
}
