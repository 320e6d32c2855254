package redis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"sluice/internal/limiter"
	"sluice/internal/testutil/logbuf"
	"sluice/internal/testutil/redistest"
)

// The failover tests (Sentinel and Cluster) share this harness: two
// limiter stacks, as two sluice daemons would run them (one failing open,
// one failing closed), each over a Store of its own, put a policy rule
// under load at c=8 while a Redis master is SIGKILLed; a third store holds
// leases and dies with the master.
//
// The rule is the policy service's shape: per sender, 10/60s exact and
// 100/1h smooth, both keys under the rule's {hash tag}. Senders are used
// in turn, hitsPerSender hits each, so some are always being filled: the
// counts written to the dead master and not yet replicated show up as
// senders admitted more than 10 times in all.

const (
	failoverLimit    = 10
	hitsPerSender    = failoverLimit + 2
	failoverWorkers  = 8
	failoverLeaseTTL = 3 * time.Second
)

// failoverEnv sets the pace: FAILOVER_LONG=1 runs the load longer before
// and after the kill.
func failoverEnv() (before, after time.Duration) {
	if os.Getenv("FAILOVER_LONG") == "1" {
		return 10 * time.Second, 10 * time.Second
	}
	return 1500 * time.Millisecond, 2 * time.Second
}

func senderChecks(sender int) []limiter.Check {
	tag := "policy\x00{sender-rate\x00sender=s" + strconv.Itoa(sender) + "@example.org}\x00"
	return []limiter.Check{
		{Key: tag + "0", Limit: limiter.Limit{Algorithm: limiter.Exact, N: failoverLimit, Period: time.Minute}},
		{Key: tag + "1", Limit: limiter.Limit{Algorithm: limiter.Smooth, N: 100, Period: time.Hour}},
	}
}

// senderRec is what the load saw of one sender.
type senderRec struct {
	first    time.Time // first decision asked
	admitted int       // admitted by the store
	refused  int       // refused by the store
	failed   int       // store errors (the fail mode decided)
	// unreplicated are those of failed that no replica acknowledged in
	// time (WaitReplicas): the master answered, its replica was slow.
	unreplicated int
}

// failoverRun is one run of the harness.
type failoverRun struct {
	t      *testing.T
	stores [2]*Store
	lims   [2]*limiter.Limiter
	logs   *logbuf.Buffer

	next    atomic.Int64 // hits handed out; sender = hit / hitsPerSender
	mu      sync.Mutex
	senders map[int]*senderRec
	errs    [2][]time.Time // times of failed decisions, per limiter
	wrongFM int            // failed decisions that did not follow the fail mode
	// onVictim, in a Cluster, says whether a sender's keys were on the
	// master that is killed.
	onVictim func(sender int) bool
	// acks are the times of the admissions the store acknowledged.
	acks []time.Time
	// wait is Options.WaitReplicas of the stores.
	wait int
	// lag is what the replica that takes over had not received when its
	// master died (see replicaLag).
	lag replicaLag
}

// newFailoverRun opens the two stores with o (Addrs and the topology
// options set by the caller).
func newFailoverRun(t *testing.T, o Options) *failoverRun {
	r := &failoverRun{t: t, logs: &logbuf.Buffer{}, senders: make(map[int]*senderRec), wait: o.WaitReplicas}
	o.KeyPrefix = fmt.Sprintf("fo%d:", prefixSeq.Add(1))
	o.Deadline = time.Second
	o.LeaseTTL = failoverLeaseTTL
	o.Logger = slog.New(slog.NewTextHandler(r.logs, nil))
	for i := range r.stores {
		o.Owner = fmt.Sprintf("host%d", i)
		r.stores[i] = openStore(t, o)
		r.lims[i] = limiter.New(limiter.Options{Store: r.stores[i], FailOpen: i == 0, Logger: o.Logger})
	}
	return r
}

// openStore connects a Store with o and closes it at the end of the test.
func openStore(t *testing.T, o Options) *Store {
	t.Helper()
	s, err := New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// load runs the workers until stop is closed.
func (r *failoverRun) load(stop <-chan struct{}) {
	var wg sync.WaitGroup
	for w := range failoverWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out := make([]limiter.Decision, 2)
			for {
				select {
				case <-stop:
					return
				default:
				}
				h := r.next.Add(1) - 1
				sender := int(h / hitsPerSender)
				r.hit(w%2, sender, out)
			}
		}()
	}
	wg.Wait()
}

