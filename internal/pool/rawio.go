package pool

import (
	"io"
	"os"
	"syscall"
	"time"
	"unsafe"
)

// rawPipes writes commands to a worker's stdin and reads its replies
// from its stdout. The pipes are non-blocking and served by the runtime's
// poller; rawPipes uses them through syscall.RawConn with functions bound
// once per process, so that the common case (the command fits in the
// pipe, the reply is there by the time it is read) costs one RawSyscall
// and nothing else: entersyscall/exitsyscall cost more than such a call
// takes, the write deadline (a time.Now and a runtime timer) is set only
// when a write would block, and blocked is called only when a read would
// wait (the pool then arms the client's ctx watch).
//
// What it buys, against os.File.Write under a deadline and os.File.Read
// with the watch armed before every read (measured on 2 shared cores at
// load average 2.5-3.3, medians of 5 alternating runs, November 2026):
// BenchmarkDo (one client, one worker) 10.9 us of CPU and 16.3 us per
// request against 16.3 and 22.2 us; BenchmarkDoParallel 5.5 against
// 6.3 us of CPU. Through the whole mux (a connection per request) the
// saving is within the noise: BenchmarkForwardedParallel 32.4 against
// 33.4 us of CPU; QUICK=1 bench/mux.sh relayok sluice/mimedefang c=1, 8,
// 64: 1.25, 1.03, 1.04 against 0.85, 1.00, 0.93.
//
// One goroutine at a time uses a rawPipes: the holder of the call's grant.
type rawPipes struct {
	stdin, stdout   *os.File
	inRC, outRC     syscall.RawConn
	writeFn, readFn func(fd uintptr) bool

	// The write in progress.
	wleft    []byte
	werr     error
	wblocked bool
	wtry     bool // tryWrite: stop where the write would block
	wtimeout time.Duration

	// The read in progress.
	rbuf []byte
	rn   int
	rerr error
	// blocked, when set, is called each time a read would wait.
	blocked func()
}

// newRawPipes binds the raw I/O of stdin and stdout (the parent's ends of
// a worker's pipes, as os.Pipe makes them).
func newRawPipes(stdin, stdout *os.File) (*rawPipes, error) {
	inRC, err := stdin.SyscallConn()
	if err != nil {
		return nil, err
	}
	outRC, err := stdout.SyscallConn()
	if err != nil {
		return nil, err
	}
	rp := &rawPipes{stdin: stdin, stdout: stdout, inRC: inRC, outRC: outRC}
	rp.writeFn, rp.readFn = rp.writeSome, rp.readSome
	return rp, nil
}

// write writes b to stdin, within timeout of the first time the write
// would block; errors are those of os.File.Write.
func (rp *rawPipes) write(b []byte, timeout time.Duration) error {
	rp.wleft, rp.werr, rp.wblocked, rp.wtimeout = b, nil, false, timeout
	err := rp.inRC.Write(rp.writeFn)
	if rp.wblocked {
		_ = rp.stdin.SetWriteDeadline(time.Time{})
	}
	if err == nil {
		err = rp.werr
	}
	rp.wleft = nil
	if err != nil {
		return &os.PathError{Op: "write", Path: rp.stdin.Name(), Err: err}
	}
	return nil
}

// tryWrite writes what of b the pipe takes now, without waiting, and
// returns how much that was; errors are those of os.File.Write.
func (rp *rawPipes) tryWrite(b []byte) (int, error) {
	rp.wleft, rp.werr, rp.wtry = b, nil, true
	err := rp.inRC.Write(rp.writeFn)
	n := len(b) - len(rp.wleft)
	rp.wleft, rp.wtry = nil, false
	if err == nil {
		err = rp.werr
	}
	if err != nil {
		return n, &os.PathError{Op: "write", Path: rp.stdin.Name(), Err: err}
	}
	return n, nil
}

func (rp *rawPipes) writeSome(fd uintptr) bool {
	for len(rp.wleft) > 0 {
		n, _, err := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(unsafe.SliceData(rp.wleft))), uintptr(len(rp.wleft)))
		switch err {
		case 0:
			rp.wleft = rp.wleft[n:]
		case syscall.EINTR:
		case syscall.EAGAIN:
			if rp.wtry {
				return true
			}
			if !rp.wblocked {
				rp.wblocked = true
				_ = rp.stdin.SetWriteDeadline(time.Now().Add(rp.wtimeout))
			}
			return false
		default:
			rp.werr = err
			return true
		}
	}
	return true
}

// read reads from stdout as os.File.Read does (io.EOF at the end; a
// deadline set on stdout interrupts it).
func (rp *rawPipes) read(b []byte) (int, error) {
	rp.rbuf, rp.rn, rp.rerr = b, 0, nil
	err := rp.outRC.Read(rp.readFn)
	rp.rbuf = nil
	if err != nil {
		return 0, err
	}
	return rp.rn, rp.rerr
}

func (rp *rawPipes) readSome(fd uintptr) bool {
	for {
		n, _, err := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(unsafe.SliceData(rp.rbuf))), uintptr(len(rp.rbuf)))
		switch {
		case err == 0 && n == 0 && len(rp.rbuf) > 0:
			rp.rerr = io.EOF
			return true
		case err == 0:
			rp.rn = int(n)
			return true
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			if rp.blocked != nil {
				rp.blocked()
			}
			return false
		default:
			rp.rerr = err
			return true
		}
	}
}

// writeCmd writes pr.wbuf[off:] to the worker's stdin (CmdTimeout:
// timeout).
func (pr *process) writeCmd(off int, timeout time.Duration) error {
	return pr.pipes.write(pr.wbuf[off:], timeout)
}

// readReply reads the worker's stdout for the holder of its grant.
func (pr *process) readReply(b []byte) (int, error) { return pr.pipes.read(b) }

// readBlocked is rawPipes.blocked: a read waits, so the client's ctx
// watch is armed.
func (pr *process) readBlocked() {
	if pr.watch != nil {
		pr.pool.arm(pr.watch)
	}
}
