package cli

// Differential tests of the multiplexor's outputs other than replies:
// the -O notification stream, the -t stats file, -Z status tags, -X
// ticks, -R/-M limits and the syslog messages of -l -A -L -T, each
// compared with the reference (/usr/bin/mimedefang-multiplexor) run with
// the same flags and the same fake worker.

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"sluice/internal/testutil/logbuf"
	"sluice/internal/testutil/muxref"
	"sluice/internal/testutil/peer"
	"sluice/internal/testutil/wait"
)

// featDaemon is a multiplexor a test started in the foreground.
type featDaemon struct {
	name, spool, main string
	pid               int
	stderr            *logbuf.Buffer
	stop              func() // SIGTERM, then wait (idempotent)
}

// featStart runs argv with -D, a fresh spool the -U user owns, the main
// socket mx.sock in it, and the -U user; it waits for the main socket.
// "SPOOL" in args is replaced by the spool directory.
// awaitEventLoop waits (2 s at most) until the reference process pid is
// blocked in its event loop's select(2). Its SIGTERM handler calls
// syslog(3), which is not async-signal-safe: a SIGTERM that lands while
// the process is inside syslog (sending a line the test may already have
// read) deadlocks it on glibc's syslog lock, and it never exits.
func awaitEventLoop(pid int) {
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/wchan", pid)); err != nil || string(b) == "poll_schedule_timeout" {
			return
		}
	}
}

func featStart(t *testing.T, name string, argv []string, env []string) *featDaemon {
	t.Helper()
	uarg, u := asUser(t)
	spool := spoolDir(t, u)
	args := append([]string{}, argv[1:]...)
	for i, a := range args {
		args[i] = strings.ReplaceAll(a, "SPOOL", spool)
	}
	args = append(args, "-D", "-z", spool, "-s", spool+"/mx.sock")
	args = append(args, uarg...)
	cmd := muxref.Command(t, append([]string{argv[0]}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	d := &featDaemon{name: name, spool: spool, main: spool + "/mx.sock", stderr: &logbuf.Buffer{}}
	cmd.Stderr = d.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d.pid = cmd.Process.Pid
	var once sync.Once
	d.stop = func() {
		once.Do(func() {
			if name == "reference" {
				awaitEventLoop(d.pid)
			}
			_ = cmd.Process.Signal(syscall.SIGTERM)
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(60 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
		})
	}
	t.Cleanup(func() {
		d.stop()
		if t.Failed() {
			t.Logf("%s stderr:\n%s", name, d.stderr.String())
		}
	})
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		// A real (built-in) request: an empty connection would hand an
		// empty command to a worker.
		if c, err := net.Dial("unix", d.main); err == nil {
			_, _ = c.Write([]byte("free\n"))
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			_, _ = bufio.NewReader(c).ReadString('\n')
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no main socket; stderr:\n%s", name, d.stderr.String())
		}
	}
	return d
}

// featPair starts sluice and, when installed, the reference with the same
// arguments (the fake worker is WORKER). ref is nil when the reference is
// missing (the test then says so loudly and checks sluice alone).
func featPair(t *testing.T, args []string, env []string) (sl, ref *featDaemon) {
	t.Helper()
	bin, worker := muxBinaries(t)
	for i, a := range args {
		args[i] = strings.ReplaceAll(a, "WORKER", worker)
	}
	sl = featStart(t, "sluice", append([]string{bin, "mux"}, args...), env)
	if muxref.MuxPartial(t) == "" {
		return sl, nil
	}
	ref = featStart(t, "reference", append([]string{referenceMux}, args...), env)
	return sl, ref
}

// featWaitStatus polls `status` until its slot letters match re.
func featWaitStatus(t *testing.T, d *featDaemon, re string) {
	t.Helper()
	rx := regexp.MustCompile(re)
	var last string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if last = muxQuery(t, d.main, "status\n"); rx.MatchString(last) {
			return
		}
	}
	t.Fatalf("%s: status %q never matched %s", d.name, last, re)
}

// featListener is a notification-socket listener collecting every line.
type featListener struct {
	c     net.Conn
	mu    sync.Mutex
	lines []string
	done  chan struct{}
}

func featListen(t *testing.T, sock, subscribe string) *featListener {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	l := &featListener{c: c, done: make(chan struct{})}
	r := bufio.NewReader(c)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if banner, err := r.ReadString('\n'); err != nil || banner != "*OK\n" {
		t.Fatalf("banner %q %v", banner, err)
	}
	_ = c.SetReadDeadline(time.Time{})
	if _, err := c.Write([]byte(subscribe + "\n")); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(l.done)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			l.mu.Lock()
			l.lines = append(l.lines, strings.TrimSuffix(line, "\n"))
			l.mu.Unlock()
		}
	}()
	t.Cleanup(func() { l.close() })
	// The subscription is read asynchronously: wait until the multiplexor
	// has read it (our socket's unsent bytes, SIOCOUTQ, are back to none).
	// The reference handles what it read before its next event; sluice's
	// listener subscribes right after its read returns, well before a
	// request the test sends next could come back as a notification.
	raw, err := c.(*net.UnixConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	wait.For(t, func() bool {
		var n int
		var ierr error
		if err := raw.Control(func(fd uintptr) { n, ierr = unix.IoctlGetInt(int(fd), unix.SIOCOUTQ) }); err != nil || ierr != nil {
			t.Fatalf("SIOCOUTQ: %v %v", err, ierr)
		}
		return n == 0
	}, "the multiplexor to read the subscription %q on %s", subscribe, sock)
	return l
}

