package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"sluice/bench/internal/daemons"
	"sluice/bench/internal/procstat"
	"sluice/bench/internal/rounds"
)

// row is one run's figures (see the package comment for each).
type row struct {
	Store, Algo string
	Keys        int
	FillSecs    float64
	// BytesPerKey is the headline cost: RSS growth (memory store) or
	// used_memory growth (Redis) over the keys.
	BytesPerKey float64
	RSSPerKey   float64 // the holding process's RSS growth per key
	SluiceRSS   float64 // with Redis: sluice's own RSS growth per key
	IdleWps     float64 // bytes written per second while idle (wchar)
	IdleDisk    float64 // of which for storage (write_bytes)
	IdleCPU     float64 // percent of one core while idle
	RPS, P99us  float64
	LoadErrors  uint64
	LoadDisk    float64 // bytes written for storage per second under load
	SnapSecs    float64 // longest snapshot write (memory) or SAVE (Redis)
	Writes      int     // snapshot writes logged during the run (memory)
	StopSecs    float64 // SIGTERM to exit (memory)
	RestoreSecs float64
}

func (r row) String() string {
	return fmt.Sprintf("run store=%s algo=%s keys=%d fill_s=%.1f bytes_per_key=%.0f rss_per_key=%.0f sluice_rss_per_key=%.0f "+
		"idle_wchar_Bps=%.0f idle_disk_Bps=%.0f idle_cpu_pct=%.1f rps=%.0f p99_us=%.0f load_errors=%d load_disk_Bps=%.0f "+
		"snapshot_s=%.3f writes=%d stop_s=%.3f restore_s=%.3f",
		r.Store, r.Algo, r.Keys, r.FillSecs, r.BytesPerKey, r.RSSPerKey, r.SluiceRSS,
		r.IdleWps, r.IdleDisk, r.IdleCPU, r.RPS, r.P99us, r.LoadErrors, r.LoadDisk,
		r.SnapSecs, r.Writes, r.StopSecs, r.RestoreSecs)
}

// rss is pid's resident set in bytes (VmRSS of /proc/PID/status).
func rss(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	return statusField(string(b), "VmRSS")
}

// statusField is a "Name:   N kB" line of /proc/PID/status, in bytes.
func statusField(status, name string) (int64, error) {
	for l := range strings.SplitSeq(status, "\n") {
		if v, ok := strings.CutPrefix(l, name+":"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n * 1024, err
		}
	}
	return 0, fmt.Errorf("no %s in /proc/PID/status", name)
}

// ioField is a field of /proc/PID/io ("wchar": every byte passed to a
// write call, sockets included; "write_bytes": bytes the process made
// dirty for storage), 0 if unknown.
func ioField(pid int, name string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return 0
	}
	for l := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, name+": "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

// used is what a set of processes has written and spent so far.
type used struct {
	wchar int64
	disk  int64
	ticks uint64
	at    time.Time
}

func sample(pids []int) used {
	u := used{at: time.Now()}
	for _, p := range pids {
		u.wchar += ioField(p, "wchar")
		u.disk += ioField(p, "write_bytes")
		u.ticks += procstat.Ticks(p)
	}
	return u
}

