package poolstatus

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"sluice/internal/status"
)

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
