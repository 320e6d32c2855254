package loadgen

import (
	"bytes"
	"flag"
	"io"
	"math"
	"strings"
	"testing"
	"time"

	"sluice/bench/internal/hist"
)

func TestFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		bad  string // the Check error's text, "" when valid
	}{
		{nil, ""},
		{[]string{"-c", "8", "-duration", "1s", "-warmup", "0s", "-label", "x", "-json"}, ""},
		{[]string{"-c", "0"}, "-c must be"},
		{[]string{"-duration", "0s"}, "-duration must be"},
		{[]string{"-warmup", "-1s"}, "-warmup must not"},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		var f Flags
		f.Register(fs, "clients", "dflt")
		if !Parse(fs, "t", tc.args, io.Discard) {
			t.Fatalf("%q: not parsed", tc.args)
		}
		err := f.Check()
		if tc.bad == "" && err != nil || tc.bad != "" && (err == nil || !strings.Contains(err.Error(), tc.bad)) {
			t.Errorf("%q: Check() = %v, want %q", tc.args, err, tc.bad)
		}
		if len(tc.args) == 0 && (f.Conns != 1 || f.Duration != 5*time.Second || f.Warmup != 500*time.Millisecond || f.Label != "dflt" || f.JSON) {
			t.Errorf("defaults: %+v", f)
		}
		if len(tc.args) == 9 && (f.Conns != 8 || f.Duration != time.Second || f.Warmup != 0 || f.Label != "x" || !f.JSON) {
			t.Errorf("%q: %+v", tc.args, f)
		}
	}
	// Arguments left over, and unknown flags, are refused.
	for _, args := range [][]string{{"extra"}, {"-nosuch"}} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		var f Flags
		f.Register(fs, "clients", "dflt")
		var errb bytes.Buffer
		if Parse(fs, "prog", args, &errb) {
			t.Errorf("%q parsed", args)
		}
		if args[0] == "extra" && errb.String() != "prog: unexpected arguments: [\"extra\"]\n" {
			t.Errorf("%q: %q", args, errb.String())
		}
	}
}

func TestWindow(t *testing.T) {
	before := time.Now()
	w := NewWindow(time.Second, 2*time.Second)
	if w.Start.Before(before.Add(time.Second)) || w.End.Sub(w.Start) != 2*time.Second {
		t.Fatalf("window %v", w)
	}
	in := w.Start.Add(time.Millisecond)
	for _, tc := range []struct {
		start, end time.Time
		want       bool
	}{
		{w.Start, w.End, true},
		{in, in, true},
		{w.Start.Add(-1), in, false}, // began in the warm-up
		{in, w.End.Add(1), false},    // ended after the period
	} {
		if got := w.Holds(tc.start, tc.end); got != tc.want {
			t.Errorf("Holds(%v, %v) = %v", tc.start.Sub(w.Start), tc.end.Sub(w.Start), got)
		}
	}
}

func TestSummarize(t *testing.T) {
	var h hist.Hist
	for i := 1; i <= 1000; i++ {
		h.Record(time.Duration(i) * time.Microsecond)
	}
	l := Summarize(&h, 2)
	near := func(got, want float64) bool { return math.Abs(got-want) <= want/100 }
	if l.Reqs != 1000 || l.RPS != 500 || !near(l.P50us, 500) || !near(l.P99us, 990) || !near(l.P999us, 999) {
		t.Errorf("%+v", l)
	}
	if l := Summarize(new(hist.Hist), 0); l != (Latency{}) {
		t.Errorf("empty: %+v", l)
	}
}

type res struct {
	N int `json:"n"`
}

func (r res) String() string { return "n=" + string(rune('0'+r.N)) }

type unencodable struct{ F func() }

func (unencodable) String() string { return "u" }

func TestPrint(t *testing.T) {
	for _, tc := range []struct {
		res    interface{ String() string }
		asJSON bool
		failed bool
		out    string
		code   int
	}{
		{res{3}, false, false, "n=3\n", 0},
		{res{3}, true, false, "{\"n\":3}\n", 0},
		{res{3}, false, true, "n=3\n", 1},
		{unencodable{}, true, false, "", 1},
	} {
		var out, errb bytes.Buffer
		if code := Print(&out, &errb, "prog", tc.res, tc.asJSON, tc.failed); code != tc.code || out.String() != tc.out {
			t.Errorf("%v json=%v failed=%v: %d %q (stderr %q)", tc.res, tc.asJSON, tc.failed, code, out.String(), errb.String())
		}
		if tc.code == 1 && !tc.failed && !strings.HasPrefix(errb.String(), "prog: ") {
			t.Errorf("encoding error not described: %q", errb.String())
		}
	}
}