// await waits for a line at index from or later that match accepts, and
// returns its index; what names it.
func (l *featListener) await(t *testing.T, from int, match func(string) bool, what string) int {
	t.Helper()
	i := -1
	wait.For(t, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		for j := from; j < len(l.lines); j++ {
			if match(l.lines[j]) {
				i = j
				return true
			}
		}
		return false
	}, "the notification %s", what)
	return i
}

// mark is the number of lines received so far: the index of the next.
func (l *featListener) mark() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.lines)
}

func (l *featListener) close() []string {
	l.c.Close()
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.lines)
}

var (
	featPidRe   = regexp.MustCompile(`(?m)^(\d+ [IBK]) \d+`)
	featAgoRe   = regexp.MustCompile(`(ago=|Age |LastStateChangeAge |age=|req_age=)-?\d+`)
	featPIDLine = regexp.MustCompile(`(?m)^PID \d+`)
	featStamp   = regexp.MustCompile(`(?m)^\d\d/\d\d/\d{4}:\d\d:\d\d:\d\d \d+\.\d{3} `)
)

func featNormalize(s string) string {
	s = featPidRe.ReplaceAllString(s, "$1 PID")
	s = featPIDLine.ReplaceAllString(s, "PID N")
	s = featAgoRe.ReplaceAllString(s, "${1}N")
	return s
}

