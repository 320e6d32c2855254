package mux_test

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"sluice/internal/mux"
	"sluice/internal/pool"
	"sluice/internal/pool/pooltest"
	"sluice/internal/testutil/muxref"
	"sluice/internal/testutil/peer"
)

var fakeWorker string

// TestMain builds the fake worker where the reference, which runs its
// workers as another user, can read it.
func TestMain(m *testing.M) { os.Exit(pooltest.Main(m, &fakeWorker)) }

// target is a running multiplexor: its main and restricted sockets.
type target struct {
	name     string
	main, ro string
}

// settings are the flags both implementations get.
type settings struct {
	min, max, queue int
	busy, queueTime int // seconds
	// slew is sluice's -w when not 0 (benchmarks only: flags() gives
	// both sides -w 1).
	slew time.Duration
}

func (s settings) flags() []string {
	return []string{"-m", fmt.Sprint(s.min), "-x", fmt.Sprint(s.max), "-w", "1", "-b", fmt.Sprint(s.busy),
		"-q", fmt.Sprint(s.queue), "-Q", fmt.Sprint(s.queueTime)}
}

func startSluice(t testing.TB, st settings) target {
	t.Helper()
	dir := t.TempDir()
	p, err := pool.New(pool.Config{
		Program: fakeWorker, Args: []string{"-server"}, Dir: dir,
		MinWorkers: st.min, MaxWorkers: st.max, MaxRequests: 500,
		IdleTime: 300 * time.Second, BusyTimeout: time.Duration(st.busy) * time.Second,
		CmdTimeout: 10 * time.Second, SlewTime: cmp.Or(st.slew, time.Second),
		QueueSize: st.queue, QueueTimeout: time.Duration(st.queueTime) * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- p.Run(ctx) }()
	srv := mux.New(mux.Options{Pool: p, Timeout: 10 * time.Second})
	tg := target{name: "sluice", main: filepath.Join(dir, "mx.sock"), ro: filepath.Join(dir, "ro.sock")}
	serveDone := make(chan error, 2)
	for _, l := range []struct {
		path string
		priv bool
	}{{tg.main, true}, {tg.ro, false}} {
		ln, err := net.Listen("unix", l.path)
		if err != nil {
			t.Fatal(err)
		}
		go func() { serveDone <- srv.Serve(ln, l.priv) }()
	}
	t.Cleanup(func() {
		srv.Close()
		<-serveDone
		<-serveDone
		cancel()
		<-runDone
	})
	return tg
}

// startReference runs Debian's mimedefang-multiplexor in the foreground
// with the same fake worker, as user defang when the test runs as root.
// Without the reference (muxref) the test checks sluice alone and ends
// skipped (peer.Partial).
func startReference(t *testing.T, st settings) (target, bool) {
	t.Helper()
	if muxref.MuxPartial(t) == "" {
		return target{}, false
	}
	dir, err := os.MkdirTemp("", "muxref")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	args := []string{"-D", "-z", dir, "-s", filepath.Join(dir, "mx.sock"), "-a", filepath.Join(dir, "ro.sock"), "-f", fakeWorker}
	if os.Geteuid() == 0 {
		if err := chownDefang(dir); err != nil {
			peer.Partial(t, "user defang", err)
			return target{}, false
		}
		args = append(args, "-U", "defang")
	}
	args = append(args, st.flags()...)
	stop := runReference(t, args)
	t.Cleanup(stop)
	tg := target{name: "reference", main: filepath.Join(dir, "mx.sock"), ro: filepath.Join(dir, "ro.sock")}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := os.Stat(tg.ro); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the reference never created its sockets")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return tg, true
}

// query sends raw bytes on one connection, optionally half-closes, and
// returns everything the server sends before it closes.
func query(t testing.TB, sock, req string, halfClose bool) string {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatalf("dial %s: %v", sock, err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.Write([]byte(req)); err != nil {
		t.Fatalf("write: %v", err)
	}
	if halfClose {
		_ = c.(*net.UnixConn).CloseWrite()
	}
	b, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("read %q: %v", req, err)
	}
	return string(b)
}

type step struct {
	req       string
	ro        bool // on the restricted socket
	halfClose bool
	// want is what the step expects: reply(s), checked on both sides (an
	// empty s is an empty reply), or vsReference, compared with the
	// reference's reply only. A step must say which.
	want expect
	// refAlso are replies the reference may give instead of want: the
	// other outcomes of its own race (sluice, which gives a worker reaped
	// while busy 1 s to deliver its output, must give want).
	refAlso []string
}

// expect is a step's expectation; its zero value is no expectation at
// all, which runScript refuses.
type expect struct {
	reply string
	kind  int // 0 unset, 1 reply, 2 only compared with the reference
}

// reply expects exactly s from both sides ("" is an empty reply).
func reply(s string) expect { return expect{reply: s, kind: 1} }

// vsReference expects nothing in particular: the reply is only compared
// with the reference's (after normalize).
var vsReference = expect{kind: 2}

var (
	pidRe    = regexp.MustCompile(`(?m)^(\d+ [IBK]) \d+`)
	agoRe    = regexp.MustCompile(`ago=\d+`)
	uptimeRe = regexp.MustCompile(`(?m) \d+\n$`)
)

// normalize hides what legitimately differs between two runs: pids,
// seconds since a state change, uptime.
func normalize(req, reply string) string {
	reply = pidRe.ReplaceAllString(reply, "$1 PID")
	reply = agoRe.ReplaceAllString(reply, "ago=N")
	if strings.HasPrefix(req, "status") {
		reply = uptimeRe.ReplaceAllString(reply, " UPTIME\n")
	}
	// Average milliseconds per command depend on scheduling.
	// So do the uptime fields of load1 (21st) and load (29th).
	var ms []int
	switch {
	case strings.HasPrefix(req, "load1 "):
		ms = []int{2, 5, 8, 11, 20}
	case strings.HasPrefix(req, "load"):
		ms = []int{8, 9, 10, 11, 28}
	case strings.HasPrefix(req, "hload"):
		ms = []int{8, 9, 10, 11}
	}
	if f := strings.Fields(reply); len(ms) > 0 && len(f) > 12 {
		for _, i := range ms {
			if i < len(f) {
				f[i] = "MS"
			}
		}
		reply = strings.Join(f, " ") + "\n"
	}
	return reply
}

func runScript(t *testing.T, tg target, steps []step) []string {
	var out []string
	for _, s := range steps {
		if s.want.kind == 0 {
			t.Fatalf("step %q says nothing of its reply: give want: reply(...) or vsReference", s.req)
		}
		sock := tg.main
		if s.ro {
			sock = tg.ro
		}
		got := query(t, sock, s.req, s.halfClose)
		if tg.name == "reference" && slices.Contains(s.refAlso, got) {
			t.Logf("reference: %q: got %q, the other outcome of its race", s.req, got)
			got = s.want.reply
		}
		if s.want.kind == 1 && got != s.want.reply {
			t.Errorf("%s: %q: got %q, want %q", tg.name, s.req, got, s.want.reply)
		}
		out = append(out, normalize(s.req, got))
	}
	return out
}

// differential runs steps against sluice and, when installed, the
// reference, and compares every reply.
func differential(t *testing.T, st settings, steps []step) {
	t.Helper()
	sl := startSluice(t, st)
	ref, haveRef := startReference(t, st)
	// Both start their first -m workers (then one a second): the script
	// starts once they are up.
	waitIdle(t, sl, st.min)
	if haveRef {
		waitIdle(t, ref, st.min)
	}
	got := runScript(t, sl, steps)
	if !haveRef {
		return
	}
	want := runScript(t, ref, steps)
	same := 0
	for i := range steps {
		if !sameReply(t, got[i], want[i]) {
			t.Errorf("request %q: sluice %q, reference %q", trunc(steps[i].req), trunc(got[i]), trunc(want[i]))
		} else {
			same++
		}
	}
	t.Logf("%d of %d replies identical to the reference's (after normalizing pids, ago= and uptime)", same, len(steps))
}

// stateAgeRe is workerinfo's LastStateChangeAge line.
var stateAgeRe = regexp.MustCompile(`(?m)^LastStateChangeAge (\d+)$`)

// sameReply compares two normalized replies. The one difference it lets
// through is workerinfo's LastStateChangeAge off by exactly one second:
// each side subtracts the time of a state change from its own clock, read
// at a slightly different moment, and rounds to whole seconds.
func sameReply(t *testing.T, got, want string) bool {
	if got == want {
		return true
	}
	g, w := stateAgeRe.FindStringSubmatch(got), stateAgeRe.FindStringSubmatch(want)
	if g == nil || w == nil {
		return false
	}
	gs, _ := strconv.Atoi(g[1])
	ws, _ := strconv.Atoi(w[1])
	if gs-ws != 1 && ws-gs != 1 {
		return false
	}
	if stateAgeRe.ReplaceAllString(got, "") != stateAgeRe.ReplaceAllString(want, "") {
		return false
	}
	t.Logf("LastStateChangeAge: sluice %d, reference %d (clocks read a second apart)", gs, ws)
	return true
}

func trunc(s string) string {
	if len(s) > 120 {
		return fmt.Sprintf("%s...(%d bytes)", s[:120], len(s))
	}
	return s
}

func TestDifferentialCommands(t *testing.T) {
	t.Parallel()
	steps := []step{
		{req: "status\n", want: vsReference},
		{req: "workers\n", want: vsReference},
		{req: "help\n", want: vsReference},
		{req: "help\n", ro: true, want: vsReference},
		{req: "free\n", want: reply("4\n")},
		{req: "version\n", want: reply("3.3")},
		{req: "tick\n", want: reply(mux.ReplyTick)},
		{req: "tick\n", ro: true, want: reply(mux.ReplyTick)},
		{req: "foo_no_such_command\n", ro: true, want: reply(mux.ReplyUnknown)},
		{req: "relayok 1.2.3.4 host 25\n", ro: true, want: reply(mux.ReplyPrivileged)},
		{req: "reread\n", ro: true, want: reply(mux.ReplyPrivileged)},
		{req: "workerinfo x\n", want: reply(mux.ReplyBadWorker)},
		{req: "workerinfo 9\n", want: reply(mux.ReplyWorkerRange)},
		{req: "workerinfo -1\n", want: reply(mux.ReplyWorkerRange)},
		{req: "slaveinfo 3\n", want: vsReference},
		{req: "workerinfo\n", want: vsReference},
		// With nothing after the space, these are no built-ins (the
		// reference checks the length first): a worker gets them.
		{req: "workerinfo \n", want: reply("echo \"workerinfo \"\n")},
		{req: "slaveinfo \n", want: reply("echo \"slaveinfo \"\n")},
		{req: "load1 \n", want: reply("echo \"load1 \"\n")},
		{req: "load1 \n", ro: true, want: reply(mux.ReplyPrivileged)},
		{req: "workerinfo  1\n", want: vsReference},
		{req: "load1 9\n", want: reply(mux.ReplyBadBack)},
		{req: "load1 601\n", want: reply(mux.ReplyBadBack)},
		{req: "load1 x\n", want: reply(mux.ReplyBadBack)},
		{req: "busyworkers\n", want: reply("")},
		{req: "hello world\n", want: vsReference},
		{req: "relayok 192.0.2.9 host 25 127.0.0.1 25 NOQUEUE\n", want: reply("ok 1 ok 250 2.1.0 0\n")},
		{req: "scan Q1 /tmp\n", want: reply("ok\n")},
		{req: "workers\n", want: vsReference},
		{req: "status\n", want: vsReference},
		{req: "msgs\n", want: reply("1\n")},
		{req: "histo\n", want: vsReference},
		{req: "load-recipok\n", want: vsReference},
		{req: "hload-senderok\n", want: vsReference},
		{req: "load1 10\n", want: vsReference},
		{req: "two\n", want: reply("one\n")},
		{req: "after-two\n", want: vsReference},
		{req: "long 5000\n", want: reply(strings.Repeat("x", 4096))},
		{req: "after-long\n", want: vsReference},
		{req: "long 4094\n", want: vsReference},
		{req: strings.Repeat("a", 4094) + "\n", want: vsReference},
		{req: strings.Repeat("a", 4095) + "\n", want: reply(mux.ReplyTooLong)},
		{req: strings.Repeat("b", 9000) + "\n", want: reply(mux.ReplyTooLong)},
		{req: "free", halfClose: true, want: vsReference},
		{req: "", halfClose: true, want: vsReference},
		{req: "status\r\r\n", want: vsReference},
		{req: "x\x00y\n", want: vsReference},
		{req: "free\nmsgs\n", want: reply("4\n")},
		{req: "flood 200000\n", want: reply("flooded\n")},
		{req: "die\n", want: reply(mux.ReplyNoResponse)},
		// The worker writes "part" and exits: the reference relays it, or,
		// when it reaps the worker before reading, reports an error (which
		// one depends on whether the pipe read failed or found the end), or
		// says nothing: reapTerminatedWorkers' shutDescriptors cancels the
		// pending read and closes the client's descriptor unanswered.
		{req: "partial\n", want: reply("part"), refAlso: []string{mux.ReplyTalk, mux.ReplyNoResponse, ""}},
	}
	differential(t, settings{min: 1, max: 4, busy: 10, queueTime: 30}, steps)
}

func TestDifferentialBusyTimeout(t *testing.T) {
	if testing.Short() {
		t.Skip("takes 10 s (the reference's minimum -b)")
	}
	t.Parallel()
	differential(t, settings{min: 1, max: 2, busy: 10, queueTime: 30}, []step{
		{req: "hang\n", want: reply(mux.ReplyTimeoutFew)},
		{req: "after\n", want: vsReference},
	})
}

// TestSameReply: the differential comparison lets through a one-second
// LastStateChangeAge difference and nothing else.
func TestSameReply(t *testing.T) {
	info := func(state string, age int) string {
		return fmt.Sprintf("Worker 1\nState %s\nPID -1\nNumRequests 0\nNumScans 0\nAge -1\nFirstReqAge -1\nLastStateChangeAge %d\nStatusTag \n", state, age)
	}
	for _, c := range []struct {
		got, want string
		same      bool
	}{
		{info("S", 3), info("S", 3), true},
		{info("S", 4), info("S", 3), true},
		{info("S", 3), info("S", 4), true},
		{info("S", 5), info("S", 3), false},
		{info("I", 4), info("S", 3), false},
		{info("S", 0), "LastStateChangeAge 1\n", false},
		{"ago=1\n", "ago=2\n", false},
	} {
		if got := sameReply(t, c.got, c.want); got != c.same {
			t.Errorf("sameReply(%q, %q) = %v, want %v", c.got, c.want, got, c.same)
		}
	}
}
