package pool

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sluice/internal/rawio"
	"strconv"
	"syscall"
	"time"
	"unsafe"
)

// -E, embedded Perl, without cgo. The reference compiles mimedefang.pl and
// the filter once in a Perl interpreter of its own and forks each worker
// from it, so that a worker starts with the code compiled and shares its
// pages until it writes them. sluice starts one Perl process, the
// zygote, which compiles the program once (mimedefang.pl's main with
// -embserver, as the reference runs it) and forks a worker on each
// request, calling do_main_loop in it as the reference's child does.
//
// The worker is the zygote's grandchild (its child forks it and exits),
// so that it is reparented to sluice, a child subreaper: it is reaped and
// signalled as a worker sluice forked itself. Its stdin, stdout, stderr
// and status pipe are FIFOs in a private directory, opened by sluice
// before it asks and by the worker when it starts, then unlinked. The
// zygote answers with the worker's pid once the worker has opened them
// and its parent has exited. -R and -M are set on the worker with
// prlimit(2) before sluice sends it a command.
//
// Nothing of this waits on the owner. Starting the zygote forks and execs
// perl and puts its stdout in the owner's reactor under an owner timer
// (zygoteStartWait); its compile ends with "ready" read by a watch. A
// worker asked of it (askZygote) leaves its slot Stopped and off the
// stopped list (slot.start) until the zygote's answer, read the same way
// under zygoteForkWait, completes the activation (forked) and sends the
// request that started it. Asks wait in order (zygote.forks); the oldest
// is sent at once, even while the program compiles, the next once it is
// answered. A zygote that is
// done with (reread, a failed fork, its exit) is closed without waiting
// and reaped on SIGCHLD (reapStrays), as the workers are.

// zygoteScript is the zygote (shown as "sluice mux -E: <program>" in
// ps; its workers as the program). Its arguments are the program and its
// arguments, the last one -server or -serveru. Requests on stdin:
// "fork <dir>"; answers on stdout: "ready" once the program is compiled,
// then "<pid>" or "error <why>" per request.
const zygoteScript = `use strict; use POSIX ();
$| = 1;
my $prog = shift @ARGV;
$ARGV[-1] =~ s/^-server/-embserver/;
$0 = $prog;
package main;
{ no strict; do $prog; }
die "$prog: $@" if $@;
main();
$0 = "sluice mux -E: $prog";
print "ready\n";
while (my $line = <STDIN>) {
	chomp $line;
	my (undef, $dir) = split / /, $line, 2;
	pipe(my $r, my $w) or do { print "error pipe: $!\n"; next; };
	my $pid = fork;
	if (!defined $pid) { print "error fork: $!\n"; next; }
	if ($pid == 0) {
		close $r;
		my $g = fork;
		if (!defined $g || $g) { syswrite($w, defined $g ? "$g\n" : "error fork: $!\n"); POSIX::_exit(0); }
		open(STDIN, '<', "$dir/in") && open(STDOUT, '>', "$dir/out") && open(STDERR, '>', "$dir/err")
			or do { syswrite($w, "error open: $!\n"); POSIX::_exit(1); };
		if (-e "$dir/status") {
			open(my $st, '>', "$dir/status") or do { syswrite($w, "error open: $!\n"); POSIX::_exit(1); };
			POSIX::dup2(fileno($st), 3); close $st;
		}
		syswrite($w, "ok\n"); close $w;
		$| = 1; $0 = $prog;
		do_main_loop();
		POSIX::_exit(0);
	}
	close $w;
	my @l = <$r>; close $r; chomp @l;
	waitpid($pid, 0);
	my ($g) = grep { /^\d+$/ } @l;
	my ($err) = grep { /^error/ } @l;
	print((defined $g && grep { $_ eq 'ok' } @l) ? "$g\n" : ($err // 'error no worker') . "\n");
}
`

// zygote is a running zygote (owner only).
type zygote struct {
	pid     int
	ctl     int    // its stdin, non-blocking
	ans     int    // its stdout, non-blocking, watched by the owner's reactor
	dir     string // the FIFOs' private directory
	n       int    // workers asked for, to name their FIFOs
	ready   bool   // it said "ready": the program is compiled
	reaped  bool
	lineBuf []byte
	// forks are the workers asked for and not answered yet, oldest
	// first: the zygote answers in this order.
	forks []*zygoteFork
	// wait is the deadline of the answer awaited: the compile's, then
	// the oldest fork's.
	wait timerEntry
}

// zygoteFork is a worker asked of the zygote for slot s: its FIFOs'
// directory and the parent's ends (stdin, stdout, stderr, status; -1
// for none).
type zygoteFork struct {
	s   *slot
	dir string
	fds [4]int
}

