package pool

import (
	"io"
	"os"
	"syscall"
	"time"
	"unsafe"
)

// The worker's pipes are read and written with raw system calls under the
// poller (syscall.RawConn), through functions bound once per process, so
// that the common case costs one system call and nothing else (a
// RawSyscall: the pipes are non-blocking, and entersyscall/exitsyscall
// cost more than such a call takes): the
// command timeout's deadline (a time.Now and a runtime timer) is set only
// when a write would block, and the ctx watch is armed only when a read
// would.

// writeCmd writes pr.wbuf to the worker's stdin within timeout of the
// first time the write would block; errors are those of os.File.Write.
func (pr *process) writeCmd(timeout time.Duration) error {
	pr.wleft, pr.werr, pr.wblocked, pr.wtimeout = pr.wbuf, nil, false, timeout
	err := pr.stdinRC.Write(pr.writeFn)
	if pr.wblocked {
		_ = pr.stdin.SetWriteDeadline(time.Time{})
	}
	if err == nil {
		err = pr.werr
	}
	if err != nil {
		return &os.PathError{Op: "write", Path: pr.stdin.Name(), Err: err}
	}
	return nil
}

func (pr *process) writeSome(fd uintptr) bool {
	for len(pr.wleft) > 0 {
		n, _, err := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(unsafe.SliceData(pr.wleft))), uintptr(len(pr.wleft)))
		switch err {
		case 0:
			pr.wleft = pr.wleft[n:]
		case syscall.EINTR:
		case syscall.EAGAIN:
			if !pr.wblocked {
				pr.wblocked = true
				_ = pr.stdin.SetWriteDeadline(time.Now().Add(pr.wtimeout))
			}
			return false
		default:
			pr.werr = err
			return true
		}
	}
	return true
}

// readReply reads from the worker's stdout as os.File.Read does (io.EOF
// at the end), arming pr.watch before it waits.
func (pr *process) readReply(b []byte) (int, error) {
	pr.rbuf, pr.rn, pr.rerr, pr.waiting = b, 0, nil, false
	err := pr.stdoutRC.Read(pr.readFn)
	if pr.waiting {
		pr.pool.pollWaiters.Add(-1)
	}
	pr.rbuf = nil
	if err != nil {
		return 0, err
	}
	return pr.rn, pr.rerr
}

func (pr *process) readSome(fd uintptr) bool {
	for {
		n, _, err := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(unsafe.SliceData(pr.rbuf))), uintptr(len(pr.rbuf)))
		switch {
		case err == 0 && n == 0 && len(pr.rbuf) > 0:
			pr.rerr = io.EOF
			return true
		case err == 0:
			pr.rn = int(n)
			return true
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			if pr.watch != nil {
				pr.pool.arm(pr.watch)
			}
			if !pr.waiting {
				pr.waiting = true
				pr.pool.pollWaiters.Add(1)
			}
			return false
		default:
			pr.rerr = err
			return true
		}
	}
}
