package main

import (
	"bytes"
	"encoding/xml"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sluice/internal/config"
	"sluice/internal/policy"
)

func TestParseSettings(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	s, err := parseSettings(nil, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.steps; len(got) != 4 || got[0] != 1e4 || got[3] != 1e7 {
		t.Fatalf("default steps %v", got)
	}
	if s.svg != "docs/scale.svg" || s.duration != 5*time.Second || s.idle != 10*time.Second || len(s.stores) != 2 || len(s.algos) != 2 || s.stall {
		t.Fatalf("defaults %+v", s)
	}
	s, err = parseSettings([]string{"-steps", "1e3,5000,1e6", "-algos", "smooth", "-svg", "none"},
		env(map[string]string{"MAXKEYS": "5000", "STORES": "redis,memory", "ROUNDS": "2"}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.steps) != 2 || s.steps[1] != 5000 || s.svg != "" || s.algos[0] != "smooth" || len(s.algos) != 1 ||
		s.stores[0] != "memory" || s.rounds != 2 {
		t.Fatalf("parsed %+v", s)
	}
	s, err = parseSettings([]string{"-rounds", "4"}, env(map[string]string{"ROUNDS": "2", "STALL": "1", "DEADLINE": "20ms"}), io.Discard)
	if err != nil || s.rounds != 4 || !s.stall || s.deadline != 20*time.Millisecond {
		t.Fatalf("flags over the environment: %+v %v", s, err)
	}
	if _, err := parseSettings([]string{"-h"}, env(nil), io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v", err)
	}
	for _, bad := range []struct {
		args []string
		env  map[string]string
	}{
		{[]string{"-steps", "100,10"}, nil},
		{[]string{"-steps", "0"}, nil},
		{[]string{"-steps", "1e9"}, nil},
		{[]string{"-steps", "ten"}, nil},
		{[]string{"-steps", "1e"}, nil},
		{[]string{"-steps", ""}, nil},
		{nil, map[string]string{"MAXKEYS": "10"}},
		{nil, map[string]string{"MAXKEYS": "-1"}},
		{[]string{"-duration", "0s"}, nil},
		{[]string{"-idle", "x"}, nil},
		{[]string{"-stores", "memcached"}, nil},
		{[]string{"-algos", "exact,anvil"}, nil},
		{[]string{"-rounds", "0"}, nil},
		{nil, map[string]string{"ROUNDS": "many"}},
		{[]string{"-stop", "-1s"}, nil},
		{[]string{"extra"}, nil},
	} {
		if _, err := parseSettings(bad.args, env(bad.env), io.Discard); err == nil {
			t.Errorf("%v %v: no error", bad.args, bad.env)
		}
	}
}

// The driver's requests are what the policy door decodes: an RCPT
// request of the numbered sender.
func TestRequestDecodes(t *testing.T) {
	var b []byte
	for _, i := range []int{0, 7, 1234567} {
		b = appendRequest(b, i)
	}
	d := policy.NewDecoder(bytes.NewReader(b), policy.Limits{MaxLine: 1024, MaxAttrs: 64, MaxRequest: 8192})
	for _, want := range []string{"user0@sender0.example", "user7@sender7.example", "user1234567@sender67.example"} {
		var req policy.Request
		if err := d.Decode(&req); err != nil {
			t.Fatal(err)
		}
		if req.Sender != want || req.ProtocolState != "RCPT" || req.Request != "smtpd_access_policy" || req.ClientAddress == "" {
			t.Fatalf("decoded %+v, want sender %q at RCPT", req, want)
		}
	}
}

// The configurations the driver writes are valid and say what it
// measures: one limit of the algorithm, keyed on the sender, the store
// asked for, and room for the keys.
func TestSluiceConfig(t *testing.T) {
	for _, c := range []struct{ algo, redis string }{{"exact", ""}, {"smooth", "127.0.0.1:6390"}} {
		text := sluiceConfig(t.TempDir(), 10025, c.algo, 2_000_000, c.redis)
		cfg, errs := config.Parse([]byte(text), "scale.toml")
		if len(errs) > 0 {
			t.Fatalf("%s:\n%s\n%v", c.algo, text, errs)
		}
		if r := cfg.Policy.Rules; len(r) != 1 || len(r[0].Limit) != 1 || r[0].Limit[0] != "10/1h "+c.algo || r[0].Key[0] != "sender" {
			t.Fatalf("rules %+v", r)
		}
		if want := map[bool]string{false: "memory", true: "redis"}[c.redis != ""]; cfg.Store.Kind != want {
			t.Fatalf("store %q, want %q", cfg.Store.Kind, want)
		}
		if cfg.Limiter.MaxKeys < 2_000_000 {
			t.Fatalf("max_keys %d below the keys", cfg.Limiter.MaxKeys)
		}
	}
	stall := replaceOnce(sluiceConfig(t.TempDir(), 10025, "exact", 10, "127.0.0.1:6390"), `deadline = "1s"`, "deadline = \"50ms\"\nfail_mode = \"open\"")
	cfg, errs := config.Parse([]byte(stall), "stall.toml")
	if len(errs) > 0 || cfg.Store.Redis.Deadline.D() != 50*time.Millisecond || cfg.Store.Redis.FailMode != "open" {
		t.Fatalf("stall config: %v %+v", errs, cfg.Store.Redis)
	}
}

func TestLastWrite(t *testing.T) {
	log := filepath.Join(t.TempDir(), "log")
	lines := `time=x level=INFO msg="sluice started"
time=x level=INFO msg="store snapshot written" file=/s keys=10 bytes=27 took=2.236ms longest_lock=38.327µs
time=x level=INFO msg="policy: 3 more refused" took=9s
time=x level=INFO msg="store compaction written" took=1.5s
time=x level=INFO msg="store snapshot written" took=850µs
`
	if err := os.WriteFile(log, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	if d, n := lastWrite(log, 0); d != 1500*time.Millisecond || n != 3 {
		t.Fatalf("longest %s of %d writes, want 1.5s of 3", d, n)
	}
	if d, n := lastWrite(filepath.Join(t.TempDir(), "none"), 0); d != 0 || n != 0 {
		t.Fatalf("no file: %s %d", d, n)
	}
}

func TestProcFields(t *testing.T) {
	status := "Name:\tsluice\nVmPeak:\t  100 kB\nVmRSS:\t   2048 kB\n"
	if v, err := statusField(status, "VmRSS"); err != nil || v != 2048*1024 {
		t.Fatalf("VmRSS %d %v", v, err)
	}
	if _, err := statusField(status, "VmSwap"); err == nil {
		t.Fatal("a missing field had a value")
	}
	info := "# Memory\r\nused_memory:1048576\r\nused_memory_human:1.00M\r\n"
	if v, err := infoField(info, "used_memory"); err != nil || v != 1048576 {
		t.Fatalf("used_memory %d %v", v, err)
	}
	if _, err := infoField(info, "used_memory_rss"); err == nil {
		t.Fatal("a missing INFO field had a value")
	}
	if v := ioField(os.Getpid(), "wchar"); v < 0 {
		t.Fatalf("wchar %d", v)
	}
	if v, err := rss(os.Getpid()); err != nil || v <= 0 {
		t.Fatalf("own RSS %d %v", v, err)
	}
}

func TestQuantile(t *testing.T) {
	var v []time.Duration
	for i := 1; i <= 200; i++ {
		v = append(v, time.Duration(201-i)*time.Millisecond)
	}
	if q := quantile(v, 0.99); q != 198*time.Millisecond {
		t.Fatalf("p99 of 1..200 ms: %s", q)
	}
	if q := quantile(v, 1); q != 200*time.Millisecond {
		t.Fatalf("p100: %s", q)
	}
	if q := quantile(nil, 0.99); q != 0 {
		t.Fatalf("p99 of nothing: %s", q)
	}
}

// The plot is well-formed SVG with a line per store and algorithm, one
// point per run, and escaped text.
func TestPlot(t *testing.T) {
	var rows []row
	for _, n := range []int{1e4, 1e5, 1e6} {
		for _, st := range []string{"memory", "redis"} {
			for _, a := range []string{"exact", "smooth"} {
				rows = append(rows, row{Store: st, Algo: a, Keys: n, BytesPerKey: 150 + float64(n%7), RPS: 20000, IdleWps: 0})
			}
		}
	}
	svg := plot(rows, "v1 <dirty> & more")
	dec := xml.NewDecoder(bytes.NewReader(svg))
	lines, points := 0, 0
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not XML: %v\n%s", err, svg)
		}
		if se, ok := tok.(xml.StartElement); ok {
			switch se.Name.Local {
			case "polyline":
				lines++
			case "circle":
				points++
			}
		}
	}
	if lines != 4*len(panels) || points != len(rows)*len(panels) {
		t.Fatalf("%d lines and %d points, want %d and %d", lines, points, 4*len(panels), len(rows)*len(panels))
	}
	if !strings.Contains(string(svg), "v1 &lt;dirty&gt; &amp; more") {
		t.Fatal("the revision is not escaped")
	}
	// One step only: no division by zero, points inside the panel.
	one := plot(rows[:1], "")
	if bytes.Contains(one, []byte("NaN")) || bytes.Contains(one, []byte("Inf")) {
		t.Fatalf("one step: %s", one)
	}
}

func TestNiceStep(t *testing.T) {
	for _, c := range []struct{ in, want float64 }{{0, 1}, {0.3, 0.5}, {1, 1}, {1.1, 2}, {3, 5}, {7, 10}, {4200, 5000}, {-1, 1}} {
		if got := niceStep(c.in); got != c.want {
			t.Errorf("niceStep(%g) = %g, want %g", c.in, got, c.want)
		}
	}
}

// A run line reads back as the row that printed it, and -from plots a
// raw log's runs again.
func TestReplot(t *testing.T) {
	rows := []row{
		{Store: "memory", Algo: "exact", Keys: 1e4, FillSecs: 1.5, BytesPerKey: 646, RSSPerKey: 646, IdleWps: 22, IdleCPU: 0.3,
			RPS: 9626, P99us: 111670, LoadDisk: 54735, SnapSecs: 0.009, Writes: 1, StopSecs: 1.91, RestoreSecs: 1.715},
		{Store: "redis", Algo: "smooth", Keys: 1e6, FillSecs: 79.8, BytesPerKey: 161, RSSPerKey: 161, SluiceRSS: 10, IdleWps: 183,
			IdleCPU: 0.4, RPS: 9006, P99us: 90178, LoadErrors: 2, SnapSecs: 2.86, RestoreSecs: 2.852},
	}
	var log strings.Builder
	log.WriteString("scale: sluice abc123, 2026-11-26T21:18:27Z, steps [10000 1000000]\n12:00:00 progress\n")
	for _, r := range rows {
		got, err := parseRun(r.String())
		if err != nil {
			t.Fatal(err)
		}
		if got != r {
			t.Fatalf("read back\n%+v\nwant\n%+v", got, r)
		}
		log.WriteString(r.String() + "\n")
	}
	dir := t.TempDir()
	file, svg := filepath.Join(dir, "log"), filepath.Join(dir, "scale.svg")
	if err := os.WriteFile(file, []byte(log.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := replot(file, svg, &out); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(svg)
	if err != nil || !bytes.Contains(b, []byte("sluice abc123")) || !strings.Contains(out.String(), "9006") {
		t.Fatalf("plot %v %.200s, table %s", err, b, out.String())
	}
	if _, err := parseRun("run store=memory algo=exact keys=10"); err == nil {
		t.Fatal("a line missing its figures read back")
	}
	if err := os.WriteFile(file, []byte("nothing\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := replot(file, "", io.Discard); err == nil {
		t.Fatal("a log without runs plotted")
	}
}