// The notification stream (docs/protocols/mimedefang-multiplexor.md, "Notifications") and the stats file (docs/protocols/mimedefang-multiplexor.md, "Stats file") of one scripted
// scenario: a relayok, a scan, two overlapping commands (the second
// starts a worker: Z then Y), -Z status tags (one longer than the
// reference's 63-byte read), a worker that dies (U), a reread (R) and a
// busy timeout (B); `workers` and `workerinfo` while a worker shows its
// own tag.
func TestMuxNotifyStatsTagsVsReference(t *testing.T) {
	if testing.Short() {
		t.Skip("the busy timeout takes 10 s")
	}
	t.Parallel()
	args := []string{"-f", "WORKER", "-m", "1", "-x", "2", "-w", "1", "-b", "10", "-Z",
		"-O", "SPOOL/notify.sock", "-t", "SPOOL/stats", "-u"}
	sl, ref := featPair(t, args, nil)
	longTag := strings.Repeat("L", 70) + "%21"
	type outcome struct {
		notes, stats, busy []string
	}
	run := func(d *featDaemon) (o outcome) {
		featWaitStatus(t, d, `^IS `)
		l := featListen(t, d.spool+"/notify.sock", "?*")
		q := func(req string) string { return muxQuery(t, d.main, req+"\n") }
		q("relayok 192.0.2.9 host 25 127.0.0.1 25 NOQUEUE")
		q("scan Q1 /tmp")
		var wg sync.WaitGroup
		wg.Go(func() { q("sleep 800") })
		featWaitStatus(t, d, `^BS `) // the second command starts a worker
		q("sleep 200")
		wg.Wait()
		for _, tag := range []string{"hello%20world", longTag, "one%0Atwo"} {
			// The worker's own tag (the end of its last line: the
			// reference reads 63 bytes at a time) is notified once the
			// multiplexor holds it; the worker answers 400 ms later.
			last := strings.ReplaceAll(tag[strings.LastIndex(tag, "%0A")+1:], "%20", " ")
			last = strings.ReplaceAll(last, "%21", "!")
			from := l.mark()
			wg.Go(func() { q("tag " + tag) })
			l.await(t, from, func(s string) bool {
				f := strings.SplitN(s, " ", 3)
				return len(f) == 3 && f[0] == "S" && f[2] != "" && !strings.HasPrefix(f[2], "tag ") && strings.HasSuffix(last, f[2])
			}, d.name+": the worker's tag "+tag)
			o.busy = append(o.busy, featNormalize(q("busyworkers")), featNormalize(q("workerinfo 1")))
			wg.Wait()
		}
		o.busy = append(o.busy, q("die"))
		featWaitStatus(t, d, `^IS `)
		o.busy = append(o.busy, q("reread"))
		featWaitStatus(t, d, `^SS `)
		featWaitStatus(t, d, `^IS `)
		from := l.mark()
		o.busy = append(o.busy, q("hang"))
		featWaitStatus(t, d, `^IS `)
		// The stream ends with the busy timeout (B) and the new worker
		// idle: the last notification.
		bt := l.await(t, from, func(s string) bool { return s == "B" }, d.name+": B")
		l.await(t, bt+1, func(s string) bool { return s == "S 0 StateChange Stopped -> Idle" }, d.name+": S 0 StateChange Stopped -> Idle after B")
		o.notes = l.close()
		b, err := os.ReadFile(d.spool + "/stats")
		if err != nil {
			t.Errorf("%s: %v", d.name, err)
		}
		o.stats = strings.Split(featAgoRe.ReplaceAllString(featStamp.ReplaceAllString(string(b), "T "), "${1}N"), "\n")
		return o
	}
	var got, want outcome
	var wg sync.WaitGroup
	wg.Go(func() { got = run(sl) })
	if ref != nil {
		wg.Go(func() { want = run(ref) })
	}
	wg.Wait()
	for _, must := range []string{"S 0 StateChange Idle -> Busy", "F 1", "S 0 relayok 192.0.2.9", "S 1 StateChange Stopped -> Idle",
		"Z", "Y", "S 1 tag hello world", "S 1 hello world", "S 1 two", "U", "R", "B", "S 0 hang"} {
		if !slices.Contains(got.notes, must) {
			t.Errorf("sluice sent no %q notification", must)
		}
	}
	if !slices.ContainsFunc(got.stats, func(s string) bool {
		return strings.HasPrefix(s, `T StartWorker worker=1 nworkers=2 nbusy=1 reason="About to execute command 'sleep 200`)
	}) {
		t.Errorf("sluice stats: no on-demand StartWorker line:\n%s", strings.Join(got.stats, "\n"))
	}
	if ref == nil {
		return
	}
	if !reflect.DeepEqual(got.notes, want.notes) {
		t.Errorf("notifications differ:\nsluice:\n%s\nreference:\n%s", strings.Join(got.notes, "\n"), strings.Join(want.notes, "\n"))
	}
	if !reflect.DeepEqual(got.stats, want.stats) {
		t.Errorf("stats files differ:\nsluice:\n%s\nreference:\n%s", strings.Join(got.stats, "\n"), strings.Join(want.stats, "\n"))
	}
	if !reflect.DeepEqual(got.busy, want.busy) {
		t.Errorf("replies differ:\nsluice    %q\nreference %q", got.busy, want.busy)
	}
	t.Logf("%d notifications, %d stats lines, %d replies identical to the reference's", len(got.notes), len(got.stats), len(got.busy))

	// At SIGTERM both reap their workers into the stats file.
	sl.stop()
	ref.stop()
	for _, d := range []*featDaemon{sl, ref} {
		b, _ := os.ReadFile(d.spool + "/stats")
		lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
		if last := lines[len(lines)-1]; !strings.Contains(last, " ReapWorker worker=") || !strings.HasSuffix(last, "nworkers=0 nbusy=0") {
			t.Errorf("%s: last stats line after SIGTERM %q", d.name, last)
		}
	}
}

