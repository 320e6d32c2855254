package netserve

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"sluice/internal/rawio"
)

// The waiter's raw waits (poller.wait, busy.go): taken while every
// goroutine of netserve's waits in netserve (on one processor), never
// beside another epoll set, and never for longer than rawWaitMax since
// the last park.

func TestRawAllowed(t *testing.T) {
	for _, tc := range []struct {
		busy        int64
		procs, sets int
		want        bool
	}{
		{0, 1, 1, true},
		{1, 1, 1, false},  // one goroutine waits elsewhere: it may need the runtime's poller
		{-1, 1, 1, false}, // a goroutine not counted waits in netserve: the count is no proof
		{1, 2, 1, true},   // another processor serves the rest
		{0, 1, 2, false},  // a second set is watched by the runtime's poller
		{0, 4, 2, false},
	} {
		if got := rawAllowed(tc.busy, tc.procs, tc.sets); got != tc.want {
			t.Errorf("rawAllowed(busy %d, procs %d, sets %d) = %v, want %v", tc.busy, tc.procs, tc.sets, got, tc.want)
		}
	}
}

func TestYieldMayAllow(t *testing.T) {
	for _, tc := range []struct {
		busy        int64
		procs, sets int
		want        bool
	}{
		{1, 1, 1, true}, // a busy goroutine may only be runnable: let it run
		{3, 1, 1, true},
		{0, 1, 1, false},  // nobody busy: the refusal is not theirs
		{-1, 1, 1, false}, // the count is no proof either way
		{1, 1, 2, false},  // a second set: no yield closes it
		{2, 4, 2, false},
	} {
		if got := yieldMayAllow(tc.busy, tc.procs, tc.sets); got != tc.want {
			t.Errorf("yieldMayAllow(busy %d, procs %d, sets %d) = %v, want %v", tc.busy, tc.procs, tc.sets, got, tc.want)
		}
	}
}

// setOf returns the server's set once Serve has taken it.
func setOf(t *testing.T, s *Server) *poller {
	t.Helper()
	var p *poller
	waitFor(t, "Serve to take the set", func() bool {
		p = s.set()
		return p != nil
	})
	return p
}

// set returns the server's set (nil until Serve takes it).
func (s *Server) set() *poller {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.poll
}

// twoProcs runs the test on two processors: a client in the test's own
// process waits for its replies in the runtime's poller, which one
// processor in raw waits would leave unpolled until the next park.
func twoProcs(t *testing.T) {
	old := runtime.GOMAXPROCS(2)
	t.Cleanup(func() { runtime.GOMAXPROCS(old) })
}

// longRaw makes the waiter's raw waits last up to a minute, and its park
// come a minute after the last, so that a slow run (the race detector, a
// loaded machine) leaves no 20 ms gap between a test's requests that ends
// a raw wait for a park; at the end it sets them back and sends c one
// more request, which ends the raw wait in progress.
func longRaw(t *testing.T, p *poller, c net.Conn, r *bufio.Reader) {
	p.rawMax.Store(int64(time.Minute))
	t.Cleanup(func() {
		p.rawMax.Store(int64(rawWaitMax))
		exchange(t, c, r, 1)
	})
}

// rawEcho serves echoLines on two processors with longRaw, and returns
// its set and a client.
func rawEcho(t *testing.T) (*poller, net.Conn, *bufio.Reader) {
	twoProcs(t)
	s := New(Options{Name: "echo", Logger: slog.New(slog.DiscardHandler)}, echoLines)
	dial := serveTCP(t, s)
	p := setOf(t, s)
	c, r := dial()
	longRaw(t, p, c, r)
	return p, c, r
}

// releaser returns a function that closes release once; it runs before
// the server's shutdown too (registered after serveTCP), so that a failed
// test does not leave a handler waiting for it.
func releaser(t *testing.T, release chan struct{}) func() {
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free)
	return free
}

// exchange sends n lines on c and reads each one's echo.
func exchange(t *testing.T, c net.Conn, r *bufio.Reader, n int) {
	t.Helper()
	for range n {
		if _, err := io.WriteString(c, "ping\n"); err != nil {
			t.Fatal(err)
		}
		if l, err := r.ReadString('\n'); err != nil || l != "ping\n" {
			t.Fatalf("echo: %q, %v", l, err)
		}
	}
}