// rates are the bytes written per second (all writes, and those for
// storage) and the percent of a core from a to b.
func rates(a, b used) (wps, disk, cpu float64) {
	secs := b.at.Sub(a.at).Seconds()
	if secs <= 0 {
		return 0, 0, 0
	}
	return float64(b.wchar-a.wchar) / secs, float64(b.disk-a.disk) / secs, float64(b.ticks-a.ticks) / procstat.ClockTick() / secs * 100
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// runOne measures one store and algorithm at n keys, from empty.
func (b *bench) runOne(ctx context.Context, store, algo string, n int) (row, error) {
	r := row{Store: store, Algo: algo, Keys: n}
	tag := fmt.Sprintf("%s-%s-%d", store, algo, n)
	port, err := b.port()
	if err != nil {
		return r, err
	}
	state := b.path(tag)
	if err := os.Mkdir(state, 0o700); err != nil {
		return r, err
	}
	raddr := ""
	var used0, redisRSS0 int64
	if store == "redis" {
		raddr = b.redis.addr()
		if _, err := b.redis.cli(ctx, "flushall"); err != nil {
			return r, err
		}
		if used0, err = b.redis.info(ctx, "memory", "used_memory"); err != nil {
			return r, err
		}
		if redisRSS0, err = rss(b.redis.proc.PID()); err != nil {
			return r, err
		}
	}
	sd := &sluiced{set: b.set, bin: b.sluice, conf: state + ".toml", log: state + ".log", addr: "127.0.0.1:" + strconv.Itoa(port)}
	if err := os.WriteFile(sd.conf, []byte(sluiceConfig(state, port, algo, n, raddr)), 0o644); err != nil {
		return r, err
	}
	daemons.Logf("%s: starting sluice serve", tag)
	if _, err := sd.start(ctx); err != nil {
		return r, err
	}
	defer func() {
		if sd.proc.Alive() {
			sd.proc.Stop(time.Minute)
		}
	}()
	if err := sleep(ctx, time.Second); err != nil {
		return r, err
	}
	rss0, err := rss(sd.proc.PID())
	if err != nil {
		return r, err
	}
	daemons.Logf("%s: filling %d keys", tag, n)
	t0 := time.Now()
	if err := fill(ctx, sd.addr, conc, 0, n); err != nil {
		return r, fmt.Errorf("fill: %w", err)
	}
	r.FillSecs = time.Since(t0).Seconds()
	if err := sleep(ctx, 2*time.Second); err != nil {
		return r, err
	}
	holders, err := b.cost(ctx, sd, &r, rss0, used0, redisRSS0)
	if err != nil {
		return r, err
	}
	// The idle time starts after one snapshot interval (5 s), so that the
	// write of the fill's own changes is not counted as idle.
	if err := sleep(ctx, 6*time.Second); err != nil {
		return r, err
	}
	daemons.Logf("%s: idle for %s", tag, b.s.idle)
	a := sample(holders)
	if err := sleep(ctx, b.s.idle); err != nil {
		return r, err
	}
	r.IdleWps, r.IdleDisk, r.IdleCPU = rates(a, sample(holders))
	daemons.Logf("%s: load for %s", tag, b.s.duration)
	a = sample(holders)
	res, err := load(ctx, sd.addr, conc, n, b.s.duration, uint64(n))
	if err != nil {
		return r, fmt.Errorf("load: %w", err)
	}
	_, r.LoadDisk, _ = rates(a, sample(holders))
	r.RPS, r.P99us, r.LoadErrors = res.RPS, res.P99us, res.Errors
	// The refusals' summaries come out a second later; past them the
	// log's line ceiling lets the stop's snapshot line through.
	if err := sleep(ctx, 2*time.Second); err != nil {
		return r, err
	}
	if store == "redis" {
		return r, b.redisPersistence(ctx, sd, &r)
	}
	return r, b.memoryPersistence(ctx, sd, &r)
}

// cost sets r's bytes per key from the growth since the samples taken
// before the fill, and returns the processes that hold the keys.
func (b *bench) cost(ctx context.Context, sd *sluiced, r *row, rss0, used0, redisRSS0 int64) ([]int, error) {
	n := float64(r.Keys)
	rss1, err := rss(sd.proc.PID())
	if err != nil {
		return nil, err
	}
	if r.Store != "redis" {
		r.BytesPerKey = float64(rss1-rss0) / n
		r.RSSPerKey = r.BytesPerKey
		return []int{sd.proc.PID()}, nil
	}
	used1, err := b.redis.info(ctx, "memory", "used_memory")
	if err != nil {
		return nil, err
	}
	redisRSS1, err := rss(b.redis.proc.PID())
	if err != nil {
		return nil, err
	}
	r.BytesPerKey = float64(used1-used0) / n
	r.RSSPerKey = float64(redisRSS1-redisRSS0) / n
	r.SluiceRSS = float64(rss1-rss0) / n
	return []int{sd.proc.PID(), b.redis.proc.PID()}, nil
}

// memoryPersistence times the memory store's snapshot and restore: the
// longest write logged so far, the stop (a last write), and the restart
// on the same state directory.
func (b *bench) memoryPersistence(ctx context.Context, sd *sluiced, r *row) error {
	stop, err := sd.stop()
	if err != nil {
		return err
	}
	r.StopSecs = stop.Seconds()
	took, writes := lastWrite(sd.log, 0)
	r.SnapSecs, r.Writes = took.Seconds(), writes
	daemons.Logf("restarting sluice on its snapshot")
	off := size(sd.log)
	restore, err := sd.start(ctx)
	if err != nil {
		return err
	}
	r.RestoreSecs = restore.Seconds()
	if !strings.Contains(readFrom(sd.log, off), "restored") {
		return fmt.Errorf("the restarted daemon logged no restore:\n%s", tail(sd.log, 20))
	}
	_, err = sd.stop()
	return err
}

// redisPersistence times Redis's SAVE and redis-server's restart on the
// file it wrote; sluice stays up meanwhile.
func (b *bench) redisPersistence(ctx context.Context, sd *sluiced, r *row) error {
	before, err := b.redis.cli(ctx, "dbsize")
	if err != nil {
		return err
	}
	took, err := b.redis.save(ctx)
	if err != nil {
		return err
	}
	r.SnapSecs = took.Seconds()
	if !b.redis.proc.Stop(5 * time.Minute) {
		return fmt.Errorf("redis-server ignored SIGTERM")
	}
	daemons.Logf("restarting redis-server on its dump.rdb")
	restore, err := b.redis.start(ctx)
	if err != nil {
		return err
	}
	r.RestoreSecs = restore.Seconds()
	out, err := b.redis.cli(ctx, "dbsize")
	if err != nil {
		return err
	}
	if n, _ := strconv.Atoi(strings.TrimSpace(out)); n < r.Keys {
		return fmt.Errorf("redis-server restored %d keys; it had %s before SAVE, for %d senders", n, strings.TrimSpace(before), r.Keys)
	}
	_, err = sd.stop()
	return err
}

// readFrom is file's contents from offset on.
func readFrom(file string, offset int64) string {
	b, _ := os.ReadFile(file)
	if int64(len(b)) < offset {
		return ""
	}
	return string(b[offset:])
}

// printTable writes the runs as a table, one line per run.
func printTable(w io.Writer, rows []row) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "store\talgo\tkeys\tB/key\tRSS/key\tidle B/s\tidle disk B/s\tidle cpu%\tdecisions/s\tp99 ms\tload disk B/s\tsnapshot s\tstop s\trestore s\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.0f\t%.0f\t%.0f\t%.0f\t%.1f\t%.0f\t%.2f\t%.0f\t%.3f\t%.3f\t%.3f\t\n",
			r.Store, r.Algo, r.Keys, r.BytesPerKey, r.RSSPerKey, r.IdleWps, r.IdleDisk, r.IdleCPU, r.RPS, r.P99us/1e3,
			r.LoadDisk, r.SnapSecs, r.StopSecs, r.RestoreSecs)
	}
	_ = tw.Flush()
}