// Ticks (docs/protocols/mimedefang-multiplexor.md, "Ticks"): every band reaches a worker as "tick <band>", and a
// busy pool skips them (the worker records what it got in ticks.log).
func TestMuxTicksVsReference(t *testing.T) {
	t.Parallel()
	sl, ref := featPair(t, []string{"-f", "WORKER", "-m", "1", "-x", "2", "-X", "1", "-P", "3"}, nil)
	check := func(d *featDaemon) []string {
		var lines []string
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			b, _ := os.ReadFile(d.spool + "/ticks.log")
			seen := map[string]bool{}
			for l := range strings.SplitSeq(strings.TrimSpace(string(b)), "\n") {
				seen[l] = true
			}
			lines = slices.Sorted(func(yield func(string) bool) {
				for l := range seen {
					if !yield(l) {
						return
					}
				}
			})
			if len(lines) >= 3 {
				break
			}
		}
		// A tick is never answered to a client, and clients cannot tick.
		if r := muxQuery(t, d.main, "tick\n"); r != "error: External agents may not invoke 'tick'\n" {
			t.Errorf("%s: tick: %q", d.name, r)
		}
		return lines
	}
	want := []string{"tick 0", "tick 1", "tick 2"}
	if got := check(sl); !reflect.DeepEqual(got, want) {
		t.Errorf("sluice worker got %q, want %q", got, want)
	}
	if ref != nil {
		if got := check(ref); !reflect.DeepEqual(got, want) {
			t.Errorf("reference worker got %q, want %q", got, want)
		}
	}
}

// -R and -M (docs/protocols/mimedefang-multiplexor.md, "Resource limits"): the worker runs with RLIMIT_RSS, RLIMIT_AS and
// RLIMIT_DATA set; one that exceeds -M dies, its client gets the
// reference's reply, and the pool recovers.
func TestMuxMemoryLimitsVsReference(t *testing.T) {
	t.Parallel()
	sl, ref := featPair(t, []string{"-f", "WORKER", "-m", "1", "-x", "1", "-w", "1", "-M", "1000000", "-R", "500000"}, nil)
	script := func(d *featDaemon) []string {
		featWaitStatus(t, d, `^I `)
		var out []string
		out = append(out, muxQuery(t, d.main, "limits\n"), muxQuery(t, d.main, "alloc 10\n"), muxQuery(t, d.main, "alloc 3000\n"))
		// Reaped, then restarted after -w.
		featWaitStatus(t, d, `^S `)
		featWaitStatus(t, d, `^I `)
		out = append(out, muxQuery(t, d.main, "alloc 20\n"), muxQuery(t, d.main, "args\n"))
		return out
	}
	got := script(sl)
	want := []string{
		"Max data size 1024000000 1024000000 bytes|Max resident set 512000000 512000000 bytes|Max address space 1024000000 1024000000 bytes\n",
		"allocated 10\n", "ERR No response from worker\n", "allocated 20\n", `args ["fakeworker" "-server"]` + "\n",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("sluice:\n got %q\nwant %q", got, want)
	}
	if ref != nil {
		if r := script(ref); !reflect.DeepEqual(r, got) {
			t.Errorf("reference %q\nsluice    %q", r, got)
		}
	}
}

// syslogSink is a unixgram socket collecting syslog datagrams.
type syslogSink struct {
	c    *net.UnixConn
	mu   sync.Mutex
	msgs []string
	more chan struct{} // closed (and replaced) at each message
	done chan struct{}
}

func newSyslogSink(t *testing.T, path string) *syslogSink {
	t.Helper()
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o666); err != nil {
		t.Fatal(err)
	}
	s := &syslogSink{c: c, more: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		buf := make([]byte, 65536)
		for {
			n, err := c.Read(buf)
			if err != nil {
				return
			}
			s.mu.Lock()
			s.msgs = append(s.msgs, string(buf[:n]))
			close(s.more)
			s.more = make(chan struct{})
			s.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		c.Close()
		<-s.done
		os.Remove(path)
	})
	return s
}

