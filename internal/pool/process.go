package pool

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
)

// maxReply is the reference's reply buffer: a longer reply is cut to its
// first maxReply bytes and the rest of that line is thrown away.
const maxReply = 4096

// process is one worker child, the owner goroutine's alone: only code
// the owner runs holds a *process, so its stdin and stdout (io) and their
// buffers have one user by construction. The goroutines that read its
// stderr and -Z status pipe are given its side, which holds nothing of
// the request I/O. The child is reaped by wait4(WNOHANG) on SIGCHLD in
// the owner loop, never by a blocking wait.
type process struct {
	pid         int
	io          pipes
	side        *procSide
	stdinClosed bool
	reaped      bool
}

// procSide is what a worker's stderr and status readers share with the
// owner.
type procSide struct {
	stderr *os.File
	// status is the read end of the -Z status pipe (nil without -Z).
	status *os.File
	// qid is the queue id of the worker's last scan, senderok or recipok
	// ("" after another client command): its stderr lines are prefixed
	// with it, as the reference does.
	qid atomic.Pointer[string]
	// oom is set when the worker wrote "Out of memory!" on stderr.
	oom atomic.Bool
}

// forkExec forks and execs cfg.Program with fds 0, 1 and 2 on fresh pipes, in
// cfg.Dir with cfg.Env. argv[0] is the program's basename, as the reference
// does. No shell is involved. The parent's ends of stdin and stdout are
// bare non-blocking descriptors for the owner's epoll set; stderr and the
// status pipe are files on the runtime's poller, read by goroutines.
func forkExec(cfg *Config) (*process, error) {
	var raw [4]int // stdin r, w; stdout r, w
	for i := range raw {
		raw[i] = -1
	}
	var files [4]*os.File // errR, errW, statusR, statusW
	closeAll := func() {
		for _, fd := range raw {
			if fd >= 0 {
				syscall.Close(fd)
			}
		}
		for _, f := range files {
			if f != nil {
				f.Close()
			}
		}
	}
	for i := 0; i < 4; i += 2 {
		if err := syscall.Pipe2(raw[i:i+2], syscall.O_CLOEXEC); err != nil {
			closeAll()
			return nil, fmt.Errorf("creating worker pipes: %w", err)
		}
	}
	npipes := 2
	if cfg.StatusPipe {
		npipes = 4
	}
	for i := 0; i < npipes; i += 2 {
		r, w, err := os.Pipe()
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("creating worker pipes: %w", err)
		}
		files[i], files[i+1] = r, w
	}
	if err := errors.Join(syscall.SetNonblock(raw[1], true), syscall.SetNonblock(raw[2], true)); err != nil {
		closeAll()
		return nil, fmt.Errorf("creating worker pipes: %w", err)
	}
	env := cfg.Env
	if env == nil {
		env = os.Environ()
	}
	argv := append([]string{filepath.Base(cfg.Program)}, cfg.Args...)
	path := cfg.Program
	if cfg.RLimitRSS > 0 || cfg.RLimitAS > 0 {
		// Go cannot run code between fork and exec: this program starts
		// again as a shim that sets the limits and execs the worker.
		path = "/proc/self/exe"
		env = append(env[:len(env):len(env)], shimEnvValue(cfg))
	}
	// Fd puts the child's ends of the poller's pipes in blocking mode,
	// which is what the child expects.
	fds := []uintptr{uintptr(raw[0]), uintptr(raw[3]), files[1].Fd()}
	if cfg.StatusPipe {
		fds = append(fds, files[3].Fd())
	}
	attr := &syscall.ProcAttr{Dir: cfg.Dir, Env: env, Files: fds, Sys: &syscall.SysProcAttr{}}
	pid, err := syscall.ForkExec(path, argv, attr)
	syscall.Close(raw[0])
	syscall.Close(raw[3])
	raw[0], raw[3] = -1, -1
	for _, i := range []int{1, 3} {
		if files[i] != nil {
			files[i].Close()
			files[i] = nil
		}
	}
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("starting %s: %w", cfg.Program, err)
	}
	pr := &process{
		pid:  pid,
		io:   newPipes(raw[1], raw[2]),
		side: &procSide{stderr: files[0], status: files[2]},
	}
	empty := ""
	pr.side.qid.Store(&empty)
	return pr, nil
}

// chunk is the reference's read size for a worker's stderr and status
// pipe (a 64-byte buffer and its NUL): it handles what it reads in pieces
// of this size, and so does sluice, so that long lines are split alike.
const chunk = 63

// drainStderr reads the worker's stderr so that a flood never blocks it.
// With LogStderr each line is logged as the reference logs it,
// "[<qid>: ]Worker <n> stderr: <line>"; "Out of memory!" marks the
// worker as out of memory.
func (p *Pool) drainStderr(n int, pr *procSide) {
	defer p.wg.Done()
	buf := make([]byte, 4096)
	for {
		m, err := pr.stderr.Read(buf)
		for off := 0; off < m; off += chunk {
			p.stderrChunk(n, pr, buf[off:min(off+chunk, m)])
		}
		if err != nil {
			return
		}
	}
}

func (p *Pool) stderrChunk(n int, pr *procSide, b []byte) {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	b = bytes.TrimSuffix(b, []byte{'\n'})
	if bytes.Contains(b, []byte("Out of memory!")) {
		pr.oom.Store(true)
	}
	if !p.cfg.LogStderr {
		return
	}
	qid := *pr.qid.Load()
	for line := range bytes.SplitSeq(b, []byte{'\n'}) {
		if len(line) > 0 {
			p.emit(Event{Kind: EvStderr, Worker: n, QID: qid, Line: string(line)})
		}
	}
}
