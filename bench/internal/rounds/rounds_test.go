package rounds

import (
	"slices"
	"testing"
)

func TestOrder(t *testing.T) {
	targets := []string{"a", "b", "c"}
	for _, tc := range []struct {
		round int
		want  []string
	}{
		{1, []string{"a", "b", "c"}},
		{2, []string{"b", "c", "a"}},
		{3, []string{"c", "a", "b"}},
		{4, []string{"a", "b", "c"}},
		{0, []string{"c", "a", "b"}},
	} {
		if got := Order(targets, tc.round); !slices.Equal(got, tc.want) {
			t.Errorf("Order(round %d) = %v, want %v", tc.round, got, tc.want)
		}
	}
	if got := Order(nil, 3); len(got) != 0 {
		t.Errorf("Order(nil) = %v", got)
	}
}

func TestMedianAndSpread(t *testing.T) {
	for _, tc := range []struct {
		name   string
		v      []float64
		want   Summary
		spread string
	}{
		{"none", nil, Summary{}, "min 0.0 max 0.0 over 0 rounds"},
		{"one", []float64{612.3}, Summary{612.3, 612.3, 612.3, 1}, "min 612.3 max 612.3 over 1 round"},
		{"odd, unsorted", []float64{3, 1, 2}, Summary{2, 1, 3, 3}, "min 1.0 max 3.0 over 3 rounds"},
		{"even: mean of the middle two", []float64{4, 1, 3, 2}, Summary{2.5, 1, 4, 4}, "min 1.0 max 4.0 over 4 rounds"},
		{"equal values", []float64{5, 5, 5, 5, 5}, Summary{5, 5, 5, 5}, "min 5.0 max 5.0 over 5 rounds"},
		{"negative", []float64{-1, -3, 2}, Summary{-1, -3, 2, 3}, "min -3.0 max 2.0 over 3 rounds"},
	} {
		got := Summarize(tc.v)
		if got != tc.want {
			t.Errorf("%s: Summarize(%v) = %+v, want %+v", tc.name, tc.v, got, tc.want)
		}
		if m := Median(tc.v); m != tc.want.Median {
			t.Errorf("%s: Median = %v, want %v", tc.name, m, tc.want.Median)
		}
		if s := got.Spread(1); s != tc.spread {
			t.Errorf("%s: Spread = %q, want %q", tc.name, s, tc.spread)
		}
	}
	v := []float64{3, 1, 2}
	Median(v)
	if !slices.Equal(v, []float64{3, 1, 2}) {
		t.Errorf("Median sorted its argument: %v", v)
	}
}

// TestRatio: two decimals as awk's printf "%.2f" prints them, 0.00 for a
// zero or negative denominator.
func TestRatio(t *testing.T) {
	for _, tc := range []struct {
		num, den float64
		want     string
	}{
		{612.3, 773.2, "0.79"},
		{914.2, 920.6, "0.99"},
		{118000, 5000, "23.60"},
		{1, 3, "0.33"},
		{2, 3, "0.67"},
		{0.125, 1, "0.12"}, // round half to even on an exact binary tie, as C's printf
		{0.375, 1, "0.38"},
		{5, 0, "0.00"},
		{5, -1, "0.00"},
		{0, 5, "0.00"},
		{1e6, 1, "1000000.00"},
	} {
		if got := Ratio(tc.num, tc.den); got != tc.want {
			t.Errorf("Ratio(%v, %v) = %q, want %q", tc.num, tc.den, got, tc.want)
		}
	}
}

func TestVerdicts(t *testing.T) {
	for _, tc := range []struct {
		got  string
		want string
	}{
		{AtLeast(0.80, 0.80), "met"},
		{AtLeast(0.79, 0.80), "MISSED"},
		{AtMost(3000, 3000), "met"},
		{AtMost(3000.1, 3000), "MISSED"},
		// The printed figure is judged: 0.7996 prints as 0.80.
		{AtLeast(RatioValue(0.7996, 1), 0.80), "met"},
		{AtLeast(RatioValue(1, 0), 0.80), "MISSED"},
	} {
		if tc.got != tc.want {
			t.Errorf("verdict %q, want %q", tc.got, tc.want)
		}
	}
}

