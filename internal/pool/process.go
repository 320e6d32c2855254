package pool

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
)

// maxReply is the reference's reply buffer: a longer reply is cut to its
// first maxReply bytes and the rest of that line is thrown away.
const maxReply = 4096

// process is one worker child. Its pipes' parent ends are non-blocking
// files served by the runtime's netpoller, so a worker waiting for work
// costs a parked goroutine, never an OS thread. The child is reaped by
// wait4(WNOHANG) on SIGCHLD in the owner loop, never by a blocking wait.
type process struct {
	pid    int
	stdin  *os.File
	stdout *os.File
	stderr *os.File
	// buf and wbuf are the reply and command buffers of the request in
	// flight, used only by the holder of its grant (io.go), as are pipes
	// and watch (the holder's ctx watch, armed when a read waits).
	buf, wbuf []byte
	pipes     *rawPipes
	watch     *ctxWatch
	pool      *Pool
	// status is the read end of the -Z status pipe (nil without -Z).
	status *os.File
	// qid is the queue id of the worker's last scan, senderok or recipok
	// ("" after another client command): its stderr lines are prefixed
	// with it, as the reference does.
	qid atomic.Pointer[string]
	// oom is set when the worker wrote "Out of memory!" on stderr.
	oom atomic.Bool

	// rfd is stdout's descriptor once the owner has watched it for a
	// reply (-1 before), and onReadable the owner's handler for it
	// (ownerio.go); both are the owner's.
	rfd        int
	onReadable func()

	stdinClosed bool
	reaped      bool
}

// spawn forks and execs cfg.Program with fds 0, 1 and 2 on fresh pipes, in
// cfg.Dir with cfg.Env. argv[0] is the program's basename, as the reference
// does. No shell is involved.
func spawn(cfg *Config) (*process, error) {
	var files [8]*os.File // inR, inW, outR, outW, errR, errW, statusR, statusW
	closeAll := func() {
		for _, f := range files {
			if f != nil {
				f.Close()
			}
		}
	}
	npipes := 6
	if cfg.StatusPipe {
		npipes = 8
	}
	for i := 0; i < npipes; i += 2 {
		r, w, err := os.Pipe()
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("creating worker pipes: %w", err)
		}
		files[i], files[i+1] = r, w
	}
	// Pipes' raw conns cannot fail; asked for before the fork, so that no
	// child needs reaping on this error path.
	pipes, err := newRawPipes(files[1], files[2])
	if err != nil {
		closeAll()
		return nil, err
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
	// Fd puts the child's ends in blocking mode, which is what the child
	// expects; the parent's ends stay non-blocking.
	fds := []uintptr{files[0].Fd(), files[3].Fd(), files[5].Fd()}
	if cfg.StatusPipe {
		fds = append(fds, files[7].Fd())
	}
	attr := &syscall.ProcAttr{
		Dir:   cfg.Dir,
		Env:   env,
		Files: fds,
		Sys:   &syscall.SysProcAttr{},
	}
	pid, err := syscall.ForkExec(path, argv, attr)
	for _, i := range []int{0, 3, 5, 7} {
		if files[i] != nil {
			files[i].Close()
		}
	}
	if err != nil {
		for _, i := range []int{1, 2, 4, 6} {
			if files[i] != nil {
				files[i].Close()
			}
		}
		return nil, fmt.Errorf("starting %s: %w", cfg.Program, err)
	}
	pr := &process{
		pid:    pid,
		pipes:  pipes,
		stdin:  files[1],
		stdout: files[2],
		stderr: files[4],
		status: files[6],
		buf:    make([]byte, maxReply+512),
		rfd:    -1,
	}
	empty := ""
	pr.qid.Store(&empty)
	pipes.blocked = pr.readBlocked
	return pr, nil
}

// ioEvent reports the end of one command on a worker.
type ioEvent struct {
	slot     int
	proc     *process
	reply    []byte
	eof      bool // stdout ended (or failed) before a newline
	writeErr error
}

// chunk is the reference's read size for a worker's stderr and status
// pipe (a 64-byte buffer and its NUL): it handles what it reads in pieces
// of this size, and so does sluice, so that long lines are split alike.
const chunk = 63

// drainStderr reads the worker's stderr so that a flood never blocks it.
// With LogStderr each line is logged as the reference logs it,
// "[<qid>: ]Worker <n> stderr: <line>"; "Out of memory!" marks the
// worker as out of memory.
func (p *Pool) drainStderr(n int, pr *process) {
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

func (p *Pool) stderrChunk(n int, pr *process, b []byte) {
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

// send hands ev to the owner loop; false when the loop has exited.
func (p *Pool) send(ev ioEvent) bool {
	select {
	case p.in <- ownerMsg{ev: ev}: // the usual case, cheaper than a full select
		return true
	default:
	}
	select {
	case p.in <- ownerMsg{ev: ev}:
		return true
	case <-p.done:
		return false
	}
}
