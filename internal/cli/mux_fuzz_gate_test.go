package cli

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The fuzzer's exit gate. Workers told to exit together (a reread, the
// idle timeout, a shutdown) used to exit in whatever order the kernel ran
// them, and the multiplexors reap in the order they find them exited:
// one side reaped slot 1 then slot 0, the other slot 0 then slot 1, and
// every later start took another slot number (the next start takes the
// slot reaped last). The fuzzer then ignored slot numbers altogether. Now
// the fake worker holds each exit at a gate (FAKEWORKER_EXIT_GATE, see
// internal/pool/testdata/fakeworker/gate.go) and fuzzGate lets them go
// one at a time, oldest first, each once every worker the multiplexor has
// killed is at the gate, and the next once the one before has exited:
// both sides then see the same exits in the same order, and reap them
// oldest first as the reference's wait3 does, whenever they look.

// fuzzGateDir is the gate's directory, relative to the spool (the
// workers' working directory).
const fuzzGateDir = "gate"

// fuzzGate lets one multiplexor's workers out.
type fuzzGate struct {
	d        *featDaemon
	dir      string
	quit     chan struct{}
	done     chan struct{}
	released map[int]bool
	problems []string // read after stop
}

// startFuzzGate starts the gate of d's workers; stop ends it.
func startFuzzGate(d *featDaemon) *fuzzGate {
	g := &fuzzGate{d: d, dir: filepath.Join(d.spool, fuzzGateDir), quit: make(chan struct{}),
		done: make(chan struct{}), released: map[int]bool{}}
	go g.run()
	return g
}

// stop ends the gate (once the multiplexor has stopped) and lets out any
// worker still held, so that none outlives the test.
func (g *fuzzGate) stop() []string {
	close(g.quit)
	<-g.done
	for _, pid := range g.pending() {
		g.release(pid)
	}
	return g.problems
}

// fuzzGatePoll is how often the gate looks at its directory, and at a
// released worker, while it waits (polling other processes).
const fuzzGatePoll = 2 * time.Millisecond

func (g *fuzzGate) run() {
	defer close(g.done)
	for {
		select {
		case <-g.quit:
			return
		case <-time.After(fuzzGatePoll):
		}
		pending := g.pending()
		if len(pending) == 0 || !g.complete(pending) {
			continue
		}
		if pid := pending[0]; g.release(pid) {
			g.waitExited(pid)
		}
	}
}

// pending lists the workers held at the gate and not let out yet, oldest
// first.
func (g *fuzzGate) pending() []int {
	entries, _ := os.ReadDir(g.dir)
	var pids []int
	for _, e := range entries {
		if n, ok := strings.CutPrefix(e.Name(), "exit."); ok {
			if pid, err := strconv.Atoi(n); err == nil && !g.released[pid] {
				pids = append(pids, pid)
			}
		}
	}
	order := g.started()
	slices.SortFunc(pids, func(a, b int) int {
		return slices.Index(order, a) - slices.Index(order, b)
	})
	return pids
}

// started lists the workers in the order they started (oldest first).
func (g *fuzzGate) started() []int {
	b, _ := os.ReadFile(filepath.Join(g.dir, "started"))
	var pids []int
	for f := range bytes.FieldsSeq(b) {
		if pid, err := strconv.Atoi(string(f)); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// fuzzWorkersLine is a line of the `workers` reply: slot, state and, but
// for a stopped slot, pid.
var fuzzWorkersLine = regexp.MustCompile(`(?m)^\d+ ([IBKS])(?: (\d+))?`)

// complete is true when every worker that is to exit now is at the gate:
// every Killed worker of the multiplexor's `workers` reply, or, when it
// answers no more (it is stopping, or dead), every worker still running.
func (g *fuzzGate) complete(pending []int) bool {
	held := func(pid int) bool { return g.released[pid] || slices.Contains(pending, pid) }
	if lines := fuzzWorkersLine.FindAllStringSubmatch(fuzzSend(g.d, fuzzReq{data: "workers\n"}), -1); len(lines) > 0 {
		for _, m := range lines {
			if pid, _ := strconv.Atoi(m[2]); m[1] == "K" && !held(pid) {
				return false
			}
		}
		return true
	}
	for _, pid := range g.started() {
		if fuzzProcRunning(pid) && !held(pid) {
			return false
		}
	}
	return true
}

// release lets pid out (false if it is not at its FIFO's open yet).
func (g *fuzzGate) release(pid int) bool {
	f, err := os.OpenFile(filepath.Join(g.dir, fmt.Sprintf("exit.%d", pid)), os.O_WRONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		if !errors.Is(err, syscall.ENXIO) {
			g.problems = append(g.problems, fmt.Sprintf("exit gate: %v", err))
			g.released[pid] = true
		}
		return false
	}
	f.Close()
	g.released[pid] = true
	return true
}

// waitExited waits until pid has exited (reaped or not).
func (g *fuzzGate) waitExited(pid int) {
	for deadline := time.Now().Add(30 * time.Second); fuzzProcRunning(pid); time.Sleep(fuzzGatePoll) {
		if time.Now().After(deadline) {
			g.problems = append(g.problems, fmt.Sprintf("exit gate: worker %d still running 30 s after it was let out", pid))
			return
		}
	}
}

// fuzzProcRunning is true while pid exists and has not exited (a zombie
// has).
func fuzzProcRunning(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] != 'Z'
}