// zygoteWait bounds the wait for the zygote's answers: the program's
// compilation at start, a fork after.
const (
	zygoteStartWait = 60 * time.Second
	zygoteForkWait  = 10 * time.Second
)

// maxZygoteLine bounds an answer line (a pid or an error).
const maxZygoteLine = 4096

// newZygote starts the zygote, without waiting for its compile: its
// answers are the owner's to read (startZygote). sluice is made a child
// subreaper first.
func newZygote(cfg *Config) (*zygote, error) {
	perl, err := exec.LookPath("perl")
	if err != nil {
		return nil, err
	}
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, pr_SET_CHILD_SUBREAPER, 1, 0); e != 0 {
		return nil, fmt.Errorf("prctl(PR_SET_CHILD_SUBREAPER): %w", e)
	}
	dir, err := os.MkdirTemp("", "sluice-embed-")
	if err != nil {
		return nil, err
	}
	var in, out [2]int
	if err := syscall.Pipe2(in[:], syscall.O_CLOEXEC); err != nil {
		os.Remove(dir)
		return nil, err
	}
	if err := syscall.Pipe2(out[:], syscall.O_CLOEXEC); err != nil {
		syscall.Close(in[0])
		syscall.Close(in[1])
		os.Remove(dir)
		return nil, err
	}
	env := cfg.Env
	if env == nil {
		env = os.Environ()
	}
	argv := append([]string{"perl", "-e", zygoteScript, cfg.Program}, cfg.Args...)
	pid, err := syscall.ForkExec(perl, argv, &syscall.ProcAttr{Dir: cfg.Dir, Env: env, Files: []uintptr{uintptr(in[0]), uintptr(out[1]), 2}})
	syscall.Close(in[0])
	syscall.Close(out[1])
	z := &zygote{pid: pid, ctl: in[1], ans: out[0], dir: dir, wait: timerEntry{index: -1}}
	if err != nil {
		z.pid = 0
		z.close(syscall.SIGTERM)
		return nil, fmt.Errorf("starting perl: %w", err)
	}
	if err := errors.Join(syscall.SetNonblock(z.ans, true), syscall.SetNonblock(z.ctl, true)); err != nil {
		z.close(syscall.SIGTERM)
		return nil, err
	}
	return z, nil
}

// pr_SET_CHILD_SUBREAPER is prctl's PR_SET_CHILD_SUBREAPER.
const pr_SET_CHILD_SUBREAPER = 36

// startZygote starts a zygote and puts its answers in the reactor under
// the compile's deadline; an error when it cannot be started at all.
func (p *Pool) startZygote() error {
	z, err := newZygote(&p.cfg)
	if err != nil {
		return err
	}
	if err := p.react.watch(z.ans, false, func() { p.zygoteReadable(z) }); err != nil {
		z.close(syscall.SIGTERM)
		p.zygGone = append(p.zygGone, z)
		return err
	}
	z.wait.fn = func() {
		if p.zyg == z {
			p.zygoteFailed(z, errors.New("the zygote did not answer in time"))
		}
	}
	p.schedule(&z.wait, zygoteStartWait)
	p.zyg = z
	return nil
}

// askZygote asks the zygote (started first if there is none) for a
// worker for s. An error when the fork could not be asked for, with
// embedOff set when no zygote could be started (the caller then starts
// the worker as without -E).
func (p *Pool) askZygote(s *slot) error {
	if p.zyg == nil {
		if err := p.startZygote(); err != nil {
			p.embedOff = true
			p.emit(Event{Kind: EvEmbedFailed, Worker: -1, Err: err})
			return err
		}
	}
	z := p.zyg
	f, err := z.prepare(&p.cfg, s)
	if err != nil {
		return fmt.Errorf("embedded perl: %w", err)
	}
	if len(z.forks) == 0 {
		if err := z.send(f); err != nil {
			f.release()
			return fmt.Errorf("embedded perl: %w", err)
		}
		if z.ready {
			p.schedule(&z.wait, zygoteForkWait)
		}
	}
	z.forks = append(z.forks, f)
	return nil
}

// send asks the zygote to fork f's worker. One request is sent at a
// time, the next once it is answered: a line the zygote had read ahead
// would be in its STDIN buffer, which the worker it forks inherits.
func (z *zygote) send(f *zygoteFork) error {
	if _, e := rawio.WriteFD(z.ctl, []byte("fork "+f.dir+"\n")); e != 0 {
		return e
	}
	return nil
}