// blockingEcho echoes lines; on the line "block" it first waits for
// release, outside netserve (as for a store on the network or a queue's
// slot); on "release" it closes release; on "stats" it answers the set's
// count of raw waits, of busy goroutines and of parks; on "longraw" it
// lets the waiter's raw waits last a minute (longRaw's setting).
func blockingEcho(s **Server, release chan struct{}, blocked chan<- struct{}) func(*Conn) {
	var once sync.Once
	return func(c *Conn) {
		sc := bufio.NewScanner(c.Reader())
		for sc.Scan() {
			reply := sc.Text()
			switch reply {
			case "block":
				if blocked != nil {
					blocked <- struct{}{}
				}
				<-release
			case "release":
				once.Do(func() { close(release) })
			case "stats":
				p := (*s).set()
				reply = fmt.Sprintf("%d %d %d %d", p.rawWaits.Load(), p.busy.Load()-1, p.parks.Load(), p.leads.Load()) // not counting itself
			case "longraw":
				(*s).set().rawMax.Store(int64(time.Minute))
			}
			if _, err := io.WriteString(c, reply+"\n"); err != nil {
				return
			}
			c.Done()
		}
	}
}

func TestWaiterWaitsRawWhileAllWaitInNetserve(t *testing.T) {
	p, c, r := rawEcho(t)
	exchange(t, c, r, 1)
	before := p.rawWaits.Load()
	exchange(t, c, r, 20)
	if got := p.rawWaits.Load() - before; got == 0 {
		t.Fatal("20 requests, the set the process's only one: no raw wait took an event")
	}
	waitFor(t, "every goroutine back in netserve", func() bool { return p.busy.Load() == 0 })
}

// A handler waiting outside netserve is counted busy, which forbids raw
// waits on one processor.
func TestBusyCountsAHandlerWaitingElsewhere(t *testing.T) {
	release, blocked := make(chan struct{}), make(chan struct{})
	var s *Server
	s = New(Options{Name: "echo", Logger: slog.New(slog.DiscardHandler)}, blockingEcho(&s, release, blocked))
	dial := serveTCP(t, s)
	free := releaser(t, release)
	p := setOf(t, s)
	held, hr := dial()
	other, or := dial()
	exchange(t, other, or, 1)
	if _, err := io.WriteString(held, "block\n"); err != nil {
		t.Fatal(err)
	}
	<-blocked
	waitFor(t, "one goroutine busy: the handler waiting outside netserve", func() bool { return p.busy.Load() == 1 })
	if rawAllowed(p.busy.Load(), 1, 1) {
		t.Fatal("a raw wait allowed on one processor while a handler waits outside netserve")
	}
	exchange(t, other, or, 5)
	free()
	if l, err := hr.ReadString('\n'); err != nil || l != "block\n" {
		t.Fatalf("held echo: %q, %v", l, err)
	}
	waitFor(t, "every goroutine back in netserve", func() bool { return p.busy.Load() == 0 })
}

// A handler that reads in a goroutine started with Conn.Go while it waits
// elsewhere is busy: the reader's wait in netserve does not cancel it out.
func TestConnGoCountsItsGoroutine(t *testing.T) {
	release := make(chan struct{})
	reading := make(chan *fdConn, 1)
	s := New(Options{Name: "split", Logger: slog.New(slog.DiscardHandler)}, func(c *Conn) {
		done := make(chan struct{})
		c.Go(func() {
			defer close(done)
			reading <- c.Conn.(*fdConn)
			var b [16]byte
			c.Read(b[:]) // parks: the client sends nothing
		})
		<-release // waits outside netserve
		c.Close()
		<-done
	})
	dial := serveTCP(t, s)
	free := releaser(t, release)
	p := setOf(t, s)
	dial()
	fc := <-reading
	waitFor(t, "the reader parked in netserve", fc.rd.slot.waiting.Load)
	waitFor(t, "the accept loop parked", func() bool { return p.busy.Load() <= 1 })
	if n := p.busy.Load(); n != 1 {
		t.Fatalf("busy = %d: the handler waits outside netserve and its reader in it, want 1", n)
	}
	free()
	waitFor(t, "every goroutine back in netserve", func() bool { return p.busy.Load() == 0 })
}

func TestNoRawWaitBesideAnotherSet(t *testing.T) {
	p, c, r := rawEcho(t)
	other, err := rawio.NewEpoll("other")
	if err != nil {
		t.Fatal(err)
	}
	exchange(t, c, r, 1)
	before := p.rawWaits.Load()
	exchange(t, c, r, 20)
	if got := p.rawWaits.Load() - before; got != 0 {
		t.Fatalf("%d raw waits beside another epoll set, which the runtime's poller watches", got)
	}
	other.Close()
	exchange(t, c, r, 1)
	before = p.rawWaits.Load()
	exchange(t, c, r, 20)
	if p.rawWaits.Load() == before {
		t.Fatal("no raw wait once the other set was closed")
	}
}

