package pool

import (
	"bytes"
	"io"
	"os"
	"testing"
	"time"
)

// testProcess is a process over fresh pipes (pipePair) for the I/O
// functions alone.
func testProcess(t *testing.T) (pr *process, cmdR, replyW *os.File) {
	t.Helper()
	rp, cmdR, replyW := pipePair(t)
	return &process{pipes: rp, stdin: rp.stdin, stdout: rp.stdout, buf: make([]byte, maxReply+4096)}, cmdR, replyW
}

// TestPreWriteWhole: the owner's write at the grant gives the worker the
// whole command; the holder then only reads the reply and writes nothing.
func TestPreWriteWhole(t *testing.T) {
	pr, cmdR, replyW := testProcess(t)
	p := &Pool{cfg: Config{CmdTimeout: time.Minute}}
	c := &call{req: Request{Line: "relayok x"}}
	p.preWrite(c, pr)
	if !c.ior.written {
		t.Fatal("a short command was not written whole at the grant")
	}
	got := make([]byte, 64)
	if n, err := cmdR.Read(got); err != nil || string(got[:n]) != "relayok x\n" {
		t.Fatalf("the worker read %q, %v before the holder ran", got[:n], err)
	}
	replyW.WriteString("ok 1\n")
	ev, cut := p.workerIO(c, pr, false, nil)
	if cut || ev.writeErr != nil || string(ev.reply) != "ok 1\n" {
		t.Fatalf("holder: reply %q writeErr %v cut %v", ev.reply, ev.writeErr, cut)
	}
	cmdR.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if n, err := cmdR.Read(got); n != 0 || err == nil {
		t.Fatalf("the holder wrote %q again", got[:n])
	}
}

// TestPreWritePartial: a command longer than the pipe holds is written in
// part at the grant and the holder writes the rest, each byte once.
func TestPreWritePartial(t *testing.T) {
	pr, cmdR, replyW := testProcess(t)
	p := &Pool{cfg: Config{CmdTimeout: 10 * time.Second}}
	line := string(bytes.Repeat([]byte("z"), 1<<20))
	c := &call{req: Request{Line: line}}
	p.preWrite(c, pr)
	if c.ior.written || c.ior.off <= 0 || c.ior.off >= len(line) {
		t.Fatalf("written=%v off=%d of %d; want a part written at the grant", c.ior.written, c.ior.off, len(line)+1)
	}
	read := make(chan []byte)
	go func() {
		b, _ := io.ReadAll(io.LimitReader(cmdR, int64(len(line)+1)))
		replyW.WriteString("ok\n")
		read <- b
	}()
	ev, _ := p.workerIO(c, pr, false, nil)
	if b := <-read; string(b) != line+"\n" {
		t.Fatalf("the worker read %d bytes (%q...), want the %d of the line once", len(b), b[:min(len(b), 16)], len(line)+1)
	}
	if ev.writeErr != nil || string(ev.reply) != "ok\n" {
		t.Fatalf("reply %q writeErr %v", ev.reply, ev.writeErr)
	}
}

// TestPreWriteError: a write the worker cannot take (its stdin closed) is
// the holder's write error, reported without another write.
func TestPreWriteError(t *testing.T) {
	pr, cmdR, _ := testProcess(t)
	cmdR.Close()
	p := &Pool{cfg: Config{CmdTimeout: time.Minute}}
	c := &call{req: Request{Line: "relayok x"}}
	p.preWrite(c, pr)
	ev, cut := p.workerIO(c, pr, false, nil)
	if cut || ev.writeErr == nil || ioResult(&ev).Err != ErrTalk {
		t.Fatalf("writeErr %v cut %v result %v; want ErrTalk", ev.writeErr, cut, ioResult(&ev))
	}
}
