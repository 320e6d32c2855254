package poolstatus

import (
	"context"
	"net"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"sluice/internal/mux"
	"sluice/internal/pool"
	"sluice/internal/status"
)

// The two builders agree: a real pool behind a real multiplexor socket,
// with a stopped slot, an idle one that served relayok and a busy one,
// read from its snapshot and through the socket, gives the same slots
// (but for the request count, which "workers" does not carry) and the
// same gauges.
func TestSnapshotAndPollAgree(t *testing.T) {
	dir := t.TempDir()
	p := startPool(t, pool.Config{
		Program: fakeWorker, Args: []string{"-server"}, Dir: dir, Env: append(os.Environ(), "FAKEWORKER_SLOW_MS=3600000"),
		MinWorkers: 2, MaxWorkers: 3, MaxRequests: 500,
		IdleTime: time.Hour, BusyTimeout: time.Hour, CmdTimeout: 10 * time.Second,
		SlewTime: 10 * time.Millisecond, QueueSize: 4, QueueTimeout: 5 * time.Second,
		KillGrace: 200 * time.Millisecond,
	})
	sock := dir + "/mx.sock"
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := mux.New(mux.Options{Pool: p, Timeout: 10 * time.Second})
	serveDone := make(chan error, 1)
	go func() { serveDone <- srv.Serve(ln, true) }()
	hangCtx, stopHang := context.WithCancel(context.Background())
	hangDone := make(chan pool.Result, 1)
	defer func() {
		stopHang()
		<-hangDone
		srv.Close()
		<-serveDone
	}()
	go func() { hangDone <- p.Do(hangCtx, pool.Request{Line: "recipok <a@b> slow", Queue: true}) }()
	var sn pool.Snapshot
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
			var ok bool
			if sn, ok = p.Snapshot(); ok && cond() {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the pool never had %s: %+v", what, sn.Slots)
			}
		}
	}
	waitFor("one idle and one busy worker", func() bool { return sn.Count(pool.Busy) == 1 && sn.Count(pool.Idle) == 1 })
	if r := p.Do(context.Background(), pool.Request{Line: "relayok 192.0.2.9 host 25 127.0.0.1 25 NOQUEUE", Queue: true}); r.Err != nil {
		t.Fatal(r.Err)
	}
	waitFor("the idle worker done with relayok", func() bool {
		return sn.Count(pool.Busy) == 1 && slices.ContainsFunc(sn.Slots, func(s pool.SlotInfo) bool { return s.State == pool.Idle && s.Last == pool.RelayOK })
	})
	polled, err := Poll(context.Background(), sock, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	built := FromSnapshot(sn)
	if len(polled.Slots) != len(built.Slots) {
		t.Fatalf("polled %d slots, built %d", len(polled.Slots), len(built.Slots))
	}
	cmds := map[string]int{}
	for i, b := range built.Slots {
		q := polled.Slots[i]
		cmds[b.State+" "+b.Cmd]++
		if q.State != b.State || q.PID != b.PID || q.Cmd != b.Cmd || q.Tag != b.Tag {
			t.Errorf("slot %d: polled %+v, built %+v", i, q, b)
		}
		if d := q.Since.Sub(b.Since); d < -2*time.Second || d > 2*time.Second {
			t.Errorf("slot %d: polled since %v, built %v", i, q.Since, b.Since)
		}
	}
	if cmds["B recipok"] != 1 || cmds["I relayok"] != 1 || cmds[status.SlotStopped+" "] != 1 {
		t.Errorf("slots not as set up: %v", cmds)
	}
	if polled.Msgs != built.Msgs || polled.Activations != built.Activations || polled.QueueSize != built.QueueSize || polled.Queued != built.Queued {
		t.Errorf("polled %+v, built %+v", *polled, *built)
	}
	if g, w := Gauges(polled), Gauges(built); g != w || g.Busy != 1 || g.Idle != 1 || g.Stopped != 1 {
		t.Errorf("gauges: polled %+v, built %+v", g, w)
	}
}

