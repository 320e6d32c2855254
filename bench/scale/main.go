// Command scale is bench/scale.sh's driver: what a key costs sluice's
// stores as the key count grows, with one private redis-server side by
// side.
//
// For each step's key count N (10^4, 10^5, 10^6 and 10^7 by default) and
// each algorithm (one "10/1h exact" or one "10/1h smooth" limit of a
// policy rule keyed on the sender, each RCPT request counted) it runs sluice serve
// twice, from empty: with the memory store (and its snapshot, the
// defaults) and with the Redis store on the private redis-server
// (flushed first). The two runs of a step follow each other, so they
// share the machine's load of the moment. Each run:
//
//  1. fills N keys: one policy RCPT request for each sender
//     user{i}@sender{i%100}.example, i < N, over 64 connections
//     (bench/policyload's naming; fill_s is how long that took);
//  2. after 2 s, the cost per key: the memory store's is sluice's RSS
//     growth over N (rss_per_key); Redis's is the growth of used_memory
//     over N (bytes_per_key; rss_per_key is then redis-server's RSS
//     growth, and sluice's own is beside it as sluice_rss_per_key);
//  3. 6 s later (past one snapshot interval, so that the fill's own
//     changes are written), idle for -idle: the bytes written per second
//     by the processes that hold the keys (sluice for the memory store;
//     redis-server and sluice for Redis): every write (/proc/PID/io
//     wchar, the measure; with Redis it includes the replies of
//     the key count's SCAN) and those for storage (write_bytes), and
//     their CPU time in percent of one core;
//  4. load for -duration: 64 connections, each one RCPT request at a
//     time for a random sender among the N (so no new keys): decisions
//     per second, p99 latency, and the bytes written for storage per
//     second meanwhile (wchar would count the replies);
//  5. the snapshot: with the memory store, the longest write the daemon
//     logged during the run ("took=" of its snapshot or compaction lines;
//     writes counts them) and the time SIGTERM takes (it writes a last
//     snapshot); with Redis, the time of SAVE (an RDB file);
//  6. the restore: the time from exec to the first answered policy
//     request of sluice restarted on its state directory; with Redis, the
//     time from exec to PONG of redis-server restarted on its dump.rdb.
//
// Each run prints one line of name=value pairs ("run store=... algo=...
// keys=..."), and at the end a table. With -svg (default docs/scale.svg)
// it writes a plot of bytes per key, decisions per second and the
// restore time against the key count.
//
// Settings, from the flags or the environment (flags win):
//
//	STEPS=10000,100000,1000000,10000000   -steps     key counts (1e6 works too)
//	MAXKEYS=N                              -maxkeys   drop the steps above N
//	DURATION=5s                            -duration  each load run
//	IDLE=10s                               -idle      each idle measurement
//	STORES=memory,redis                    -stores
//	ALGOS=exact,smooth                     -algos
//	SVG=docs/scale.svg                     -svg       "none" for no plot
//	SLUICE=path                            -sluice    measure this binary instead of building ./cmd/sluice
//	LABEL=text                             -label     name the binary so in the output and the plot
//	                                       -from LOG  print the table and plot of a raw log's runs again
//
// With -stall (STALL=1) it measures instead what a hung Redis costs the
// policy door (stall.go): sluice serve on the Redis store, deadline
// -deadline (DEADLINE=50ms), fail_mode "open", under the load at c=64
// for 1 s, then with redis-server stopped by SIGSTOP for -stop (STOP=2s),
// then 1 s more; -rounds (ROUNDS=3) rounds, alternating with the binary
// -baseline (BASELINE) when given. Per run: the decisions that started
// while Redis was stopped, per second, and the p99 and largest latency of
// those that started after the first misses (one deadline after the
// stop), which issue 26 wants at most 2 x the deadline.
//
// It runs from the repository's root (it builds sluice), as any user;
// redis-server and redis-cli must be installed. Everything shares this
// machine's CPUs: the load generator, sluice and redis-server.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"sluice/bench/internal/daemons"
)

func main() {
	daemons.RunWatchdogIfAsked()
	os.Exit(daemons.Main("scale", os.Args[1:], os.Getenv, os.Stdout, os.Stderr, parseSettings, run))
}

// conc is the connections of the fill and of the load.
const conc = 64

// settings are the run's knobs.
type settings struct {
	steps    []int
	duration time.Duration
	idle     time.Duration
	stores   []string
	algos    []string
	svg      string
	bin      string // a sluice binary to use instead of building one
	from     string // a raw log to plot again instead of running
	label    string // names the binary in the output and the plot
	// The stall measurement (stall.go).
	stall    bool
	stop     time.Duration
	deadline time.Duration
	rounds   int
	baseline string
}

