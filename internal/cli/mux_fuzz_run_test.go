package cli

// Playing a schedule of the differential fuzzer (mux_fuzz_test.go) on one
// multiplexor: its clients, probes, signals and outputs.

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// fuzzWrapper writes a filter program that runs the fake worker with env
// (a shell script both multiplexors can exec, readable by the -U user).
func fuzzWrapper(t *testing.T, env []string) string {
	t.Helper()
	_, worker := muxBinaries(t)
	dir, err := os.MkdirTemp("", "sluice-mux-fuzz")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "worker")
	// What a worker takes ends at its own distance from a multiple of
	// fuzzGap ("stderr" takes 100 ms): see fuzzGap. Its exits wait at the
	// exit gate (fuzzGate), in the spool.
	env = append([]string{"FAKEWORKER_TAG_MS=100", "FAKEWORKER_SLOW_MS=300", "FAKEWORKER_EXIT_GATE=" + fuzzGateDir}, env...)
	script := fmt.Sprintf("#!/bin/sh\n%s exec %s \"$@\"\n", strings.Join(env, " "), worker)
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// fuzzRun plays s on d.
func fuzzRun(t *testing.T, s *fuzzSchedule, d *featDaemon) *fuzzOutcome {
	o := &fuzzOutcome{}
	gate := startFuzzGate(d)
	var l *featListener
	if s.notify {
		l = featListen(t, d.spool+"/notify.sock", "?*")
	}
	fuzzSettle(t, s, d, o, "start")
	// What the pool did before it was first quiet depends on when the
	// listener connected: the comparison starts here.
	base := 0
	if l != nil {
		l.mu.Lock()
		base = len(l.lines)
		l.mu.Unlock()
	}
	for pi, ph := range s.phases {
		now := time.Now()
		start := now.Truncate(time.Second).Add(time.Second + 100*time.Millisecond)
		time.Sleep(time.Until(start))
		replies := make([]string, len(ph.reqs))
		var wg sync.WaitGroup
		var lateMu sync.Mutex
		for i, q := range ph.reqs {
			wg.Go(func() {
				plan := time.Duration(i) * fuzzGap
				time.Sleep(time.Until(start.Add(plan)))
				lateMu.Lock()
				o.late = max(o.late, time.Since(start)-plan)
				lateMu.Unlock()
				replies[i] = fuzzSend(d, q)
			})
		}
		wg.Wait()
		for i, q := range ph.reqs {
			if q.state && !q.ro {
				if strings.HasPrefix(q.data, "status\n") {
					fuzzCheckStatus(s, replies[i], false, o, fmt.Sprintf("phase %d", pi))
				}
				replies[i] = "(the pool's state)"
				continue
			}
			replies[i] = fuzzNormalize(q.line(), replies[i])
		}
		o.replies = append(o.replies, replies)
		fuzzSettle(t, s, d, o, fmt.Sprintf("phase %d", pi))
		var probes []string
		for _, p := range ph.probes {
			r := fuzzSend(d, fuzzReq{data: p + "\n"})
			if p == "status" {
				fuzzCheckStatus(s, r, true, o, fmt.Sprintf("after phase %d", pi))
			}
			probes = append(probes, fuzzNormalize(p, r))
		}
		o.probes = append(o.probes, probes)
		if ph.signal == 0 {
			continue
		}
		if err := syscall.Kill(d.pid, ph.signal); err != nil {
			t.Errorf("%s: kill %v: %v", d.name, ph.signal, err)
		}
		if ph.signal == syscall.SIGUSR1 {
			for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && alive(d.pid); {
				time.Sleep(20 * time.Millisecond)
			}
			if o.died = !alive(d.pid); o.died {
				break
			}
		}
		// A reread (SIGINT) kills the idle workers: wait for the pool to
		// come back.
		fuzzSettle(t, s, d, o, fmt.Sprintf("%v after phase %d", ph.signal, pi))
	}
	if l != nil {
		for _, n := range l.close()[base:] {
			o.notes = append(o.notes, featNormalize(n))
		}
	}
	d.stop()
	o.harness = gate.stop()
	b, err := os.ReadFile(d.spool + "/stats")
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s: %v", d.name, err)
	}
	for line := range strings.SplitSeq(strings.TrimSuffix(string(b), "\n"), "\n") {
		if line != "" {
			o.stats = append(o.stats, featAgoRe.ReplaceAllString(featStamp.ReplaceAllString(line, "T "), "${1}N"))
		}
	}
	return o
}

// fuzzSend plays one connection and returns all the server sent; an I/O
// error is shown after it in brackets.
func fuzzSend(d *featDaemon, q fuzzReq) string {
	sock := d.main
	if q.ro {
		sock = d.spool + "/ro.sock"
	}
	var c net.Conn
	var err error
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(time.Millisecond) {
		if c, err = net.Dial("unix", sock); err == nil || !errors.Is(err, syscall.EAGAIN) || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		return fmt.Sprintf("<dial: %v>", err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(60 * time.Second))
	_, werr := c.Write([]byte(q.data))
	if q.halfClose && werr == nil {
		_ = c.(*net.UnixConn).CloseWrite()
	}
	b, rerr := io.ReadAll(c)
	reply := string(b)
	if rerr != nil {
		reply += "<read error>"
	}
	return reply
}

// fuzzSettle waits until d's pool is quiet: nothing busy, killed or
// queued, at least -m workers running, and the same status for 1.5 s (longer than -w).
func fuzzSettle(t *testing.T, s *fuzzSchedule, d *featDaemon, o *fuzzOutcome, when string) {
	var last string
	var since time.Time
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		st := fuzzSend(d, fuzzReq{data: "status\n"})
		f := strings.Fields(st)
		if len(f) != 6 {
			o.problems = append(o.problems, fmt.Sprintf("%s: status %q", when, st))
			return
		}
		quiet := !strings.ContainsAny(f[0], "BK") && f[4] == "0" &&
			fuzzRunning(f[0]) >= s.min
		if !quiet || f[0] != last {
			last, since = f[0], time.Now()
			continue
		}
		if time.Since(since) >= 1500*time.Millisecond {
			return
		}
	}
	o.problems = append(o.problems, fmt.Sprintf("%s: never quiet (status %q)", when, last))
}

// fuzzRunning counts the running (idle, busy, killed) slots of a status.
func fuzzRunning(letters string) int {
	return len(letters) - strings.Count(letters, "S")
}

// fuzzCheckStatus checks a status reply's invariants: one letter per
// slot (-x of them); at a quiet point, at least -m running.
func fuzzCheckStatus(s *fuzzSchedule, st string, quiet bool, o *fuzzOutcome, when string) {
	f := strings.Fields(st)
	if len(f) != 6 || len(f[0]) != s.max || strings.Trim(f[0], "SIBK") != "" {
		o.problems = append(o.problems, fmt.Sprintf("%s: malformed status %q for -x %d", when, st, s.max))
		return
	}
	if quiet && fuzzRunning(f[0]) < s.min {
		o.problems = append(o.problems, fmt.Sprintf("%s: %d running, fewer than -m %d: %q", when, fuzzRunning(f[0]), s.min, st))
	}
}
