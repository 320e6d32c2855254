package pool

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
	"unsafe"

	"sluice/internal/rawio"
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

// zygote is the running zygote (owner only).
type zygote struct {
	pid     int
	ctl     int    // its stdin
	ans     int    // its stdout, non-blocking
	dir     string // the FIFOs' private directory
	n       int    // workers asked for, to name their FIFOs
	reaped  bool
	lineBuf []byte
}

// zygoteWait bounds the wait for the zygote's answers: the program's
// compilation at start, a fork after.
const (
	zygoteStartWait = 60 * time.Second
	zygoteForkWait  = 10 * time.Second
)

// startZygote starts the zygote and waits until it has compiled the
// program. It is the owner's; sluice is made a child subreaper first.
func startZygote(cfg *Config) (*zygote, error) {
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
	z := &zygote{pid: pid, ctl: in[1], ans: out[0], dir: dir}
	if err != nil {
		z.pid = 0
		z.close()
		return nil, fmt.Errorf("starting perl: %w", err)
	}
	if err := syscall.SetNonblock(z.ans, true); err != nil {
		z.close()
		return nil, err
	}
	if line, err := z.answer(zygoteStartWait); err != nil || line != "ready" {
		z.close()
		return nil, fmt.Errorf("perl did not compile %s: %q %v", cfg.Program, line, err)
	}
	return z, nil
}

// pr_SET_CHILD_SUBREAPER is prctl's PR_SET_CHILD_SUBREAPER.
const pr_SET_CHILD_SUBREAPER = 36

// answer reads the zygote's next answer line, waiting up to d.
func (z *zygote) answer(d time.Duration) (string, error) {
	deadline := time.Now().Add(d)
	var b [256]byte
	for {
		if i := bytes.IndexByte(z.lineBuf, '\n'); i >= 0 {
			line := string(z.lineBuf[:i])
			z.lineBuf = z.lineBuf[i+1:]
			return line, nil
		}
		n, e := rawio.ReadFD(z.ans, b[:])
		switch {
		case e == syscall.EAGAIN:
			left := time.Until(deadline)
			if left <= 0 {
				return "", errors.New("the zygote did not answer in time")
			}
			waitReadable(z.ans, min(left, 100*time.Millisecond))
		case e != 0:
			return "", e
		case n == 0:
			return "", errors.New("the zygote exited")
		default:
			z.lineBuf = append(z.lineBuf, b[:n]...)
		}
	}
}

// waitReadable waits up to d for fd to be readable (ppoll).
func waitReadable(fd int, d time.Duration) {
	pfd := struct {
		fd             int32
		events, revent int16
	}{fd: int32(fd), events: 0x1} // POLLIN
	ts := syscall.NsecToTimespec(int64(d))
	_, _, _ = syscall.Syscall6(syscall.SYS_PPOLL, uintptr(unsafe.Pointer(&pfd)), 1, uintptr(unsafe.Pointer(&ts)), 0, 0, 0)
}

// spawn has the zygote fork a worker for cfg.
func (z *zygote) spawn(cfg *Config) (*process, error) {
	z.n++
	dir := filepath.Join(z.dir, strconv.Itoa(z.n))
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	names := []string{"in", "out", "err"}
	if cfg.StatusPipe {
		names = append(names, "status")
	}
	fds := []int{-1, -1, -1, -1}
	fail := func(err error) (*process, error) {
		for _, fd := range fds {
			if fd >= 0 {
				syscall.Close(fd)
			}
		}
		return nil, fmt.Errorf("embedded perl: %w", err)
	}
	for i, name := range names {
		path := filepath.Join(dir, name)
		if err := syscall.Mkfifo(path, 0o600); err != nil {
			return fail(err)
		}
		mode := syscall.O_RDONLY
		if i == 0 {
			mode = syscall.O_RDWR // a writer before the worker opens it
		}
		fd, err := syscall.Open(path, mode|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
		if err != nil {
			return fail(err)
		}
		fds[i] = fd
	}
	if _, e := rawio.WriteFD(z.ctl, []byte("fork "+dir+"\n")); e != 0 {
		return fail(e)
	}
	line, err := z.answer(zygoteForkWait)
	if err != nil {
		return fail(err)
	}
	pid, err := strconv.Atoi(line)
	if err != nil {
		return fail(errors.New(line))
	}
	// The worker has its end: stdin becomes write-only, so that a write
	// to a worker gone fails as on a pipe.
	if w, err := syscall.Open(filepath.Join(dir, "in"), syscall.O_WRONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0); err == nil {
		syscall.Close(fds[0])
		fds[0] = w
	}
	for _, l := range []struct {
		res int
		n   uint64
	}{{rlimitRSS, cfg.RLimitRSS}, {syscall.RLIMIT_AS, cfg.RLimitAS}, {syscall.RLIMIT_DATA, cfg.RLimitAS}} {
		if l.n > 0 {
			lim := syscall.Rlimit{Cur: l.n, Max: l.n}
			_, _, _ = syscall.RawSyscall6(syscall.SYS_PRLIMIT64, uintptr(pid), uintptr(l.res), uintptr(unsafe.Pointer(&lim)), 0, 0, 0)
		}
	}
	side := &procSide{stderr: os.NewFile(uintptr(fds[2]), "worker-stderr")}
	if fds[3] >= 0 {
		side.status = os.NewFile(uintptr(fds[3]), "worker-status")
	}
	empty := ""
	side.qid.Store(&empty)
	return &process{pid: pid, io: newPipes(fds[0], fds[1]), side: side}, nil
}

// reap collects the zygote if it has exited.
func (z *zygote) reap() {
	if z.pid > 0 && !z.reaped {
		if pid, err := syscall.Wait4(z.pid, nil, syscall.WNOHANG, nil); pid == z.pid || err == syscall.ECHILD {
			z.reaped = true
		}
	}
}

// close ends the zygote (its stdin closed: it leaves its loop and exits;
// the workers it forked are not its children) and waits for it.
func (z *zygote) close() {
	syscall.Close(z.ctl)
	syscall.Close(z.ans)
	if z.pid > 0 && !z.reaped {
		_ = syscall.Kill(z.pid, syscall.SIGTERM)
		_, _ = syscall.Wait4(z.pid, nil, 0, nil)
		z.reaped = true
	}
	os.RemoveAll(z.dir)
}
