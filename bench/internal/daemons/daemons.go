// Package daemons runs the servers of one benchmark run for the drivers
// (bench/milterbench, bench/policybench): a private directory, the
// processes started in it, stopped with SIGTERM and then SIGKILL, and a
// watchdog process that outlives the driver, so that a driver killed even
// by SIGKILL leaves no daemon behind (lib.sh's start_watchdog, in Go). It
// also has the waits the drivers share (a socket, a TCP port, a line in a
// file) and the choice of free TCP ports.
package daemons

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"sluice/bench/internal/procstat"
)

// watchdogEnv marks the driver's own executable, run again, as the
// watchdog: its value is the directory and the grace period.
const watchdogEnv = "SLUICE_BENCH_WATCHDOG"

// Logf writes a progress line on stderr, after the time of day (as
// lib.sh's log).
func Logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

// Set is one run's daemons and their directory.
type Set struct {
	// Dir is the run's private directory, removed by Close (or by the
	// watchdog if the driver dies).
	Dir   string
	alive *os.File  // the liveness pipe's write end: only this process holds it
	watch *exec.Cmd // the watchdog
	mu    sync.Mutex
	procs []*Proc
}

// New makes a directory named after pattern in /tmp (short, for socket
// paths), mode 0711 so that daemons running as other users reach their
// files below it, and starts the watchdog: once this process has gone
// (the liveness pipe closed), it sends SIGTERM to every daemon listed,
// waits up to grace, kills what is left, and removes the directory. The
// driver's main must call RunWatchdogIfAsked first.
func New(pattern string, grace time.Duration) (*Set, error) {
	dir, err := os.MkdirTemp("/tmp", pattern)
	if err != nil {
		return nil, err
	}
	s := &Set{Dir: dir}
	if err := os.Chmod(dir, 0o711); err != nil {
		s.removeDir()
		return nil, err
	}
	if err := os.WriteFile(s.list(), nil, 0o600); err != nil {
		s.removeDir()
		return nil, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		s.removeDir()
		return nil, err
	}
	// This very program, even if its file has been removed since it
	// started (go run removes its build at the end).
	cmd := exec.Command("/proc/self/exe")
	cmd.Env = append(os.Environ(), watchdogEnv+"="+grace.String()+":"+dir)
	cmd.Stdin = r
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // not in the terminal's process group
	err = cmd.Start()
	r.Close()
	if err != nil {
		w.Close()
		s.removeDir()
		return nil, fmt.Errorf("starting the watchdog: %w", err)
	}
	s.alive, s.watch = w, cmd
	return s, nil
}

func (s *Set) list() string { return filepath.Join(s.Dir, "daemons") }

func (s *Set) removeDir() { _ = os.RemoveAll(s.Dir) }