// prepare makes the FIFOs of a worker for s.
func (z *zygote) prepare(cfg *Config, s *slot) (*zygoteFork, error) {
	z.n++
	f := &zygoteFork{s: s, dir: filepath.Join(z.dir, strconv.Itoa(z.n)), fds: [4]int{-1, -1, -1, -1}}
	if err := os.Mkdir(f.dir, 0o700); err != nil {
		return nil, err
	}
	names := []string{"in", "out", "err"}
	if cfg.StatusPipe {
		names = append(names, "status")
	}
	for i, name := range names {
		path := filepath.Join(f.dir, name)
		if err := syscall.Mkfifo(path, 0o600); err != nil {
			f.release()
			return nil, err
		}
		mode := syscall.O_RDONLY
		if i == 0 {
			mode = syscall.O_RDWR // a writer before the worker opens it
		}
		fd, err := syscall.Open(path, mode|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
		if err != nil {
			f.release()
			return nil, err
		}
		f.fds[i] = fd
	}
	return f, nil
}

// release closes the parent's ends of a worker not had and removes its
// FIFOs.
func (f *zygoteFork) release() {
	for i, fd := range f.fds {
		if fd >= 0 {
			syscall.Close(fd)
			f.fds[i] = -1
		}
	}
	os.RemoveAll(f.dir)
}

// zygoteReadable reads what the zygote has answered (its watch's
// function) and handles each whole line.
func (p *Pool) zygoteReadable(z *zygote) {
	if p.zyg != z {
		return
	}
	var b [512]byte
	eof := false
	for {
		n, e := rawio.ReadFD(z.ans, b[:])
		if e == syscall.EINTR {
			continue
		}
		if e == syscall.EAGAIN {
			break
		}
		if e != 0 || n == 0 {
			eof = true
			break
		}
		z.lineBuf = append(z.lineBuf, b[:n]...)
	}
	for p.zyg == z {
		i := bytes.IndexByte(z.lineBuf, '\n')
		if i < 0 {
			break
		}
		line := string(z.lineBuf[:i])
		z.lineBuf = z.lineBuf[i+1:]
		p.zygoteLine(z, line)
	}
	switch {
	case p.zyg != z:
	case eof:
		p.zygoteFailed(z, errors.New("the zygote exited"))
	case len(z.lineBuf) > maxZygoteLine:
		p.zygoteFailed(z, errors.New("the zygote's answer is too long"))
	default:
		if err := p.react.watch(z.ans, false, func() { p.zygoteReadable(z) }); err != nil {
			p.zygoteFailed(z, err)
		}
	}
}

// zygoteLine handles one answer: "ready" once, then one per fork asked.
func (p *Pool) zygoteLine(z *zygote, line string) {
	if !z.ready {
		if line != "ready" {
			p.zygoteFailed(z, fmt.Errorf("%q", line))
			return
		}
		z.ready = true
		p.armZygote(z)
		return
	}
	if len(z.forks) == 0 {
		p.zygoteFailed(z, fmt.Errorf("an answer nothing was asked for: %q", line))
		return
	}
	f := z.forks[0]
	z.forks = z.forks[1:]
	proc, err := f.worker(&p.cfg, line)
	if err != nil {
		// A zygote that failed a fork is started afresh.
		p.zygoteFailed(z, nil)
		p.forked(f.s, nil, fmt.Errorf("embedded perl: %w", err))
		return
	}
	if len(z.forks) > 0 {
		if err := z.send(z.forks[0]); err != nil {
			p.zygoteFailed(z, err)
		}
	}
	if p.zyg == z {
		p.armZygote(z)
	}
	p.forked(f.s, proc, nil)
}

// armZygote sets the deadline of the zygote's next answer: a fork's
// while one is asked, none while it waits for requests.
func (p *Pool) armZygote(z *zygote) {
	if len(z.forks) > 0 {
		p.schedule(&z.wait, zygoteForkWait)
	} else {
		z.wait.cancel(p)
	}
}

// worker is the worker the zygote answered line for.
func (f *zygoteFork) worker(cfg *Config, line string) (*process, error) {
	pid, err := strconv.Atoi(line)
	if err != nil {
		f.release()
		return nil, errors.New(line)
	}
	// The worker has its end: stdin becomes write-only, so that a write
	// to a worker gone fails as on a pipe.
	if w, err := syscall.Open(filepath.Join(f.dir, "in"), syscall.O_WRONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0); err == nil {
		syscall.Close(f.fds[0])
		f.fds[0] = w
	}
	os.RemoveAll(f.dir)
	for _, l := range []struct {
		res int
		n   uint64
	}{{rlimitRSS, cfg.RLimitRSS}, {syscall.RLIMIT_AS, cfg.RLimitAS}, {syscall.RLIMIT_DATA, cfg.RLimitAS}} {
		if l.n > 0 {
			lim := syscall.Rlimit{Cur: l.n, Max: l.n}
			_, _, _ = syscall.RawSyscall6(syscall.SYS_PRLIMIT64, uintptr(pid), uintptr(l.res), uintptr(unsafe.Pointer(&lim)), 0, 0, 0)
		}
	}
	side := &procSide{stderr: os.NewFile(uintptr(f.fds[2]), "worker-stderr")}
	if f.fds[3] >= 0 {
		side.status = os.NewFile(uintptr(f.fds[3]), "worker-status")
	}
	empty := ""
	side.qid.Store(&empty)
	return &process{pid: pid, io: newPipes(f.fds[0], f.fds[1]), side: side}, nil
}

// zygoteFailed drops the zygote z, which failed with err (nil: a fork
// failed, which its caller reports). Before it compiled the program, -E
// is given up (EvEmbedFailed) and the workers asked of it are started as
// without -E; after, the oldest fork asked fails with err and the others
// are asked of a new zygote.
func (p *Pool) zygoteFailed(z *zygote, err error) {
	forks := z.forks
	z.forks = nil
	p.dropZygote()
	for _, f := range forks {
		f.release()
	}
	if !z.ready {
		p.embedOff = true
		p.emit(Event{Kind: EvEmbedFailed, Worker: -1, Err: fmt.Errorf("perl did not compile %s: %w", p.cfg.Program, err)})
		for _, f := range forks {
			proc, err := forkExec(&p.cfg)
			p.forked(f.s, proc, err)
		}
		return
	}
	if len(forks) > 0 && err != nil {
		p.forked(forks[0].s, nil, fmt.Errorf("embedded perl: %w", err))
		forks = forks[1:]
	}
	for _, f := range forks {
		p.reask(f.s)
	}
}

// reask asks again for a worker for s, whose zygote was dropped before
// it answered.
func (p *Pool) reask(s *slot) {
	if !p.embedOff {
		err := p.askZygote(s)
		if err == nil {
			return
		}
		if !p.embedOff {
			p.forked(s, nil, err)
			return
		}
	}
	proc, err := forkExec(&p.cfg)
	p.forked(s, proc, err)
}

// dropZygote closes the zygote without waiting for it: it is reaped on
// SIGCHLD (reapStrays). Its forks are the caller's.
func (p *Pool) dropZygote() {
	z := p.zyg
	if z == nil {
		return
	}
	p.zyg = nil
	p.react.forget(z.ans)
	z.wait.cancel(p)
	z.close(syscall.SIGTERM)
	p.zygGone = append(p.zygGone, z)
}

// reapZygotes collects the zygotes that have exited, the current one and
// those dropped (reapStrays).
func (p *Pool) reapZygotes() {
	if p.zyg != nil {
		p.zyg.reap()
	}
	gone := p.zygGone[:0]
	for _, z := range p.zygGone {
		if z.reap(); !z.reaped {
			gone = append(gone, z)
		}
	}
	clear(p.zygGone[len(gone):])
	p.zygGone = gone
}

// isZygote reports whether pid is a zygote's, current or dropped, not
// reaped yet.
func (p *Pool) isZygote(pid int) bool {
	if p.zyg != nil && p.zyg.pid == pid {
		return true
	}
	for _, z := range p.zygGone {
		if z.pid == pid {
			return true
		}
	}
	return false
}

// endZygotes is the zygotes' end when the pool stops: each is killed and
// waited for (the owner loop has ended; SIGKILL bounds the wait).
func (p *Pool) endZygotes() {
	if z := p.zyg; z != nil {
		p.zyg = nil
		for _, f := range z.forks {
			f.release()
		}
		z.forks = nil
		z.close(syscall.SIGKILL)
		p.zygGone = append(p.zygGone, z)
	}
	for _, z := range p.zygGone {
		if z.pid > 0 && !z.reaped {
			_ = syscall.Kill(z.pid, syscall.SIGKILL)
			_, _ = syscall.Wait4(z.pid, nil, 0, nil)
			z.reaped = true
		}
	}
	p.zygGone = nil
}

// reap collects the zygote if it has exited.
func (z *zygote) reap() {
	if z.pid > 0 && !z.reaped {
		if pid, err := syscall.Wait4(z.pid, nil, syscall.WNOHANG, nil); pid == z.pid || err == syscall.ECHILD {
			z.reaped = true
		}
	}
}

// close ends the zygote without waiting for it: its stdin is closed (it
// leaves its loop and exits; the workers it forked are not its children)
// and it is sent sig (SIGTERM ends a compile still running).
func (z *zygote) close(sig syscall.Signal) {
	if z.ctl >= 0 {
		syscall.Close(z.ctl)
		syscall.Close(z.ans)
		z.ctl, z.ans = -1, -1
	}
	if z.pid > 0 && !z.reaped {
		_ = syscall.Kill(z.pid, sig)
	}
	os.RemoveAll(z.dir)
}