func TestParseStatus(t *testing.T) {
	for _, c := range []struct {
		in   string
		want *status.Pool // nil: an error
	}{
		{"SIBK 7 9 5 2 100\n", &status.Pool{Msgs: 7, Activations: 9, QueueSize: 5, Queued: 2,
			Slots: []status.Slot{{State: "S"}, {State: "I"}, {State: "B"}, {State: "K"}}}},
		{"I 0 0 0 0 0 extra", &status.Pool{Slots: []status.Slot{{State: "I"}}}},
		{" 0 0 0 0 0", nil}, // no slots: five fields
		{"", nil},
		{"SI 1 2 3 4", nil},                      // a field short
		{"SX 1 2 3 4 5", nil},                    // an unknown state
		{"si 1 2 3 4 5", nil},                    // letters are capitals
		{"SI 1 x 3 4 5", nil},                    // not a number
		{"SI 1 2 3 4 5.5", nil},                  // nor this
		{"SI 99999999999999999999 2 3 4 5", nil}, // out of range
		{"error: bad command\n", nil},
	} {
		got, err := parseStatus(c.in)
		if c.want == nil {
			if err == nil || !strings.Contains(err.Error(), "unexpected reply") {
				t.Errorf("%q: %+v %v, want an error", c.in, got, err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%q: %+v %v, want %+v", c.in, got, err, c.want)
		}
	}
	// A negative activation count is read as 0, not wrapped.
	if p, err := parseStatus("I 0 -4 0 0 0"); err != nil || p.Activations != 0 {
		t.Errorf("negative activations: %+v %v", p, err)
	}
}

func TestParseWorkers(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	p, err := parseStatus("SIBBK 0 0 0 0 0")
	if err != nil {
		t.Fatal(err)
	}
	parseWorkers(p, []byte(strings.Join([]string{
		"0 S ago=5",
		"1 I 101 last=relayok ago=3",
		"2 B 102 scan last=relayok ago=1 (tag with (parens) and spaces)",
		"3 B 103 ago=x",
		"4 K 104 last=recipok ago=0",
		"", "garbage", "9 I 109 ago=1", "-1 I 1", "x I 1 ago=1", // ignored
		"",
	}, "\n")), now)
	want := []status.Slot{
		{State: "S", Since: now.Add(-5 * time.Second)},
		{State: "I", PID: 101, Cmd: "relayok", Since: now.Add(-3 * time.Second)},
		{State: "B", PID: 102, Cmd: "scan", Tag: "tag with (parens) and spaces", Since: now.Add(-time.Second)},
		{State: "B", PID: 103},
		{State: "K", PID: 104, Cmd: "recipok", Since: now},
	}
	if !reflect.DeepEqual(p.Slots, want) {
		t.Errorf("slots:\n got %+v\nwant %+v", p.Slots, want)
	}
}

// FuzzParse: any replies give a pool or an error, never a panic, and
// never more slots than the status line has letters.
func FuzzParse(f *testing.F) {
	f.Add("SIBK 7 9 5 2 100\n", "0 S ago=5\n1 I 101 last=relayok ago=3\n2 B 102 scan ago=1 (t)\n")
	f.Add("I 0 0 0 0 0", "0 I 1 ago=-5 ()")
	f.Add("", "")
	f.Fuzz(func(t *testing.T, st, workers string) {
		p, err := parseStatus(st)
		if err != nil {
			return
		}
		n := len(p.Slots)
		parseWorkers(p, []byte(workers), time.Unix(0, 0))
		if len(p.Slots) != n {
			t.Fatalf("workers changed the slot count from %d to %d", n, len(p.Slots))
		}
		for _, s := range p.Slots {
			if s.State == "" {
				t.Fatalf("a slot without a state: %+v", p.Slots)
			}
		}
	})
}