// record adds "kind id" to the watchdog's list.
func (s *Set) record(kind string, id int) error {
	f, err := os.OpenFile(s.list(), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(f, "%s %d\n", kind, id)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// WatchSession lists the session sid (a daemon that detached into a
// session of its own) with the watchdog: every process of it is stopped
// if the driver dies.
func (s *Set) WatchSession(sid int) error { return s.record("sid", sid) }

// Proc is a daemon the Set started.
type Proc struct {
	Name string
	Cmd  *exec.Cmd
	done chan struct{}
	err  error // Wait's, once done is closed
}

// Start starts cmd as the daemon name, in a process group of its own (a
// Ctrl-C on the terminal reaches the driver, which stops it), and lists
// it with the watchdog.
func (s *Set) Start(name string, cmd *exec.Cmd) (*Proc, error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &Proc{Name: name, Cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	s.mu.Lock()
	s.procs = append(s.procs, p)
	s.mu.Unlock()
	if err := s.record("pid", cmd.Process.Pid); err != nil {
		p.Stop(time.Second)
		return nil, err
	}
	return p, nil
}

// PID is the daemon's process id.
func (p *Proc) PID() int { return p.Cmd.Process.Pid }

// Alive reports whether the daemon still runs.
func (p *Proc) Alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Done is closed once the daemon has exited (and been reaped).
func (p *Proc) Done() <-chan struct{} { return p.done }

// Stop sends SIGTERM, waits up to timeout for the daemon to exit, then
// kills it. True if it exited by itself after SIGTERM.
func (p *Proc) Stop(timeout time.Duration) bool {
	if !p.Alive() {
		return true
	}
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return true
	case <-time.After(timeout):
	}
	fmt.Fprintf(os.Stderr, "warning: pid %d (%s) ignored SIGTERM for %s; killing it\n", p.PID(), p.Name, timeout)
	_ = p.Cmd.Process.Kill()
	<-p.done
	return false
}

// Close stops every daemon still running, the last started first, each
// given timeout; then ends the watchdog (which finds nothing left) and
// removes the directory.
func (s *Set) Close(timeout time.Duration) {
	s.mu.Lock()
	procs := s.procs
	s.procs = nil
	s.mu.Unlock()
	for i := len(procs) - 1; i >= 0; i-- {
		procs[i].Stop(timeout)
	}
	if s.alive != nil {
		s.alive.Close()
		done := make(chan struct{})
		go func() { _ = s.watch.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(timeout + 5*time.Second):
			_ = s.watch.Process.Kill()
			<-done
		}
	}
	s.removeDir()
}

// RunWatchdogIfAsked runs the watchdog and exits if this process was
// started as one (by New); otherwise it returns at once. Call it first in
// a driver's main.
func RunWatchdogIfAsked() {
	v, ok := os.LookupEnv(watchdogEnv)
	if !ok {
		return
	}
	graceStr, dir, _ := strings.Cut(v, ":")
	grace, err := time.ParseDuration(graceStr)
	if err != nil || dir == "" {
		os.Exit(2)
	}
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	_, _ = io.Copy(io.Discard, os.Stdin) // returns once the driver has gone
	stopListed(filepath.Join(dir, "daemons"), grace)
	_ = os.RemoveAll(dir)
	os.Exit(0)
}

// stopListed sends SIGTERM to every process listed in file ("pid N", or
// "sid N" for each process of a session), waits up to grace for them to
// go, and kills what is left.
func stopListed(file string, grace time.Duration) {
	b, _ := os.ReadFile(file)
	pids := func() []int {
		var out []int
		for line := range strings.SplitSeq(string(b), "\n") {
			kind, id, _ := strings.Cut(line, " ")
			n, err := strconv.Atoi(id)
			if err != nil || n <= 1 {
				continue
			}
			switch kind {
			case "pid":
				if syscall.Kill(n, 0) == nil {
					out = append(out, n)
				}
			case "sid":
				out = append(out, procstat.SessionPIDs(n)...)
			}
		}
		return out
	}
	for _, p := range pids() {
		_ = syscall.Kill(p, syscall.SIGTERM)
	}
	for deadline := time.Now().Add(grace); time.Now().Before(deadline) && len(pids()) > 0; {
		time.Sleep(100 * time.Millisecond)
	}
	for _, p := range pids() {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
}

// ErrExited is the error of a wait whose process exited first.
var ErrExited = errors.New("the process exited")

// Runner is a server a wait watches, so that one that died is reported
// at once: a Proc, or a daemon the driver did not start itself.
type Runner interface {
	Alive() bool
	String() string
}

// String is the daemon's name.
func (p *Proc) String() string { return p.Name }

// poll calls ready every 100 ms until it is true, p (if not nil) has
// exited, timeout has passed or ctx is done.
func poll(ctx context.Context, timeout time.Duration, p Runner, ready func() bool) error {
	deadline := time.Now().Add(timeout)
	for {
		if ready() {
			return nil
		}
		if p != nil && !p.Alive() {
			if ready() {
				return nil
			}
			if proc, ok := p.(*Proc); ok {
				return fmt.Errorf("%s: %w (%v)", p, ErrExited, proc.err)
			}
			return fmt.Errorf("%s: %w", p, ErrExited)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %s", timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// WaitSocket waits until path is a socket.
func WaitSocket(ctx context.Context, path string, timeout time.Duration, p Runner) error {
	err := poll(ctx, timeout, p, func() bool {
		fi, err := os.Stat(path)
		return err == nil && fi.Mode()&os.ModeSocket != 0
	})
	if err != nil {
		return fmt.Errorf("waiting for the socket %s: %w", path, err)
	}
	return nil
}

// WaitLine waits until a line of file starts with prefix and returns it.
func WaitLine(ctx context.Context, file, prefix string, timeout time.Duration, p Runner) (string, error) {
	var line string
	err := poll(ctx, timeout, p, func() bool {
		b, _ := os.ReadFile(file)
		for l := range strings.SplitSeq(string(b), "\n") {
			if strings.HasPrefix(l, prefix) {
				line = l
				return true
			}
		}
		return false
	})
	if err != nil {
		return "", fmt.Errorf("waiting for a line %q in %s: %w", prefix, file, err)
	}
	return line, nil
}

// SignalContext is a context cancelled by SIGINT or SIGTERM, and a
// function that tells which signal came (0 for none), for the exit
// status the scripts had (128 plus the signal: 130, 143).
func SignalContext() (context.Context, func() int) {
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	got := make(chan int, 1)
	go func() {
		s := <-ch
		got <- int(s.(syscall.Signal))
		cancel()
	}()
	return ctx, func() int {
		select {
		case n := <-got:
			got <- n
			return n
		default:
			return 0
		}
	}
}

// StopSession stops a daemon that detached into its own session sid
// (its leader, pid sid, signals the rest on SIGTERM, as postfwd2's
// master does): SIGTERM to the leader, then, after timeout, SIGKILL to
// whatever of the session is left, with a warning on stderr. True if
// the session ended by itself.
func StopSession(sid int, timeout time.Duration) bool {
	_ = syscall.Kill(sid, syscall.SIGTERM)
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); {
		if len(procstat.SessionPIDs(sid)) == 0 {
			return true
		}
		time.Sleep(100 * time.Millisecond)
	}
	left := procstat.SessionPIDs(sid)
	fmt.Fprintf(os.Stderr, "warning: session %d still has processes %v after %s; killing them\n", sid, left, timeout)
	for _, p := range left {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	return false
}

// Main is a driver's main: parse its settings from args and the
// environment (-h prints the usage: exit 0; a bad setting: exit 2),
// then run it under SignalContext. The exit status is the scripts': 0,
// 1 with "error: ..." on stderr, or 128 plus the signal that stopped it.
func Main[S any](name string, args []string, getenv func(string) string, stdout, stderr io.Writer,
	parse func([]string, func(string) string, io.Writer) (S, error), run func(context.Context, S, io.Writer) error) int {
	s, err := parse(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 2
	}
	ctx, sig := SignalContext()
	err = run(ctx, s, stdout)
	if n := sig(); n != 0 {
		return 128 + n
	}
	if err != nil {
		fmt.Fprintf(stderr, "error: %v\n", err)
		return 1
	}
	return 0
}
