package escalate

import (
	"io"
	"log/slog"
	"net/netip"
	"testing"
	"time"

	"sluice/internal/clock"
	"sluice/internal/governor"
)

var t0 = time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)

func newTest(after int) (*Escalator, *clock.Fake) {
	clk := clock.NewFake(t0)
	e := New("/nonexistent/escalate.sock", Settings{After: after, Within: time.Minute, For: 10 * time.Minute,
		Spared: map[string]bool{"known": true}}, clk, slog.New(slog.NewTextHandler(io.Discard, nil)))
	return e, clk
}

func refusal(addr string, at time.Time, reason string) governor.Verdict {
	return governor.Verdict{Door: "anvil", Rule: "share", Key: "rest", Refused: true, Reason: reason,
		Client: netip.MustParseAddr(addr), At: at}
}

// pending drains the requests queued for the helper.
func (e *Escalator) pending() []netip.Addr {
	var out []netip.Addr
	for {
		select {
		case a := <-e.queue:
			out = append(out, a)
		default:
			return out
		}
	}
}

// TestEscalateAfterRefusals: the third refusal within the minute queues
// the address once; refusals while it is escalated count nothing; once
// its time ends it counts from zero.
func TestEscalateAfterRefusals(t *testing.T) {
	e, clk := newTest(3)
	for i := range 2 {
		e.Observe(refusal("192.0.2.7", t0.Add(time.Duration(i)*time.Second), governor.ReasonHeadroom))
	}
	if p := e.pending(); len(p) != 0 {
		t.Fatalf("queued %v after 2 refusals, want nothing before the third", p)
	}
	e.Observe(refusal("192.0.2.7", t0.Add(2*time.Second), governor.ReasonShare))
	if p := e.pending(); len(p) != 1 || p[0] != netip.MustParseAddr("192.0.2.7") {
		t.Fatalf("queued %v, want 192.0.2.7 once", p)
	}
	for i := range 5 {
		e.Observe(refusal("192.0.2.7", t0.Add(time.Duration(3+i)*time.Second), governor.ReasonShare))
	}
	if p := e.pending(); len(p) != 0 {
		t.Fatalf("queued %v while escalated", p)
	}
	clk.Advance(3 * time.Second)
	if st := e.State(); st.Dropping != 1 || st.Tracked != 1 {
		t.Fatalf("state %+v, want 1 dropping, 1 tracked", st)
	}
	end := t0.Add(2*time.Second + 10*time.Minute)
	clk.Advance(end.Sub(clk.Now()))
	if st := e.State(); st.Dropping != 0 {
		t.Fatalf("state %+v at the end of the escalation, want none dropping", st)
	}
	for i := range 3 {
		e.Observe(refusal("::ffff:192.0.2.7", end.Add(time.Duration(i)*time.Second), governor.ReasonReserve))
	}
	if p := e.pending(); len(p) != 1 {
		t.Fatalf("queued %v after 3 more refusals past the escalation, want one", p)
	}
}

// TestEscalateWindow: refusals spread wider than the window never
// escalate (a mail server retrying after its queue's back-off).
func TestEscalateWindow(t *testing.T) {
	e, _ := newTest(3)
	for i := range 10 {
		e.Observe(refusal("192.0.2.8", t0.Add(time.Duration(i)*40*time.Second), governor.ReasonClass))
	}
	if p := e.pending(); len(p) != 0 {
		t.Fatalf("queued %v for refusals 40 s apart, want none within a 1 min window of 3", p)
	}
}

// TestEscalateOnlySessionRefusals: only a refused session of a class
// without a reservation counts; a rate limit, a dry run, a session of a
// spared class, an admission or one with no address does not.
func TestEscalateOnlySessionRefusals(t *testing.T) {
	e, _ := newTest(2)
	at := t0
	for _, v := range []governor.Verdict{
		refusal("192.0.2.9", at, governor.ReasonLimit),
		{Door: "anvil", Key: "rest", Refused: true, DryRun: true, Reason: governor.ReasonShare, Client: netip.MustParseAddr("192.0.2.9"), At: at},
		{Door: "milter", Key: "known", Refused: true, Reason: governor.ReasonClass, Client: netip.MustParseAddr("192.0.2.9"), At: at},
		{Door: "milter", Key: "rest", Reason: governor.ReasonClass, Client: netip.MustParseAddr("192.0.2.9"), At: at},
		{Door: "milter", Key: "rest", Refused: true, Reason: governor.ReasonClass, At: at},
	} {
		e.Observe(v)
		e.Observe(v)
	}
	if p := e.pending(); len(p) != 0 {
		t.Fatalf("queued %v, want nothing", p)
	}
	if st := e.State(); st.Tracked != 0 {
		t.Fatalf("tracked %d addresses, want 0", st.Tracked)
	}
}

// TestEscalateFailedRetries: a request the helper did not carry out
// leaves the address to count again from its next refusal.
func TestEscalateFailedRetries(t *testing.T) {
	e, _ := newTest(2)
	a := netip.MustParseAddr("192.0.2.10")
	e.Observe(refusal(a.String(), t0, governor.ReasonShare))
	e.Observe(refusal(a.String(), t0, governor.ReasonShare))
	if p := e.pending(); len(p) != 1 {
		t.Fatalf("queued %v", p)
	}
	e.failedFor(a, io.ErrUnexpectedEOF)
	st := e.State()
	if st.Failed != 1 || st.Dropping != 0 || st.Error != io.ErrUnexpectedEOF.Error() {
		t.Fatalf("state %+v after a failure", st)
	}
	e.Observe(refusal(a.String(), t0.Add(time.Second), governor.ReasonShare))
	e.Observe(refusal(a.String(), t0.Add(time.Second), governor.ReasonShare))
	if p := e.pending(); len(p) != 1 {
		t.Fatalf("queued %v after the failure and 2 refusals, want a retry", p)
	}
}

// TestEscalateQueueFull: past the queue's bound an escalation is counted
// as lost, and the address counts again.
func TestEscalateQueueFull(t *testing.T) {
	e, _ := newTest(2)
	for i := range queueLen + 1 {
		a := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}).String()
		e.Observe(refusal(a, t0, governor.ReasonShare))
		e.Observe(refusal(a, t0, governor.ReasonShare))
	}
	if st := e.State(); st.QueueFull != 1 || st.Dropping != queueLen {
		t.Fatalf("state %+v, want 1 lost to the full queue and %d dropping", st, queueLen)
	}
}

// TestEscalateBounded: a flood from more addresses than MaxTracked
// holds MaxTracked; a sweep, at most once a second, makes room once
// their windows end.
func TestEscalateBounded(t *testing.T) {
	e, _ := newTest(3)
	addr := func(i int) string { return netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}).String() }
	for i := range MaxTracked + 100 {
		e.Observe(refusal(addr(i), t0, governor.ReasonShare))
	}
	if st := e.State(); st.Tracked != MaxTracked {
		t.Fatalf("tracked %d, want the bound %d", st.Tracked, MaxTracked)
	}
	later := t0.Add(2 * time.Minute)
	e.Observe(refusal("192.0.2.77", later, governor.ReasonShare))
	if st := e.State(); st.Tracked != 1 {
		t.Fatalf("tracked %d after the sweep, want only the new address", st.Tracked)
	}
}