// However busy the doors keep the raw waits, the waiter parks once
// rawWaitMax has passed since it last did: the park is where the
// scheduler polls the runtime's poller for the process's other goroutines.
func TestWaiterParksAfterRawWaitMax(t *testing.T) {
	p, c, r := rawEcho(t)
	exchange(t, c, r, 1)
	before := p.rawWaits.Load()
	exchange(t, c, r, 5)
	if p.rawWaits.Load() == before {
		t.Fatal("no raw wait, the set the process's only one")
	}
	parks := p.parks.Load()
	p.parkedAt.Store(-int64(time.Hour)) // the last park an hour ago
	exchange(t, c, r, 2)
	// The waiter counts the park once it has woken the handler: the echo
	// may come first.
	waitFor(t, "a park, an hour after the last", func() bool { return p.parks.Load() > parks })
}

// rawChildEnv names the socket TestMain serves blockingEcho on, on one
// processor, when the test binary runs as TestRawWaitsOnOneProcessor's
// child.
const rawChildEnv = "NETSERVE_TEST_RAW_CHILD"

// rawChildIdleEnv is the child's IdleTimeout (a time.Duration), when set.
const rawChildIdleEnv = "NETSERVE_TEST_RAW_IDLE"

// rawChild serves blockingEcho on the unix socket path until its standard
// input ends.
func rawChild(path string) {
	runtime.GOMAXPROCS(1)
	idle, _ := time.ParseDuration(os.Getenv(rawChildIdleEnv))
	l, err := net.Listen("unix", path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var s *Server
	release := make(chan struct{})
	s = New(Options{Name: "child", Logger: slog.New(slog.DiscardHandler), ConnLimits: ConnLimits{IdleTimeout: idle}}, blockingEcho(&s, release, nil))
	go s.Serve(l)
	io.Copy(io.Discard, os.Stdin)
	s.Close()
	os.Exit(0) // a handler may still wait for release
}

// oneProc is the test binary serving blockingEcho on one processor as
// TestMain's child (rawChild), its clients in the test's process.
type oneProc struct {
	t    *testing.T
	path string
}

// startOneProc starts the child; it ends with the test. env is added to
// the child's environment.
func startOneProc(t *testing.T, env ...string) *oneProc {
	path := filepath.Join(t.TempDir(), "s")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), rawChildEnv+"="+path), env...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			t.Errorf("child: %v", err)
		}
	})
	return &oneProc{t: t, path: path}
}

// dial opens a session to the child; it is closed with the test.
func (o *oneProc) dial() (net.Conn, *bufio.Reader) {
	var c net.Conn
	waitFor(o.t, "the child to listen", func() bool {
		var err error
		c, err = net.Dial("unix", o.path)
		return err == nil
	})
	o.t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(30 * time.Second)) // against a hang only
	return c, bufio.NewReader(c)
}

// ask sends line on c and returns the answer.
func (o *oneProc) ask(c net.Conn, r *bufio.Reader, line string) string {
	o.t.Helper()
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		o.t.Fatal(err)
	}
	l, err := r.ReadString('\n')
	if err != nil {
		o.t.Fatalf("%s: %v", line, err)
	}
	return l
}

// stats asks the child's set for its raw waits, busy goroutines and parks.
func (o *oneProc) stats(c net.Conn, r *bufio.Reader) (raw, busy, parks int64) {
	raw, busy, parks, _ = o.allStats(c, r)
	return raw, busy, parks
}

// leads asks the child's set for the raw waits its sessions' calls took
// in the waiter's place (poller.lead).
func (o *oneProc) leads(c net.Conn, r *bufio.Reader) int64 {
	_, _, _, leads := o.allStats(c, r)
	return leads
}

func (o *oneProc) allStats(c net.Conn, r *bufio.Reader) (raw, busy, parks, leads int64) {
	o.t.Helper()
	if _, err := fmt.Sscan(o.ask(c, r, "stats"), &raw, &busy, &parks, &leads); err != nil {
		o.t.Fatal(err)
	}
	return raw, busy, parks, leads
}