// hit asks limiter i about sender once and records the outcome.
func (r *failoverRun) hit(i, sender int, out []limiter.Decision) (ok bool, err error) {
	asked := time.Now()
	err = r.lims[i].Hit(ctx, 1, limiter.Leaky, senderChecks(sender), out)
	r.mu.Lock()
	defer r.mu.Unlock()
	rec := r.senders[sender]
	if rec == nil {
		rec = &senderRec{first: asked}
		r.senders[sender] = rec
	}
	switch {
	case err != nil:
		rec.failed++
		if errors.Is(err, ErrNotReplicated) {
			rec.unreplicated++
		}
		r.errs[i] = append(r.errs[i], time.Now())
		if out[0].Allowed != r.lims[i].FailOpen() || out[1].Allowed != r.lims[i].FailOpen() {
			r.wrongFM++
		}
	case out[0].Allowed && out[1].Allowed:
		rec.admitted++
		r.acks = append(r.acks, time.Now())
	default:
		rec.refused++
	}
	return err == nil && out[0].Allowed, err
}

// finish fills every sender the store admitted and has not refused yet
// until it does, so that every sender's store admissions can be compared
// to the limit.
func (r *failoverRun) finish() {
	r.mu.Lock()
	var open []int
	for s, rec := range r.senders {
		// A sender the store never admitted cannot be admitted beyond
		// its limit: only its failed decisions' counts could be lost.
		if rec.refused == 0 && rec.admitted > 0 {
			open = append(open, s)
		}
	}
	r.mu.Unlock()
	out := make([]limiter.Decision, 2)
	for _, s := range open {
		for range 3 * hitsPerSender {
			if ok, err := r.hit(0, s, out); err == nil && !ok {
				break
			}
		}
	}
}

// failoverFigures are what a run measured.
type failoverFigures struct {
	outage   [2]time.Duration // first to last failed decision, per limiter
	failed   int              // failed decisions in all
	over     int              // admissions beyond the limit, summed over senders
	overKeys int              // senders admitted beyond the limit
	under    int              // admissions short of the limit (calls that timed out but were applied)
	senders  int
	exactErr []string // senders first asked after the outage and not exact
	// overSenders are some senders admitted beyond the limit.
	overSenders []string
	// failedElsewhere are the failed decisions of senders whose keys were
	// not on the dead master (Cluster; see failoverRun.onVictim).
	failedElsewhere int
	// unreplicatedElsewhere are their decisions whose replica did not
	// acknowledge in time (WaitReplicas on a busy host): not failures of
	// the surviving masters.
	unreplicatedElsewhere int
}

// figures sums up the run; recovered is when the last limiter's last
// failed decision happened (senders first asked after it must be exact).
func (r *failoverRun) figures(killed time.Time) (f failoverFigures, recovered time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	recovered = killed
	for i, e := range r.errs {
		f.failed += len(e)
		if len(e) > 0 {
			f.outage[i] = e[len(e)-1].Sub(e[0])
			if e[len(e)-1].After(recovered) {
				recovered = e[len(e)-1]
			}
		}
	}
	for s, rec := range r.senders {
		f.senders++
		if r.onVictim != nil && !r.onVictim(s) {
			f.failedElsewhere += rec.failed - rec.unreplicated
			f.unreplicatedElsewhere += rec.unreplicated
		}
		switch {
		case rec.admitted > failoverLimit:
			f.over += rec.admitted - failoverLimit
			f.overKeys++
			if len(f.overSenders) < 5 {
				f.overSenders = append(f.overSenders, fmt.Sprintf("s%d first asked %s after the kill: %+v", s, rec.first.Sub(killed).Round(time.Millisecond), *rec))
			}
		case rec.admitted < failoverLimit && (rec.admitted > 0 || rec.refused > 0):
			// (a sender whose every decision failed is not filled: finish)
			f.under += failoverLimit - rec.admitted
		}
		if rec.first.After(recovered) && (rec.admitted != failoverLimit || rec.failed != 0) {
			f.exactErr = append(f.exactErr, fmt.Sprintf("s%d: %+v", s, *rec))
		}
	}
	return f, recovered
}

