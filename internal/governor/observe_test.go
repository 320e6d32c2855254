package governor

import (
	"strings"
	"sync"
	"testing"
	"time"

	"sluice/internal/limiter"

	"sluice/internal/rules"
)

type recorder struct {
	mu sync.Mutex
	vs []Verdict
}

func (r *recorder) Observe(v Verdict) {
	r.mu.Lock()
	r.vs = append(r.vs, v)
	r.mu.Unlock()
}

func TestObserverSeesEveryVerdict(t *testing.T) {
	f := milterFixture(t, MilterRules{PolicyRules: true},
		PolicyRule{Name: "msgs", Count: rules.CountMessages, Key: []KeyPart{{Attr: "sender"}}, Limits: []limiter.Limit{lim("1/1h exact")}})
	rec := &recorder{}
	f.g.obs = rec
	var a, b, c MilterSession
	f.g.MilterConnect(f.ctx, &a, "", dialup, "1")
	f.g.MilterConnect(f.ctx, &b, "", dialup, "2")
	f.g.MilterConnect(f.ctx, &c, "", dialup, "3") // the class (refuse 2) is full
	for range 2 {
		playMilter(f, &a, "s@example.org", []string{"r@example.net"}, 10)
	}
	var got []string
	for _, v := range rec.vs {
		got = append(got, v.Door+"/"+v.Rule+"/"+v.Key+"/"+map[bool]string{true: "refused", false: "ok"}[v.Refused])
	}
	want := "milter/class/dialup/ok milter/class/dialup/ok milter/class/dialup/refused policy/msgs/sender=s@example.org/ok policy/msgs/sender=s@example.org/refused"
	if strings.Join(got, " ") != want {
		t.Fatalf("verdicts\n%s\nwant\n%s", strings.Join(got, " "), want)
	}
	last := rec.vs[len(rec.vs)-1]
	if last.Count != 1 || last.Limit.N != 1 || !strings.HasPrefix(last.Reply, "DEFER_IF_PERMIT") || last.At.IsZero() {
		t.Fatalf("refusal %+v", last)
	}
	if r := rec.vs[2]; r.Count != 2 || r.Limit.N != 2 || !strings.HasPrefix(r.Reply, "421 4.7.0") {
		t.Fatalf("class refusal %+v", r)
	}
	for _, s := range []*MilterSession{&a, &b, &c} {
		f.g.MilterClose(f.ctx, s)
	}
}

// counted is an Observer that keeps nothing of what it is told.
type counted struct{ n int }

func (c *counted) Observe(v Verdict) { c.n += int(v.Count) }

// Recording an admission costs no allocation: the verdict reaches the
// observer by value (through the Observer interface a pointer to it
// would escape, a heap record per decision at every door).
func TestRecordAllocatesNothing(t *testing.T) {
	f := milterFixture(t, MilterRules{})
	obs := &counted{}
	f.g.obs = obs
	v := Verdict{Door: "milter", Rule: "class", Key: "dialup", Count: 1, Limit: limiter.Limit{N: 2}, At: time.Unix(1, 0)}
	if n := testing.AllocsPerRun(100, func() { f.g.Record(f.ctx, v) }); n != 0 {
		t.Fatalf("Record: %v allocations, want 0", n)
	}
	if obs.n != 101 {
		t.Fatalf("the observer saw %d verdicts, want 101", obs.n)
	}
}