const usage = `usage: scale [-steps N,N,...] [-maxkeys N] [-duration d] [-idle d] [-stores memory,redis] [-algos exact,smooth] [-svg file]

bench/scale.sh's driver (see "go doc ./bench/scale"): cost per key of the
memory store and of one redis-server as the key count grows. The
environment's STEPS, MAXKEYS, DURATION, IDLE, STORES, ALGOS and SVG set the
same as the flags, which win.

`

func parseSettings(args []string, getenv func(string) string, stderr io.Writer) (settings, error) {
	fs := flag.NewFlagSet("scale", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}
	env := func(name, def string) string {
		if v := getenv(name); v != "" {
			return v
		}
		return def
	}
	steps := fs.String("steps", env("STEPS", "10000,100000,1000000,10000000"), "key counts, comma-separated (STEPS)")
	maxKeys := fs.String("maxkeys", env("MAXKEYS", ""), "drop the steps above this many keys (MAXKEYS)")
	duration := fs.String("duration", env("DURATION", "5s"), "each load run (DURATION)")
	idle := fs.String("idle", env("IDLE", "10s"), "each idle measurement (IDLE)")
	stores := fs.String("stores", env("STORES", "memory,redis"), "stores (STORES)")
	algos := fs.String("algos", env("ALGOS", "exact,smooth"), "algorithms (ALGOS)")
	svg := fs.String("svg", env("SVG", "docs/scale.svg"), `the plot's file, "none" for none (SVG)`)
	bin := fs.String("sluice", env("SLUICE", ""), "a sluice binary to measure instead of building ./cmd/sluice (SLUICE)")
	label := fs.String("label", env("LABEL", ""), "name the measured binary thus in the output and the plot, e.g. its commit (LABEL)")
	from := fs.String("from", "", "plot the run lines of this raw log (bench/results) again instead of running")
	stall := fs.Bool("stall", env("STALL", "") == "1", "measure decisions while redis-server is stopped instead (STALL=1)")
	stop := fs.String("stop", env("STOP", "2s"), "-stall: how long redis-server stays stopped (STOP)")
	deadline := fs.String("deadline", env("DEADLINE", "50ms"), "-stall: the Redis store's deadline (DEADLINE)")
	nRounds := fs.Int("rounds", 3, "-stall: rounds (ROUNDS)")
	baseline := fs.String("baseline", env("BASELINE", ""), "-stall: a sluice binary to alternate with, e.g. one built before a change (BASELINE)")
	if err := fs.Parse(args); err != nil {
		return settings{}, err
	}
	if fs.NArg() != 0 {
		return settings{}, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var s settings
	var err error
	if s.steps, err = parseSteps(*steps, *maxKeys); err != nil {
		return s, err
	}
	if s.duration, err = positive("duration", *duration); err != nil {
		return s, err
	}
	if s.idle, err = positive("idle", *idle); err != nil {
		return s, err
	}
	if s.stores, err = oneOf("stores", *stores, "memory", "redis"); err != nil {
		return s, err
	}
	if s.algos, err = oneOf("algos", *algos, "exact", "smooth"); err != nil {
		return s, err
	}
	s.svg, s.bin, s.from, s.label = *svg, *bin, *from, *label
	if s.svg == "none" {
		s.svg = ""
	}
	s.stall, s.baseline, s.rounds = *stall, *baseline, *nRounds
	if v := getenv("ROUNDS"); v != "" && !set["rounds"] {
		if s.rounds, err = strconv.Atoi(v); err != nil {
			return s, fmt.Errorf("ROUNDS: %q is not a number", v)
		}
	}
	if s.rounds < 1 {
		return s, errors.New("rounds: at least 1")
	}
	if s.stop, err = positive("stop", *stop); err != nil {
		return s, err
	}
	if s.deadline, err = positive("deadline", *deadline); err != nil {
		return s, err
	}
	return s, nil
}

// parseSteps reads a list of key counts ("10000,1e5") and drops those
// above maxKeys (when given).
func parseSteps(list, maxKeys string) ([]int, error) {
	limit := int(^uint(0) >> 1)
	if maxKeys != "" {
		n, err := parseCount(maxKeys)
		if err != nil {
			return nil, fmt.Errorf("maxkeys: %w", err)
		}
		limit = n
	}
	var out []int
	for f := range strings.SplitSeq(list, ",") {
		n, err := parseCount(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("steps: %w", err)
		}
		if len(out) > 0 && n <= out[len(out)-1] {
			return nil, fmt.Errorf("steps: %d after %d: give them in increasing order", n, out[len(out)-1])
		}
		if n <= limit {
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no step at or below maxkeys")
	}
	return out, nil
}

// maxCount bounds a step: 10^8 keys is past this machine and any plan.
const maxCount = 100_000_000

// parseCount reads a positive key count: digits, or "1e6".
func parseCount(s string) (int, error) {
	if m, e, ok := strings.Cut(s, "e"); ok {
		mi, err1 := strconv.Atoi(m)
		ei, err2 := strconv.Atoi(e)
		if err1 != nil || err2 != nil || ei < 0 || ei > 8 {
			return 0, fmt.Errorf("%q is not a count", s)
		}
		n := mi
		for range ei {
			n *= 10
		}
		s = strconv.Itoa(n)
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > maxCount {
		return 0, fmt.Errorf("%q is not a count from 1 to %d", s, maxCount)
	}
	return n, nil
}

func positive(name, v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%s: %q is not a positive duration", name, v)
	}
	return d, nil
}

// oneOf reads a comma-separated list whose items are among allowed, in
// allowed's order.
func oneOf(name, list string, allowed ...string) ([]string, error) {
	seen := map[string]bool{}
	for f := range strings.SplitSeq(list, ",") {
		f = strings.TrimSpace(f)
		ok := false
		for _, a := range allowed {
			ok = ok || f == a
		}
		if !ok {
			return nil, fmt.Errorf("%s: %q is not one of %s", name, f, strings.Join(allowed, ", "))
		}
		seen[f] = true
	}
	var out []string
	for _, a := range allowed {
		if seen[a] {
			out = append(out, a)
		}
	}
	return out, nil
}

// bench is one driver run: its directory, binaries and redis-server.
type bench struct {
	s      settings
	set    *daemons.Set
	sluice string
	redis  *redisd
	ports  []int
	out    io.Writer
}

func (b *bench) path(name string) string { return filepath.Join(b.set.Dir, name) }

// port picks a free TCP port none of this run's daemons has.
func (b *bench) port() (int, error) {
	p, err := daemons.FreeTCPPort(b.ports...)
	if err != nil {
		return 0, err
	}
	b.ports = append(b.ports, p)
	return p, nil
}

func run(ctx context.Context, s settings, stdout io.Writer) error {
	if s.from != "" {
		return replot(s.from, s.svg, stdout)
	}
	if _, err := os.Stat("cmd/sluice"); err != nil {
		return errors.New("run from the repository's root (cmd/sluice not found)")
	}
	for _, prog := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(prog); err != nil && contains(s.stores, "redis") {
			return fmt.Errorf("%s is not installed (Debian packages redis-server, redis-tools)", prog)
		}
	}
	set, err := daemons.New("sluice-bench-scale.", 30*time.Second)
	if err != nil {
		return err
	}
	defer set.Close(time.Minute)
	b := &bench{s: s, set: set, out: stdout}
	b.sluice = b.path("sluice")
	rev, _ := exec.CommandContext(ctx, "git", "describe", "--always", "--dirty").Output()
	if s.bin != "" {
		b.sluice = s.bin
		v, _ := exec.CommandContext(ctx, s.bin, "version").Output()
		rev = []byte(s.bin + " " + strings.TrimSpace(string(v)))
	}
	if s.label != "" {
		rev = []byte(s.label)
	}
	if s.bin == "" {
		daemons.Logf("building sluice in %s", set.Dir)
		if out, err := exec.CommandContext(ctx, "go", "build", "-o", b.sluice, "./cmd/sluice").CombinedOutput(); err != nil {
			return fmt.Errorf("go build: %w\n%s", err, out)
		}
	}
	if s.stall {
		fmt.Fprintf(stdout, "scale -stall: sluice %s, %s\n", strings.TrimSpace(string(rev)), time.Now().UTC().Format(time.RFC3339))
		return b.stall(ctx)
	}
	fmt.Fprintf(stdout, "scale: sluice %s, %s, steps %v, load %s at c=%d, idle %s\n",
		strings.TrimSpace(string(rev)), time.Now().UTC().Format(time.RFC3339), s.steps, s.duration, conc, s.idle)
	if contains(s.stores, "redis") {
		if err := b.startRedis(ctx); err != nil {
			return err
		}
	}
	var rows []row
	for _, n := range s.steps {
		for _, algo := range s.algos {
			for _, store := range s.stores {
				r, err := b.runOne(ctx, store, algo, n)
				if err != nil {
					return fmt.Errorf("%s %s %d keys: %w", store, algo, n, err)
				}
				fmt.Fprintln(stdout, r)
				rows = append(rows, r)
			}
		}
	}
	fmt.Fprintln(stdout)
	printTable(stdout, rows)
	if s.svg != "" {
		if err := os.WriteFile(s.svg, plot(rows, string(rev)), 0o644); err != nil {
			return err
		}
		daemons.Logf("plot written to %s", s.svg)
	}
	return nil
}

func contains(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

func (b *bench) startRedis(ctx context.Context) error {
	p, err := b.port()
	if err != nil {
		return err
	}
	dir := b.path("redis")
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	b.redis = &redisd{set: b.set, dir: dir, port: p}
	v, _ := exec.CommandContext(ctx, "redis-server", "--version").Output()
	daemons.Logf("starting %s on port %d", strings.TrimSpace(string(v)), p)
	_, err = b.redis.start(ctx)
	return err
}
