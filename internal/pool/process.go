package pool

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
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
	// jobs carries command lines (newline included) to the I/O goroutine.
	// Buffered: the owner never blocks, since a slot has at most one
	// command outstanding.
	jobs chan string

	stdinClosed bool
	reaped      bool
}

// spawn forks and execs cfg.Program with fds 0, 1 and 2 on fresh pipes, in
// cfg.Dir with cfg.Env. argv[0] is the program's basename, as the reference
// does. No shell is involved.
func spawn(cfg *Config) (*process, error) {
	var files [6]*os.File // inR, inW, outR, outW, errR, errW
	closeAll := func() {
		for _, f := range files {
			if f != nil {
				f.Close()
			}
		}
	}
	for i := 0; i < 6; i += 2 {
		r, w, err := os.Pipe()
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("creating worker pipes: %w", err)
		}
		files[i], files[i+1] = r, w
	}
	env := cfg.Env
	if env == nil {
		env = os.Environ()
	}
	argv := append([]string{filepath.Base(cfg.Program)}, cfg.Args...)
	// Fd puts the child's ends in blocking mode, which is what the child
	// expects; the parent's ends stay non-blocking.
	attr := &syscall.ProcAttr{
		Dir:   cfg.Dir,
		Env:   env,
		Files: []uintptr{files[0].Fd(), files[3].Fd(), files[5].Fd()},
		Sys:   &syscall.SysProcAttr{},
	}
	pid, err := syscall.ForkExec(cfg.Program, argv, attr)
	files[0].Close()
	files[3].Close()
	files[5].Close()
	if err != nil {
		files[1].Close()
		files[2].Close()
		files[4].Close()
		return nil, fmt.Errorf("starting %s: %w", cfg.Program, err)
	}
	return &process{
		pid:    pid,
		stdin:  files[1],
		stdout: files[2],
		stderr: files[4],
		jobs:   make(chan string, 1),
	}, nil
}

// ioEvent reports the end of one command on a worker.
type ioEvent struct {
	slot     int
	proc     *process
	reply    []byte
	eof      bool // stdout ended (or failed) before a newline
	writeErr error
}

// serveIO runs the commands sent on pr.jobs: write the line under the
// command timeout, then read one reply line as the reference does (up to
// maxReply bytes; bytes after the newline in the same read are dropped; a
// longer line is cut and its rest discarded). It returns when pr.jobs is
// closed.
func (p *Pool) serveIO(n int, pr *process) {
	defer p.wg.Done()
	buf := make([]byte, maxReply)
	for line := range pr.jobs {
		ev := ioEvent{slot: n, proc: pr}
		_ = pr.stdin.SetWriteDeadline(time.Now().Add(p.cfg.CmdTimeout))
		if _, err := pr.stdin.Write([]byte(line)); err != nil {
			ev.writeErr = err
			if !p.send(ev) {
				return
			}
			continue
		}
		got := 0
		discard := false // the line was cut: throw away its rest
		for {
			m, err := pr.stdout.Read(buf[got:])
			if m > 0 && discard {
				if bytes.IndexByte(buf[got:got+m], '\n') >= 0 {
					ev.reply = bytes.Clone(buf[:got])
					break
				}
				m = 0
			}
			if m > 0 {
				if i := bytes.IndexByte(buf[got:got+m], '\n'); i >= 0 {
					ev.reply = bytes.Clone(buf[:got+i+1])
					break
				}
				got += m
				if got == len(buf) {
					// Keep the first maxReply bytes; read the rest into a
					// scratch area at the end of the line.
					discard = true
					buf = append(buf[:got:got], make([]byte, 512)...)
				}
			}
			if err != nil {
				ev.reply = bytes.Clone(buf[:got])
				ev.eof = true
				break
			}
		}
		buf = buf[:maxReply]
		if !p.send(ev) {
			return
		}
	}
}

// drainStderr reads the worker's stderr so that a flood never blocks it.
// The text is logged at debug level, line by line.
func (p *Pool) drainStderr(n int, f *os.File) {
	defer p.wg.Done()
	buf := make([]byte, 4096)
	var partial []byte
	for {
		m, err := f.Read(buf)
		if m > 0 && p.cfg.LogStderr {
			partial = append(partial, buf[:m]...)
			for {
				i := bytes.IndexByte(partial, '\n')
				if i < 0 {
					break
				}
				p.log.Info("worker stderr", "worker", n, "line", string(partial[:i]))
				partial = partial[i+1:]
			}
			if len(partial) > maxReply {
				partial = partial[:0]
			}
		}
		if err != nil {
			if !errors.Is(err, os.ErrClosed) && len(partial) > 0 {
				p.log.Info("worker stderr", "worker", n, "line", string(partial))
			}
			return
		}
	}
}

// send hands ev to the owner loop; false when the loop has exited.
func (p *Pool) send(ev ioEvent) bool {
	select {
	case p.events <- ev:
		return true
	case <-p.done:
		return false
	}
}
