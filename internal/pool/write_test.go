package pool_test

import (
	"errors"
	"fmt"
	"hash/crc32"
	"strings"
	"testing"
	"time"

	"sluice/internal/pool"
)

// TestLongCommandWrittenInParts: a command far longer than a pipe holds
// is written as the worker reads it (the owner waits for stdin to be
// writable between parts), each byte once: the worker answers with
// its length and checksum.
func TestLongCommandWrittenInParts(t *testing.T) {
	cfg := baseConfig()
	cfg.MinWorkers, cfg.MaxWorkers = 1, 1
	cfg.CmdTimeout = 10 * time.Second
	p := start(t, cfg)
	var b strings.Builder
	b.WriteString("len ")
	for i := 0; b.Len() < 1<<20; i++ {
		fmt.Fprintf(&b, "%d ", i)
	}
	line := b.String()
	want := fmt.Sprintf("len %d %08x\n", len(line), crc32.ChecksumIEEE([]byte(line)))
	wantReply(t, do(t, p, line), want)
	wantReply(t, do(t, p, "after"), "echo \"after\"\n")
}

// TestCommandWriteTimeout: a worker that does not read its stdin fails a
// command longer than the pipe holds after CmdTimeout with ErrTalk, and is
// killed.
func TestCommandWriteTimeout(t *testing.T) {
	cfg := baseConfig()
	cfg.Program, cfg.Args = "/bin/sleep", []string{"1000"}
	cfg.MinWorkers, cfg.MaxWorkers = 1, 1
	cfg.CmdTimeout, cfg.BusyTimeout = 300*time.Millisecond, time.Minute
	p := start(t, cfg)
	waitStates(t, p, "I")
	before, _ := p.Snapshot()
	begin := time.Now()
	r := do(t, p, strings.Repeat("z", 1<<20))
	if !errors.Is(r.Err, pool.ErrTalk) {
		t.Fatalf("result %q, %v; want ErrTalk", r.Reply, r.Err)
	}
	if d := time.Since(begin); d < cfg.CmdTimeout {
		t.Fatalf("ErrTalk after %v, before the command timeout", d)
	}
	if after, _ := p.Snapshot(); after.Slots[0].PID == before.Slots[0].PID && after.Slots[0].State != pool.Killed {
		t.Fatalf("worker %d still %v after the write timeout, want it killed", after.Slots[0].PID, after.Slots[0].State)
	}
}