func TestSeries(t *testing.T) {
	var s Series
	if s.Values("x", 1) != nil || s.Median("x", 1) != 0 {
		t.Fatal("an empty series has values")
	}
	for i, v := range []float64{100, 120, 110} {
		s.Add("sluice", 64, v)
		s.Add("peer", 64, []float64{50, 40, 0}[i])
	}
	s.Add("sluice", 1, 7)
	if got := s.Values("sluice", 64); !slices.Equal(got, []float64{100, 120, 110}) {
		t.Errorf("Values = %v", got)
	}
	if got := s.Summary("sluice", 64); got != (Summary{110, 100, 120, 3}) {
		t.Errorf("Summary = %+v", got)
	}
	// Round by round: 100/50, 120/40, 110/0 (counted as 0).
	if got := s.RoundRatios("sluice", "peer", 64); got != (Summary{2, 0, 3, 3}) {
		t.Errorf("RoundRatios = %+v", got)
	}
	if got := s.RoundRatios("sluice", "peer", 1); got.N != 0 {
		t.Errorf("RoundRatios with no peer values = %+v", got)
	}
}

func TestField(t *testing.T) {
	line := "target=sluice c=64 reqs=590000 secs=5.00 rps=118000.0 p50_us=400.0 errors=0 actions=DUNNO:1,DEFER:2 first_action=\"DEFER x\""
	for _, tc := range []struct {
		name, want string
		ok         bool
	}{
		{"target", "sluice", true},
		{"rps", "118000.0", true},
		{"c", "64", true},
		{"actions", "DUNNO:1,DEFER:2", true},
		{"p99_us", "", false},
		{"s", "", false},     // no prefix match: secs= is not s=
		{"rps=1", "", false}, // a name with = in it matches nothing
		{"first_action", "\"DEFER", true},
	} {
		got, ok := Field(line, tc.name)
		if got != tc.want || ok != tc.ok {
			t.Errorf("Field(%q) = %q, %v; want %q, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
	if _, ok := Field("", "rps"); ok {
		t.Error("Field of an empty line found rps")
	}
}

func TestNumber(t *testing.T) {
	for _, tc := range []struct {
		line, name string
		want       float64
		bad        bool
	}{
		{"rps=118000.0 errors=0", "rps", 118000, false},
		{"rps=118000.0 errors=0", "errors", 0, false},
		{"rps= errors=0", "rps", 0, true},
		{"rps=fast", "rps", 0, true},
		{"rps=1.2.3", "rps", 0, true},
		{"errors=0", "rps", 0, true},
		{"garbage without pairs", "rps", 0, true},
	} {
		got, err := Number(tc.line, tc.name)
		if (err != nil) != tc.bad || got != tc.want {
			t.Errorf("Number(%q, %q) = %v, %v", tc.line, tc.name, got, err)
		}
	}
}

// TestMedianText: as lib.sh's median printed a median: the middle value
// as given, or awk's number output for the mean of two.
func TestMedianText(t *testing.T) {
	for _, tc := range []struct {
		v    []float64
		want string
	}{
		{[]float64{5570.6}, "5570.6"},
		{[]float64{3000, 1, 5}, "5.0"},
		{[]float64{5570.6, 2000}, "3785.3"},
		{[]float64{100, 200}, "150"},
		{[]float64{118234.5, 118235.4}, "118235"},
		{[]float64{0.1, 0.2}, "0.15"},
		{nil, "0"},
	} {
		if got := MedianText(tc.v, 1); got != tc.want {
			t.Errorf("MedianText(%v) = %q, want %q", tc.v, got, tc.want)
		}
	}
}

func TestWithRange(t *testing.T) {
	for _, tc := range []struct {
		v    []float64
		prec int
		want string
	}{
		{[]float64{3, 1, 2.5, 9}, 2, "2.75 (1.00-9.00)"},
		{[]float64{12.34}, 1, "12.3 (12.3-12.3)"},
		{nil, 1, "0.0 (0.0-0.0)"},
	} {
		if got := Summarize(tc.v).WithRange(tc.prec); got != tc.want {
			t.Errorf("Summarize(%v).WithRange(%d) = %q, want %q", tc.v, tc.prec, got, tc.want)
		}
	}
}
