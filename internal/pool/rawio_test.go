package pool

import (
	"bytes"
	"errors"
	"io"
	"os"
	"testing"
	"time"
)

// pipePair is a rawPipes over two fresh pipes, and the far ends: what
// the worker would read (cmdR) and write (replyW).
func pipePair(t *testing.T) (rp *rawPipes, cmdR, replyW *os.File) {
	t.Helper()
	cmdR, cmdW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	replyR, replyW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, f := range []*os.File{cmdR, cmdW, replyR, replyW} {
			f.Close()
		}
	})
	rp, err = newRawPipes(cmdW, replyR)
	if err != nil {
		t.Fatal(err)
	}
	return rp, cmdR, replyW
}

// TestRawPipesRoundTrip: a command written reaches the far end whole; a
// reply already there is read without waiting (blocked is not called).
func TestRawPipesRoundTrip(t *testing.T) {
	rp, cmdR, replyW := pipePair(t)
	calls := 0
	rp.blocked = func() { calls++ }
	if err := rp.write([]byte("relayok x\n"), time.Second); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 64)
	if n, err := cmdR.Read(got); err != nil || string(got[:n]) != "relayok x\n" {
		t.Fatalf("the worker read %q, %v", got[:n], err)
	}
	if _, err := replyW.WriteString("ok 1\n"); err != nil {
		t.Fatal(err)
	}
	n, err := rp.read(got)
	if err != nil || string(got[:n]) != "ok 1\n" || calls != 0 {
		t.Fatalf("read %q err=%v, blocked called %d times; want the reply at once", got[:n], err, calls)
	}
}

// TestRawPipesReadWaits: a read with nothing there calls blocked and
// returns what comes, then io.EOF at the end; a past deadline interrupts
// it.
func TestRawPipesReadWaits(t *testing.T) {
	rp, _, replyW := pipePair(t)
	calls := 0
	rp.blocked = func() {
		calls++
		if calls == 1 {
			go replyW.WriteString("late\n") // the worker answers once the reader waits
		}
	}
	got := make([]byte, 64)
	n, err := rp.read(got)
	if err != nil || string(got[:n]) != "late\n" || calls < 1 {
		t.Fatalf("read %q err=%v; blocked called %d times, want the late reply after at least one", got[:n], err, calls)
	}
	rp.blocked = func() { rp.stdout.SetReadDeadline(aLongTimeAgo) }
	if _, err := rp.read(got); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past its deadline: %v", err)
	}
	rp.stdout.SetReadDeadline(time.Time{})
	rp.blocked = nil
	replyW.Close()
	if n, err := rp.read(got); n != 0 || err != io.EOF {
		t.Fatalf("read after the worker closed: %d, %v; want 0, EOF", n, err)
	}
}

// TestRawPipesWriteTimeout: a command the worker does not read fails once
// the pipe is full and the timeout has passed, as os.File.Write would.
func TestRawPipesWriteTimeout(t *testing.T) {
	rp, cmdR, _ := pipePair(t)
	big := bytes.Repeat([]byte("x"), 4<<20) // far more than a pipe holds
	err := rp.write(big, 50*time.Millisecond)
	var pe *os.PathError
	if !errors.As(err, &pe) || pe.Op != "write" || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("write to a full pipe: %v; want a write PathError for the deadline", err)
	}
	// write cleared its deadline: once the worker reads again, the next
	// command goes through (a deadline left in the past would fail it at
	// once).
	go io.Copy(io.Discard, cmdR)
	if err := rp.write([]byte("next\n"), time.Minute); err != nil {
		t.Fatalf("the next write: %v", err)
	}
}

// TestRawPipesTryWrite: tryWrite writes what the pipe takes and returns
// at once where a write would wait, without a deadline left behind; the
// rest then goes through write; a closed far end is the write's error.
func TestRawPipesTryWrite(t *testing.T) {
	rp, cmdR, _ := pipePair(t)
	if n, err := rp.tryWrite([]byte("relayok x\n")); n != 10 || err != nil {
		t.Fatalf("tryWrite to an empty pipe: %d, %v; want 10, nil", n, err)
	}
	big := bytes.Repeat([]byte("y"), 4<<20)
	n, err := rp.tryWrite(big)
	if err != nil || n <= 0 || n >= len(big) {
		t.Fatalf("tryWrite to a pipe that fills: %d of %d, %v; want part of it at once", n, len(big), err)
	}
	done := make(chan int64)
	go func() {
		m, _ := io.Copy(io.Discard, cmdR)
		done <- m
	}()
	if err := rp.write(big[n:], time.Minute); err != nil {
		t.Fatalf("the rest: %v", err)
	}
	rp.stdin.Close()
	if m := <-done; m != int64(10+len(big)) {
		t.Fatalf("the worker read %d bytes, want %d", m, 10+len(big))
	}
	rp2, cmdR2, _ := pipePair(t)
	cmdR2.Close()
	var pe *os.PathError
	if _, err := rp2.tryWrite([]byte("x\n")); !errors.As(err, &pe) || pe.Op != "write" {
		t.Fatalf("tryWrite to a closed pipe: %v; want a write PathError", err)
	}
}