// waitFor waits (up to 30 s) until n messages tagged tag start with
// prefix.
func (s *syslogSink) waitFor(t *testing.T, tag, prefix string, n int) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		s.mu.Lock()
		more := s.more
		s.mu.Unlock()
		got := 0
		for _, m := range s.with(tag) {
			if _, msg, _ := strings.Cut(m, "> "); strings.HasPrefix(msg, prefix) {
				got++
			}
		}
		if got >= n {
			return
		}
		select {
		case <-more:
		case <-deadline:
			t.Errorf("%s: %d messages %q in 30 s, want %d", tag, got, prefix, n)
			return
		}
	}
}

// with returns the messages whose tag is tag, as "<PRI> message" (time
// stamp and pid cut out).
func (s *syslogSink) with(tag string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	re := regexp.MustCompile(`^<(\d+)>\w{3} [ \d]\d \d\d:\d\d:\d\d ` + regexp.QuoteMeta(tag) + `\[\d+\]: (.*)$`)
	var out []string
	for _, m := range s.msgs {
		if g := re.FindStringSubmatch(strings.TrimSuffix(m, "\x00")); g != nil {
			out = append(out, "<"+g[1]+"> "+g[2])
		}
	}
	return out
}

var featSyslogNorm = []struct {
	re   *regexp.Regexp
	repl string
}{
	{regexp.MustCompile(`\(pid \d+\)`), "(pid N)"},
	{regexp.MustCompile(`stats \d+\.\d{3} `), "stats T "},
	{regexp.MustCompile(`(user|sys)=\d+\.\d{3}`), "$1=N"},
	{regexp.MustCompile(`(nswap|majflt|minflt|maxrss|bi|bo)=\d+`), "$1=N"},
	{regexp.MustCompile(`(age|req_age)=\d+`), "$1=N"},
}

