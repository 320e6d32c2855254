package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"sluice/bench/internal/daemons"
)

// sluiceConfig is sluice serve's configuration for one run: the policy
// door on port, one rule keyed on the sender with one limit of algo
// (exact or smooth), each RCPT request counted once, and a key cap far above keys. With
// redisAddr the store is that Redis, else the memory store and its
// snapshot (the defaults: every 5 s).
func sluiceConfig(stateDir string, port int, algo string, keys int, redisAddr string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "state_dir = %q\n", stateDir)
	// Twice the keys: no eviction however the store counts them.
	fmt.Fprintf(&b, "[limiter]\nmax_keys = %d\n", 2*keys+100000)
	if redisAddr != "" {
		fmt.Fprintf(&b, "[store]\nkind = \"redis\"\n[store.redis]\naddrs = [%q]\ndeadline = \"1s\"\n", redisAddr)
	}
	fmt.Fprintf(&b, `[anvil]
enabled = false
[throttle]
enabled = false
[milter]
enabled = false
[policy]
listen = ["inet:127.0.0.1:%d"]
[[policy.rule]]
name = "sender"
count = "recipients"
stage = "RCPT"
key = ["sender"]
limit = ["10/1h %s"]
`, port, algo)
	return b.String()
}

// sluiced is one sluice serve of a run, restartable on the same state.
type sluiced struct {
	set  *daemons.Set
	bin  string
	conf string
	log  string
	addr string
	proc *daemons.Proc
}

// start starts the daemon and waits until it answers a policy request;
// it returns the time from exec to that answer.
func (s *sluiced) start(ctx context.Context) (time.Duration, error) {
	logf, err := os.OpenFile(s.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return 0, err
	}
	defer logf.Close()
	cmd := exec.Command(s.bin, "serve", "-c", s.conf)
	cmd.Stdout, cmd.Stderr = logf, logf
	t0 := time.Now()
	p, err := s.set.Start("sluice", cmd)
	if err != nil {
		return 0, err
	}
	s.proc = p
	took, err := waitAnswer(ctx, s.addr, t0, 10*time.Minute, p.Alive)
	if err != nil {
		return 0, fmt.Errorf("sluice serve did not answer: %w\n%s", err, tail(s.log, 20))
	}
	return took, nil
}

// stop stops the daemon with SIGTERM and returns how long it took to
// exit (the memory store writes its snapshot on the way out).
func (s *sluiced) stop() (time.Duration, error) {
	t0 := time.Now()
	if !s.proc.Stop(10 * time.Minute) {
		return 0, errors.New("sluice serve ignored SIGTERM")
	}
	return time.Since(t0), nil
}

// tookRe finds a duration in a log line ("took=1.5s").
var tookRe = regexp.MustCompile(`took=([0-9.]+[a-zµ]+)`)

// lastWrite is the longest "took" of the log lines since offset that
// report a snapshot or a compaction written, and how many there were.
func lastWrite(file string, offset int64) (time.Duration, int) {
	f, err := os.Open(file)
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	if _, err := f.Seek(offset, 0); err != nil {
		return 0, 0
	}
	var longest time.Duration
	n := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if !strings.Contains(l, "snapshot") && !strings.Contains(l, "compact") {
			continue
		}
		m := tookRe.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		if d, err := time.ParseDuration(m[1]); err == nil {
			n++
			longest = max(longest, d)
		}
	}
	return longest, n
}

// size is a file's size, 0 if absent.
func size(file string) int64 {
	fi, err := os.Stat(file)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// tail is the last n lines of file, for an error message.
func tail(file string, n int) string {
	b, _ := os.ReadFile(file)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}

// redisd is the run's private redis-server, without persistence of its
// own accord (save "" and no AOF): the driver saves and restarts it to
// time Redis's own snapshot (SAVE) and restore (loading dump.rdb).
type redisd struct {
	set  *daemons.Set
	dir  string
	port int
	proc *daemons.Proc
}

func (r *redisd) addr() string { return "127.0.0.1:" + strconv.Itoa(r.port) }

// start starts redis-server and returns the time until it answers PING
// (not LOADING): with a dump.rdb in its directory, its restore time.
func (r *redisd) start(ctx context.Context) (time.Duration, error) {
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(r.port), "--bind", "127.0.0.1",
		"--dir", r.dir, "--dbfilename", "dump.rdb", "--save", "", "--appendonly", "no",
		"--daemonize", "no", "--logfile", filepath.Join(r.dir, "redis.log"))
	t0 := time.Now()
	p, err := r.set.Start("redis-server", cmd)
	if err != nil {
		return 0, err
	}
	r.proc = p
	deadline := t0.Add(10 * time.Minute)
	for {
		if out, err := r.cli(ctx, "ping"); err == nil && strings.TrimSpace(out) == "PONG" {
			return time.Since(t0), nil
		}
		if !p.Alive() {
			return 0, fmt.Errorf("redis-server exited\n%s", tail(filepath.Join(r.dir, "redis.log"), 20))
		}
		if time.Now().After(deadline) {
			return 0, errors.New("redis-server did not answer PING")
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// cli runs redis-cli against the server and returns its output.
func (r *redisd) cli(ctx context.Context, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, "redis-cli", append([]string{"-p", strconv.Itoa(r.port)}, args...)...).Output()
	if err != nil {
		return "", fmt.Errorf("redis-cli %s: %w", strings.Join(args, " "), err)
	}
	if bytes.HasPrefix(out, []byte("ERR")) || bytes.HasPrefix(out, []byte("LOADING")) {
		return "", fmt.Errorf("redis-cli %s: %s", strings.Join(args, " "), bytes.TrimSpace(out))
	}
	return string(out), nil
}

// info is one field of INFO's output, as a number.
func (r *redisd) info(ctx context.Context, section, field string) (int64, error) {
	out, err := r.cli(ctx, "info", section)
	if err != nil {
		return 0, err
	}
	return infoField(out, field)
}

// infoField finds "field:value" in INFO's output.
func infoField(out, field string) (int64, error) {
	for l := range strings.SplitSeq(out, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), field+":"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("INFO has no %s", field)
}

// save runs SAVE and returns how long it took.
func (r *redisd) save(ctx context.Context) (time.Duration, error) {
	t0 := time.Now()
	out, err := r.cli(ctx, "save")
	if err != nil {
		return 0, err
	}
	if strings.TrimSpace(out) != "OK" {
		return 0, fmt.Errorf("SAVE: %q", out)
	}
	return time.Since(t0), nil
}