// On one processor, as the daemon runs its doors, with its clients in
// another process: raw waits while every handler waits in netserve, none
// while one waits elsewhere, raw waits again once it is back.
func TestRawWaitsOnOneProcessor(t *testing.T) {
	o := startOneProc(t)
	held, hr := o.dial()
	c, r := o.dial()

	exchange(t, c, r, 1)
	raw0, _, _ := o.stats(c, r)
	exchange(t, c, r, 20)
	if raw1, _, _ := o.stats(c, r); raw1 == raw0 {
		t.Fatal("one processor, every handler waiting in netserve: no raw wait took an event")
	}

	if _, err := io.WriteString(held, "block\n"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the held handler waiting outside netserve", func() bool { _, busy, _ := o.stats(c, r); return busy == 1 })
	raw2, _, _ := o.stats(c, r)
	exchange(t, c, r, 20)
	if raw3, _, _ := o.stats(c, r); raw3 != raw2 {
		t.Fatalf("%d raw waits on one processor while a handler waited outside netserve", raw3-raw2)
	}

	if l := o.ask(c, r, "release"); l != "release\n" {
		t.Fatalf("release: %q", l)
	}
	if l, err := hr.ReadString('\n'); err != nil || l != "block\n" {
		t.Fatalf("held echo: %q, %v", l, err)
	}
	raw4, _, _ := o.stats(c, r)
	exchange(t, c, r, 20)
	if raw5, _, _ := o.stats(c, r); raw5 == raw4 {
		t.Fatal("no raw wait once the handler was back in netserve")
	}
}

// On one processor a session's start does not make the waiter park: the
// accept loop parks in accept before the handler it started runs
// (Serve), and a goroutine of netserve's that is only runnable when the
// waiter looks gets one yield to run and park first (rawOKAfterYield).
// With the accept loop yielding to the handler and no yield in the
// waiter, it parked about once a session.
func TestNoParkAtASessionsStart(t *testing.T) {
	const sessions = 60
	o := startOneProc(t)
	c, r := o.dial()
	if l := o.ask(c, r, "longraw"); l != "longraw\n" { // no park for the 20 ms limit
		t.Fatalf("longraw: %q", l)
	}
	raw0, _, parks0 := o.stats(c, r)
	for range sessions {
		s, sr := o.dial()
		exchange(t, s, sr, 1)
		s.Close()
	}
	raw1, _, parks1 := o.stats(c, r)
	if raw1 == raw0 {
		t.Fatalf("no raw wait in %d sessions", sessions)
	}
	t.Logf("%d sessions: %d raw waits, %d parks", sessions, raw1-raw0, parks1-parks0)
	if parks := parks1 - parks0; parks > sessions/2 {
		t.Fatalf("the waiter parked %d times in %d sessions on one processor", parks, sessions)
	}
}

// On one processor, a session whose peer answers at once waits for the
// set's events itself when it parks (poller.lead): its requests are taken
// by its own raw waits, not handed to it by the waiter; none while
// another handler waits outside netserve.
func TestSessionLeadsOnOneProcessor(t *testing.T) {
	const requests = 20
	o := startOneProc(t)
	held, hr := o.dial()
	c, r := o.dial()
	if l := o.ask(c, r, "longraw"); l != "longraw\n" { // no park for the 20 ms limit
		t.Fatalf("longraw: %q", l)
	}
	exchange(t, c, r, 1)
	leads0 := o.leads(c, r)
	exchange(t, c, r, requests)
	leads1 := o.leads(c, r)
	t.Logf("%d requests: %d raw waits by the session", requests, leads1-leads0)
	if leads1-leads0 < requests/2 {
		t.Fatalf("%d requests on one processor, all else waiting in netserve: the session took %d of their events itself, want at least %d",
			requests, leads1-leads0, requests/2)
	}

	if _, err := io.WriteString(held, "block\n"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the held handler waiting outside netserve", func() bool { _, busy, _ := o.stats(c, r); return busy == 1 })
	leads2 := o.leads(c, r)
	exchange(t, c, r, requests)
	if leads3 := o.leads(c, r); leads3 != leads2 {
		t.Fatalf("%d raw waits by the session on one processor while a handler waited outside netserve", leads3-leads2)
	}
	if l := o.ask(c, r, "release"); l != "release\n" {
		t.Fatalf("release: %q", l)
	}
	if l, err := hr.ReadString('\n'); err != nil || l != "block\n" {
		t.Fatalf("held echo: %q, %v", l, err)
	}
}

// On one processor, a session that waits for the set itself still ends
// at its idle deadline, whose timer runs only when the thread is free:
// its raw waits end at rawWaitMax, it parks, and the timer wakes it.
func TestIdleDeadlineWhileLeading(t *testing.T) {
	o := startOneProc(t, rawChildIdleEnv+"=300ms")
	c, r := o.dial()
	exchange(t, c, r, 1)
	if leads := o.leads(c, r); leads == 0 {
		t.Fatal("the session never waited for the set itself")
	}
	// The session is idle now: the child closes it at its idle deadline
	// (dial's 30 s deadline guards against a hang).
	if l, err := r.ReadString('\n'); err != io.EOF {
		t.Fatalf("an idle session on one processor: read %q, %v; want the end of stream at the idle deadline", l, err)
	}
}