// -l, -S, -Y, -A, -L and -T (docs/protocols/mimedefang-multiplexor.md, "Logging" and "Stats file"): the messages the reference
// sends to syslog, with its facility, severity and ident. When /dev/log
// does not exist the test creates it for the reference (and removes it
// after); sluice is pointed at the same socket.
func TestMuxSyslogVsReference(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for two -L periods (10 s)")
	}
	t.Parallel()
	sockPath := "/dev/log"
	ownDevLog := false
	if _, err := os.Stat(sockPath); err == nil || os.Geteuid() != 0 {
		// A real syslog daemon (or no right to make one): sluice alone,
		// on a socket of the test's own.
		sockPath = filepath.Join(t.TempDir(), "log")
		if err := os.Chmod(filepath.Dir(sockPath), 0o755); err != nil {
			t.Fatal(err)
		}
	} else {
		ownDevLog = true
	}
	sink := newSyslogSink(t, sockPath)
	bin, worker := muxBinaries(t)
	args := func(tag string) []string {
		return []string{"-f", worker, "-m", "1", "-x", "2", "-w", "1", "-l", "-S", "LOG_LOCAL3", "-Y", tag, "-A", "-L", "5", "-T"}
	}
	env := []string{muxSyslogEnv + "=" + sockPath}
	script := func(d *featDaemon) {
		featWaitStatus(t, d, `^I`)
		muxQuery(t, d.main, "relayok 192.0.2.9 host 25 127.0.0.1 25 NOQUEUE\n")
		muxQuery(t, d.main, "scan Q7 /tmp\n")
		muxQuery(t, d.main, "stderr first%0Asecond "+strings.Repeat("x", 80)+"\n")
		// Two -L lines (5 s apart), then stop: both sides log the same.
		tag := map[string]string{"sluice": "sl-mux", "reference": "ref-mux"}[d.name]
		sink.waitFor(t, tag, "Worker status: ", 2)
		d.stop()
	}
	sl := featStart(t, "sluice", append([]string{bin, "mux"}, args("sl-mux")...), env)
	var ref *featDaemon
	why := errors.New("it needs root and no syslog daemon on /dev/log")
	if ownDevLog {
		if _, why = muxref.Find(referenceMux); why == nil {
			ref = featStart(t, "reference", append([]string{referenceMux}, args("ref-mux")...), nil)
		}
	}
	if ref == nil {
		peer.Partial(t, "the reference side of the syslog test", why)
	}
	var wg sync.WaitGroup
	wg.Go(func() { script(sl) })
	if ref != nil {
		wg.Go(func() { script(ref) })
	}
	wg.Wait()
	norm := func(msgs []string) []string {
		var out []string
		for _, m := range msgs {
			for _, n := range featSyslogNorm {
				m = n.re.ReplaceAllString(m, n.repl)
			}
			out = append(out, m)
		}
		return out
	}
	got := norm(sink.with("sl-mux"))
	// local3 is facility 19: info is <158>, debug <159>, err <155>.
	for _, must := range []string{
		"<158> started; minWorkers=1, maxWorkers=2, maxRequests=500, maxLifetime=0, maxIdleTime=300, busyTimeout=120, clientTimeout=10",
		"<158> Starting worker 0 (pid N) (1 running): Bringing workers up to minWorkers (1)",
		"<158> stats T StartWorker worker=0 nworkers=1 nbusy=0 reason=\"Bringing workers up to minWorkers (1)\"",
		"<158> Scheduling Idle worker 0 for cmdno 1 (activated=0, last=-2)",
		"<158> Scheduling Idle worker 0 for cmdno 0 (activated=0, last=1)",
		"<158> stats T StartFilter worker=0 nworkers=1 nbusy=1",
		"<158> Worker 0 stderr: first",
		"<158> Worker status: Stopped=1 Idle=1 Busy=0 Killed=0 Queued=0 Msgs=1 Activations=1",
		"<158> Received SIGTERM: Stopping workers and terminating",
	} {
		if !slices.Contains(got, must) {
			t.Errorf("sluice logged no %q", must)
		}
	}
	if t.Failed() || ref == nil {
		t.Logf("sluice's messages:\n%s", strings.Join(got, "\n"))
		return
	}
	want := norm(sink.with("ref-mux"))
	if !reflect.DeepEqual(got, want) {
		t.Errorf("syslog messages differ:\nsluice:\n%s\nreference:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	} else {
		t.Logf("%d syslog messages identical to the reference's", len(got))
	}
}

// -t without -u: lines stay in the stdio-sized buffer until SIGHUP (which
// also reopens the file, for log rotation) or exit.
func TestMuxStatsBufferAndSIGHUP(t *testing.T) {
	t.Parallel()
	bin, worker := muxBinaries(t)
	d := featStart(t, "sluice", []string{bin, "mux", "-f", worker, "-m", "1", "-x", "1", "-t", "SPOOL/stats"}, nil)
	featWaitStatus(t, d, `^I `)
	muxQuery(t, d.main, "scan Q1 /tmp\n")
	stats := d.spool + "/stats"
	if b, _ := os.ReadFile(stats); len(b) != 0 {
		t.Errorf("without -u the stats reached the file at once: %q", b)
	}
	// Rotate: move the file away, SIGHUP, and the next lines go to a new one.
	if err := os.Rename(stats, stats+".1"); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(d.pid, syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	var old []byte
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if old, _ = os.ReadFile(stats + ".1"); len(old) > 0 {
			break
		}
	}
	for _, ev := range []string{"StartWorker worker=0", "StartFilter worker=0", "EndFilter worker=0 nworkers=1 nbusy=0 numRequests=1"} {
		if !strings.Contains(string(old), ev) {
			t.Errorf("rotated file lacks %q:\n%s", ev, old)
		}
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(stats); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("SIGHUP did not reopen the stats file")
		}
	}
	muxQuery(t, d.main, "scan Q2 /tmp\n")
	d.stop()
	b, _ := os.ReadFile(stats)
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], " StartFilter ") || !strings.Contains(lines[2], " ReapWorker worker=0 nworkers=0 nbusy=0") {
		t.Errorf("new file after SIGHUP and exit:\n%s", b)
	}
	if m := fileMode(t, stats); m != 0o600 {
		t.Errorf("stats file mode %o, want 600", m)
	}
}