// admitExactly sends m requests for one new sender at concurrency c,
// spread over both limiters, and returns how many were admitted and how
// many failed.
func (r *failoverRun) admitExactly(sender, m, c int) (admitted, failed int) {
	var next, adm, fail atomic.Int64
	var wg sync.WaitGroup
	for w := range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out := make([]limiter.Decision, 2)
			for next.Add(1) <= int64(m) {
				err := r.lims[w%2].Hit(ctx, 1, limiter.Leaky, senderChecks(sender), out)
				switch {
				case err != nil:
					fail.Add(1)
				case out[0].Allowed && out[1].Allowed:
					adm.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return int(adm.Load()), int(fail.Load())
}

// leaseHolder acquires capacity leases on key through a store of its own
// and crashes it (no release, no renewal), as a host dying with the master
// would. It returns the time of the crash.
func leaseHolder(t *testing.T, o Options, prefix, key string, capacity int64) time.Time {
	t.Helper()
	o.KeyPrefix, o.Owner, o.LeaseTTL, o.Deadline = prefix, "doomed-host", failoverLeaseTTL, time.Second
	o.Logger = slog.New(slog.NewTextHandler(&logbuf.Buffer{}, nil))
	s := openStore(t, o)
	for range capacity {
		if _, _, ok, err := s.Acquire(ctx, time.Now(), key, capacity, 0); !ok || err != nil {
			t.Fatalf("doomed host's acquire: ok %v err %v", ok, err)
		}
	}
	crash(s)
	return time.Now()
}

// failover runs the load, kills the master (kill) after failoverEnv's
// pause before, waits up to 30 s until switchedOver reports the new
// master serving, keeps the load for the pause after, and stops it. It
// returns when the master was killed and how long the switch took.
func (r *failoverRun) failover(t *testing.T, kill, switchedOver func() error) (killed time.Time, switched time.Duration) {
	t.Helper()
	before, after := failoverEnv()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { r.load(stop); close(done) }()
	time.Sleep(before)
	killed = time.Now() // as the signal goes: kill may also reap the process
	if err := kill(); err != nil {
		close(stop)
		<-done
		t.Fatal(err)
	}
	if err := redistest.WaitFor(30*time.Second, switchedOver); err != nil {
		close(stop)
		<-done
		t.Fatalf("no failover: %v\nlogs:\n%s", err, r.logs)
	}
	switched = time.Since(killed)
	time.Sleep(after)
	close(stop)
	<-done
	return killed, switched
}

// conclude waits for the dead host's leases to be freed, finishes the
// run, logs its figures and checks what every failover test promises.
func (r *failoverRun) conclude(t *testing.T, name string, freedCh <-chan time.Time, killed time.Time, switched time.Duration, crashed time.Time) failoverFigures {
	t.Helper()
	freed := <-freedCh
	if freed.IsZero() {
		t.Fatalf("the dead host's leases were still held a minute after its crash")
	}
	r.finish()
	f, recovered := r.figures(killed)
	adm, fail := r.admitExactly(-1, 100, 8)
	report(t, name, f, killed, recovered, switched, crashed, freed, adm, fail)
	// The failover ends when the switch is seen or the last decision
	// failed, whichever is later: on a busy host the dead master's
	// decisions may stall rather than fail until the switch.
	checkFailover(t, r, f, killed, maxTime(recovered, killed.Add(switched)), crashed, freed, adm, fail)
	r.checkLost(t, f)
	return f
}

// watchLeases polls, through s, until fewer than capacity leases of key
// are held, and returns when that was first seen (zero if never, or
// limit passed first).
func watchLeases(s *Store, key string, capacity int64, limit time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	go func() {
		defer close(ch)
		deadline := time.Now().Add(limit)
		for time.Now().Before(deadline) {
			if held, err := s.Held(ctx, time.Now(), key); err == nil && held < capacity {
				ch <- time.Now()
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	return ch
}

// replicaLag is how far the replica that takes over was behind its
// master at the kill: the master's replication offset read just before
// the SIGKILL (at infoAt) less the replica's read just after (it cannot
// move on without its master), in bytes, and the fewest bytes one
// admitted decision adds to the stream (measured before the load).
type replicaLag struct {
	infoAt, killAt time.Time
	bytes          int64
	perAdmission   int64
	masterOffset   int64
	replicaOffset  int64
}

// decisions is the most admitted decisions the lag can hold.
func (l replicaLag) decisions() int {
	if l.bytes <= 0 {
		return 0
	}
	return int((l.bytes + l.perAdmission - 1) / l.perAdmission)
}

// replOffset is a Redis server's master_repl_offset: for a master what
// it wrote to its replication stream, for a replica what it received.
func replOffset(addr string) (int64, error) {
	v, err := redistest.Do(addr, "INFO", "replication")
	if err != nil {
		return 0, err
	}
	info, _ := v.(string)
	for line := range strings.Lines(info) {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "master_repl_offset:"); ok {
			return strconv.ParseInt(rest, 10, 64)
		}
	}
	return 0, fmt.Errorf("%s: no master_repl_offset in INFO replication", addr)
}

// bytesPerAdmission measures the fewest replication bytes one admitted
// decision adds on master: sender's first hits (new keys, then counts
// going up), one at a time, through store 0.
func (r *failoverRun) bytesPerAdmission(t *testing.T, master string, sender int) int64 {
	t.Helper()
	least := int64(-1)
	out := make([]limiter.Decision, 2)
	for range 5 {
		before, err := replOffset(master)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.stores[0].Hit(ctx, time.Now(), 1, limiter.Leaky, senderChecks(sender), out); err != nil || !out[0].Allowed {
			t.Fatalf("measuring a decision's replication: %v %+v", err, out)
		}
		after, err := replOffset(master)
		if err != nil {
			t.Fatal(err)
		}
		if d := after - before; d > 0 && (least < 0 || d < least) {
			least = d
		}
	}
	if least <= 0 {
		t.Fatal("an admitted decision added nothing to the replication stream")
	}
	return least
}

// killAfterReading reads master's replication offset, then kills it with
// kill, then reads the heir replica's offset: the lag the failover loses.
func (r *failoverRun) killAfterReading(master, heir string, perAdmission int64, kill func() error) func() error {
	return func() error {
		r.lag.perAdmission = perAdmission
		off, err := replOffset(master)
		if err != nil {
			return err
		}
		r.lag.infoAt, r.lag.masterOffset = time.Now(), off
		r.lag.killAt = time.Now()
		if err := kill(); err != nil {
			return err
		}
		if r.lag.replicaOffset, err = replOffset(heir); err != nil {
			return err
		}
		r.lag.bytes = r.lag.masterOffset - r.lag.replicaOffset
		return nil
	}
}

// acksBetween counts the admissions acknowledged from a to b.
func (r *failoverRun) acksBetween(a, b time.Time) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, at := range r.acks {
		if !at.Before(a) && !at.After(b) {
			n++
		}
	}
	return n
}

// checkLost checks the counts lost with the master against their true
// bound. With WaitReplicas, none: every admission acknowledged was on a
// replica. Without, each lost count lets one more request through later,
// and what is lost is what the master applied and the heir had not
// received: the admissions in the replication lag read before the kill
// (at most lag bytes over the fewest bytes of one admission), those
// acknowledged between that reading and the kill, and those in flight
// at the kill (applied, not yet acknowledged: at most one per worker).
func (r *failoverRun) checkLost(t *testing.T, f failoverFigures) {
	t.Helper()
	between := r.acksBetween(r.lag.infoAt, r.lag.killAt)
	bound := failoverWorkers + r.lag.decisions() + between
	if f.over > 0 {
		t.Logf("senders admitted beyond the limit: %v", f.overSenders)
	}
	t.Logf("replication lag at the kill: %d bytes (master offset %d, heir %d), at least %d bytes an admission: at most %d admissions; %d acknowledged between the reading and the kill; bound %d (wait_replicas %d)",
		r.lag.bytes, r.lag.masterOffset, r.lag.replicaOffset, r.lag.perAdmission, r.lag.decisions(), between, bound, r.wait)
	switch {
	case r.wait > 0 && f.over != 0:
		t.Errorf("%d admissions beyond the limit with wait_replicas %d: an acknowledged count was lost", f.over, r.wait)
	case f.over > bound:
		t.Errorf("%d admissions beyond the limit: more than the %d in flight, the %d the replica lagged by and the %d acknowledged during the reading",
			f.over, failoverWorkers, r.lag.decisions(), between)
	}
}

// rejoin restarts the dead master, as an operator would, and waits until
// newMaster has a replica in sync again (the Sentinels, or the Cluster,
// make the restarted server its replica). With WaitReplicas no write
// succeeds while the new master has no replica: its decisions get the
// fail mode.
func rejoin(t *testing.T, dead *redistest.Server, newMaster string) time.Duration {
	t.Helper()
	start := time.Now()
	if err := dead.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := redistest.WaitFor(60*time.Second, func() error {
		v, err := redistest.Do(newMaster, "INFO", "replication")
		if err != nil {
			return err
		}
		if info, _ := v.(string); !strings.Contains(info, "state=online") {
			return fmt.Errorf("%s has no replica online:\n%s", newMaster, info)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return time.Since(start)
}
