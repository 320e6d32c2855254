package governor

import (
	"net/netip"
	"testing"
)

// TestOneSessionOneSlot: an SMTP session that anvil and then the milter
// see from the same smtpd process holds one slot of its class, so a class
// of 2 admits exactly 2 sessions; the slot ends with anvil's disconnect.
// Without the smtpd's process id the doors cannot tell it is one session.
func TestOneSessionOneSlot(t *testing.T) {
	f := milterFixture(t, MilterRules{})
	f.g.pairs = NewSessionPairs()
	var streams [3]AnvilStream
	var ms [3]MilterSession
	for i := range 2 {
		streams[i].SetPeerPID(100 + i)
		ms[i].SetPeerPID(100 + i)
		f.connect(t, &streams[i], "smtp:203.0.113.7")
		if a := f.g.MilterConnect(f.ctx, &ms[i], "[203.0.113.7]", dialup, "4000"); a != "" {
			t.Fatalf("session %d: milter said %q", i+1, a)
		}
		if n := f.held(t, "dialup"); n != int64(i+1) {
			t.Fatalf("after session %d the class holds %d slots", i+1, n)
		}
	}
	// The third session: anvil refuses it (its figure is over smtpd's
	// limit), so smtpd never asks the milter.
	streams[2].SetPeerPID(102)
	f.connect(t, &streams[2], "smtp:203.0.113.7")
	if streams[2].Holding() && streams[2].slot != nil {
		t.Fatal("the third session took a class slot")
	}
	f.g.AnvilDisconnect(f.ctx, &streams[2], "smtp:203.0.113.7")
	// The milter's close leaves the slot to anvil's disconnect.
	f.g.MilterClose(f.ctx, &ms[0])
	if n := f.held(t, "dialup"); n != 2 {
		t.Fatalf("after the first milter close: %d slots, want 2", n)
	}
	f.g.AnvilDisconnect(f.ctx, &streams[0], "smtp:203.0.113.7")
	if n := f.held(t, "dialup"); n != 1 || f.g.pairs.Len() != 1 {
		t.Fatalf("after the first session: %d slots, %d pairs; want 1, 1", n, f.g.pairs.Len())
	}
	f.g.AnvilClose(f.ctx, &streams[1]) // smtpd went away
	f.g.MilterClose(f.ctx, &ms[1])
	if n := f.held(t, "dialup"); n != 0 || f.g.pairs.Len() != 0 {
		t.Fatalf("at the end: %d slots, %d pairs", n, f.g.pairs.Len())
	}
}

// TestPairsNeedTheSameProcessAndClient: a milter session of another smtpd
// process, or of the same process with another client, takes a slot of
// its own; so does a second milter session on an adopted slot.
func TestPairsNeedTheSameProcessAndClient(t *testing.T) {
	f := milterFixture(t, MilterRules{})
	f.g.pairs = NewSessionPairs()
	var st AnvilStream
	st.SetPeerPID(7)
	f.connect(t, &st, "smtp:203.0.113.7")
	var other, wrongAddr, unknown, first, second MilterSession
	other.SetPeerPID(8)
	wrongAddr.SetPeerPID(7)
	first.SetPeerPID(7)
	second.SetPeerPID(7)
	f.g.MilterConnect(f.ctx, &other, "[203.0.113.7]", dialup, "1")
	if n := f.held(t, "dialup"); n != 2 {
		t.Fatalf("another process: %d slots, want 2", n)
	}
	f.g.MilterClose(f.ctx, &other)
	f.g.MilterConnect(f.ctx, &wrongAddr, "[203.0.113.8]", netip.MustParseAddr("203.0.113.8"), "1")
	if n := f.held(t, "dialup"); n != 2 {
		t.Fatalf("another client: %d slots, want 2", n)
	}
	f.g.MilterClose(f.ctx, &wrongAddr)
	f.g.MilterConnect(f.ctx, &unknown, "[203.0.113.7]", dialup, "1") // pid 0: TCP
	if n := f.held(t, "dialup"); n != 2 {
		t.Fatalf("no process id: %d slots, want 2", n)
	}
	f.g.MilterClose(f.ctx, &unknown)
	f.g.MilterConnect(f.ctx, &first, "[203.0.113.7]", dialup, "1")
	if n := f.held(t, "dialup"); n != 1 {
		t.Fatalf("adopted: %d slots, want 1", n)
	}
	f.g.MilterConnect(f.ctx, &second, "[203.0.113.7]", dialup, "2")
	if n := f.held(t, "dialup"); n != 2 {
		t.Fatalf("a second milter session on one anvil slot: %d slots, want 2", n)
	}
}

// TestPairMovesToTheMilterClass: anvil knows only the address; when the
// host name puts the session in another class, the session ends up with
// one slot, in the milter's class.
func TestPairMovesToTheMilterClass(t *testing.T) {
	f := milterFixture(t, MilterRules{})
	f.g.pairs = NewSessionPairs()
	var st AnvilStream
	var ms MilterSession
	st.SetPeerPID(9)
	ms.SetPeerPID(9)
	addr := netip.MustParseAddr("198.51.100.9")
	f.connect(t, &st, "smtp:198.51.100.9")
	if n := f.held(t, "rest"); n != 1 {
		t.Fatalf("anvil: rest holds %d", n)
	}
	if a := f.g.MilterConnect(f.ctx, &ms, "host.dialup.example", addr, "1"); a != "" {
		t.Fatalf("milter: %q", a)
	}
	if r, d := f.held(t, "rest"), f.held(t, "dialup"); r != 0 || d != 1 {
		t.Fatalf("after the milter: rest %d, dialup %d; want 0, 1", r, d)
	}
	f.g.AnvilDisconnect(f.ctx, &st, "smtp:198.51.100.9")
	f.g.MilterClose(f.ctx, &ms)
	if r, d := f.held(t, "rest"), f.held(t, "dialup"); r != 0 || d != 0 {
		t.Fatalf("at the end: rest %d, dialup %d", r, d)
	}
}