// parseRun reads a "run ..." line back into a row (for -from).
func parseRun(line string) (row, error) {
	var r row
	var ok bool
	if r.Store, ok = rounds.Field(line, "store"); !ok {
		return r, fmt.Errorf("no store= in %q", line)
	}
	if r.Algo, ok = rounds.Field(line, "algo"); !ok {
		return r, fmt.Errorf("no algo= in %q", line)
	}
	nums := []struct {
		name string
		dst  *float64
	}{
		{"fill_s", &r.FillSecs}, {"bytes_per_key", &r.BytesPerKey}, {"rss_per_key", &r.RSSPerKey},
		{"sluice_rss_per_key", &r.SluiceRSS}, {"idle_wchar_Bps", &r.IdleWps}, {"idle_disk_Bps", &r.IdleDisk},
		{"idle_cpu_pct", &r.IdleCPU}, {"rps", &r.RPS}, {"p99_us", &r.P99us}, {"load_disk_Bps", &r.LoadDisk},
		{"snapshot_s", &r.SnapSecs}, {"stop_s", &r.StopSecs}, {"restore_s", &r.RestoreSecs},
	}
	for _, n := range nums {
		v, err := rounds.Number(line, n.name)
		if err != nil {
			return r, err
		}
		*n.dst = v
	}
	keys, err := rounds.Number(line, "keys")
	if err != nil || keys < 1 {
		return r, fmt.Errorf("keys in %q: %v", line, err)
	}
	r.Keys = int(keys)
	for _, n := range []struct {
		name string
		dst  *uint64
	}{{"load_errors", &r.LoadErrors}} {
		v, err := rounds.Number(line, n.name)
		if err != nil {
			return r, err
		}
		*n.dst = uint64(v)
	}
	w, err := rounds.Number(line, "writes")
	if err != nil {
		return r, err
	}
	r.Writes = int(w)
	return r, nil
}

// replot reads the run lines of a raw log and prints their table and
// plot, as the run that wrote it did.
func replot(file, svg string, stdout io.Writer) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	var rows []row
	rev := file
	for l := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "scale: sluice "); ok {
			rev, _, _ = strings.Cut(v, ",")
		}
		if !strings.HasPrefix(l, "run ") {
			continue
		}
		r, err := parseRun(l)
		if err != nil {
			return err
		}
		rows = append(rows, r)
	}
	if len(rows) == 0 {
		return fmt.Errorf("%s has no run lines", file)
	}
	printTable(stdout, rows)
	if svg == "" {
		return nil
	}
	return os.WriteFile(svg, plot(rows, rev), 0o644)
}
