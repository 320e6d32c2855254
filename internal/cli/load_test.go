package cli

// Load tests against the real binary: 10,000 idle connections on each
// door with the daemon's memory measured (its own RSS and Go heap, not
// this process's), and clients sending one byte per second cut off by
// each door's deadline. The daemon is built without the race detector,
// so its figures are the production ones whatever this test runs under.
// docs/reliability.md records the figures.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"sluice/internal/testutil/peer"

	"sluice/internal/anvil/anviltest"
	"sluice/internal/milter/miltest"
	"sluice/internal/milter/wire"
)

// procStatus returns a field of /proc/PID/status in bytes (for kB
// fields) or as a count.
func procStatus(t *testing.T, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == field+":" {
			v, _ := strconv.ParseInt(f[1], 10, 64)
			if len(f) == 3 && f[2] == "kB" {
				v *= 1024
			}
			return v
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// openFDs counts the process's open file descriptors.
func openFDs(pid int) int {
	ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	return len(ents)
}

// scrape returns the samples of the daemon's /metrics (served on the
// unix socket web), by metric name with its labels.
func scrape(t *testing.T, sock string) map[string]float64 {
	t.Helper()
	cl := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
		DisableKeepAlives: true,
	}}
	resp, err := cl.Get("http://sluice/metrics")
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err == nil {
			out[line[:i]] = v
		}
	}
	return out
}

// raiseNofile lifts this process's RLIMIT_NOFILE to at least want (the
// hard limit too, as root) and returns the soft limit; children (the
// daemon) inherit it.
func raiseNofile(t *testing.T, want uint64) uint64 {
	t.Helper()
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		t.Fatal(err)
	}
	if rl.Cur >= want {
		return rl.Cur
	}
	old := rl
	if rl.Max < want && os.Geteuid() == 0 {
		rl.Max = want
	}
	rl.Cur = min(want, rl.Max)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		t.Logf("raising RLIMIT_NOFILE to %d: %v", want, err)
		return old.Cur
	}
	t.Cleanup(func() { _ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old) })
	return rl.Cur
}

// idleConns is how many idle connections each door gets:
// SLUICE_IDLE_CONNS, default 10,000.
func idleConns(t *testing.T) int {
	if testing.Short() {
		t.Skip("opens 10,000 connections per door")
	}
	n := 10000
	if v, err := strconv.Atoi(os.Getenv("SLUICE_IDLE_CONNS")); err == nil && v > 0 {
		n = v
	}
	if lim := raiseNofile(t, uint64(n+1000)); lim < uint64(n+1000) {
		peer.Missing(t, "a descriptor limit for the load", fmt.Errorf("RLIMIT_NOFILE %d is too low for %d connections (raise the hard limit, or set SLUICE_IDLE_CONNS lower)", lim, n))
	}
	return n
}

// serveAllDoors writes a config with every door of `sluice serve` on a
// unix socket in dir (and /metrics on the socket web); extra is appended
// to each door's table (a line such as `request_timeout = "1s"`).
func serveAllDoors(t *testing.T, dir string, anvilExtra, policyExtra, throttleExtra, milterExtra string) string {
	t.Helper()
	body := fmt.Sprintf(`state_dir = %q
[anvil]
listen = ["unix:anvil"]
max_conns = 30000
%s
[policy]
listen = ["unix:policy"]
max_conns = 30000
%s
[[policy.rule]]
name = "sender"
count = "messages"
key = ["sender"]
limit = ["1000000/60s exact"]
[throttle]
listen = ["unix:throttle"]
max_conns = 30000
%s
[[throttle.policy]]
name = "relay"
match = ["*"]
limit = "1000000/1s"
[milter]
listen = ["unix:milter"]
max_sessions = 30000
%s
[web]
listen = ["unix:web"]
`, dir, anvilExtra, policyExtra, throttleExtra, milterExtra)
	path := filepath.Join(dir, "sluice.toml")
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// door is one front end as a client sees it: its socket and a real
// request that proves it still answers.
type door struct {
	name string
	sock string
	ask  func(t *testing.T, sock string)
}

func serveDoors(dir string) []door {
	return []door{
		{"anvil", filepath.Join(dir, "anvil"), askAnvil},
		{"policy", filepath.Join(dir, "policy"), askPolicy},
		{"throttle", filepath.Join(dir, "throttle"), askThrottle},
		{"milter", filepath.Join(dir, "milter"), askMilter},
	}
}

func askAnvil(t *testing.T, sock string) {
	t.Helper()
	cl, err := anviltest.Dial("unix", sock, false)
	if err != nil {
		t.Fatalf("anvil: %v", err)
	}
	defer cl.Close()
	if got, err := cl.Do("connect", "smtp:192.0.2.1"); err != nil || got["status"] != 0 {
		t.Fatalf("anvil connect: %v %v", got, err)
	}
}

const policyRequest = "request=smtpd_access_policy\nprotocol_state=END-OF-MESSAGE\nprotocol_name=ESMTP\nclient_address=192.0.2.1\nclient_name=mail.example.org\nhelo_name=mail.example.org\nsender=a@example.org\nrecipient=b@example.net\nrecipient_count=1\nqueue_id=8045F2AB23\ninstance=123.456.7\nsize=12345\n\n"

func askPolicy(t *testing.T, sock string) {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatalf("policy: %v", err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(c, policyRequest); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "action=") {
		t.Fatalf("policy reply %q %v", line, err)
	}
}

func askThrottle(t *testing.T, sock string) {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatalf("throttle: %v", err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(c, "ACQUIRE relay.example\n"); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "OK ") {
		t.Fatalf("throttle reply %q %v", line, err)
	}
	_, _ = io.WriteString(c, "DONE\n")
}

func askMilter(t *testing.T, sock string) {
	t.Helper()
	m, err := miltest.Dial("unix", sock)
	if err != nil {
		t.Fatalf("milter: %v", err)
	}
	defer m.Close()
	_ = m.Conn.SetDeadline(time.Now().Add(20 * time.Second))
	if err := m.Negotiate(6, wire.AllActions, wire.AllProtocol); err != nil {
		t.Fatalf("milter negotiate: %v", err)
	}
	if _, err := m.Verdict(&wire.Connect{Host: "client.example", Family: wire.FamilyInet, Port: 4321, Addr: "192.0.2.1"}); err != nil {
		t.Fatalf("milter connect: %v", err)
	}
}

// dialMany opens n connections to a unix socket, retrying briefly when
// the listen backlog is momentarily full.
func dialMany(t *testing.T, sock string, n int) []net.Conn {
	t.Helper()
	conns := make([]net.Conn, 0, n)
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	for len(conns) < n {
		conns = append(conns, dialUnix(t, sock))
	}
	return conns
}

// idleFigures opens n idle connections to d and measures what they cost
// the process pid: RSS, and (when web is a /metrics socket) Go heap and
// goroutine stacks. Every connection must still be open at the end, and
// the door must still answer a real request.
func idleFigures(t *testing.T, p *relProc, d door, web string, n int) {
	t.Helper()
	pid := p.pid()
	// Warm up: the first connections allocate what every later one reuses.
	fdBase := openFDs(pid)
	warm := dialMany(t, d.sock, 100)
	d.ask(t, d.sock)
	for _, c := range warm {
		c.Close()
	}
	// Settled: the warm-up connections are gone (a worker or two may
	// have started meanwhile).
	waitUntil(t, "warm-up connections closed", func() bool {
		a := openFDs(pid)
		time.Sleep(200 * time.Millisecond)
		return a <= fdBase+10 && openFDs(pid) == a
	}, func() string { return fmt.Sprintf("%d descriptors open, %d before", openFDs(pid), fdBase) })
	fdBase = openFDs(pid)
	rss0 := procStatus(t, pid, "VmRSS")
	var m0 map[string]float64
	if web != "" {
		m0 = scrape(t, web)
	}
	t0 := time.Now()
	conns := dialMany(t, d.sock, n)
	accepted := func() bool { return openFDs(pid) >= fdBase+n }
	waitUntil(t, fmt.Sprintf("%d connections accepted (%d descriptors at start)", n, fdBase), accepted, func() string {
		return fmt.Sprintf("%d descriptors open; log:\n%s", openFDs(pid), lastLines(p.stderr.String(), 20))
	})
	took := time.Since(t0)
	time.Sleep(200 * time.Millisecond)
	rss1 := procStatus(t, pid, "VmRSS")
	perRSS := float64(rss1-rss0) / float64(n)
	msg := fmt.Sprintf("%s: %d idle connections opened in %v: RSS %d -> %d MB, %.0f bytes per connection",
		d.name, n, took.Round(time.Millisecond), rss0>>20, rss1>>20, perRSS)
	if web != "" {
		m1 := scrape(t, web)
		goBytes := func(m map[string]float64) float64 {
			return m["go_memstats_heap_inuse_bytes"] + m["go_memstats_stack_inuse_bytes"]
		}
		perGo := (goBytes(m1) - goBytes(m0)) / float64(n)
		msg += fmt.Sprintf("; Go heap in use + stacks %.0f bytes per connection; goroutines %.0f -> %.0f",
			perGo, m0["go_goroutines"], m1["go_goroutines"])
		if perGo > 32<<10 {
			t.Errorf("%s: an idle connection costs %.0f bytes of Go heap and stack, bound 32 KiB", d.name, perGo)
		}
	}
	t.Log(msg)
	if perRSS > 64<<10 {
		t.Errorf("%s: an idle connection costs %.0f bytes of RSS, bound 64 KiB", d.name, perRSS)
	}
	// Still served: a real request on a new connection is answered, and
	// no idle connection was dropped.
	d.ask(t, d.sock)
	if got := openFDs(pid); got < fdBase+n {
		t.Errorf("%s: %d descriptors open, want at least %d: idle connections were dropped", d.name, got, fdBase+n)
	}
	for _, c := range conns {
		c.Close()
	}
	waitUntil(t, "idle connections released", func() bool { return openFDs(pid) <= fdBase+10 },
		func() string { return fmt.Sprintf("%d descriptors open, %d before", openFDs(pid), fdBase) })
}

// waitUntil polls cond for up to 60 s; diag says what was seen instead.
func waitUntil(t *testing.T, what string, cond func() bool, diag func() string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s: %s", what, diag())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestIdleConnectionsServe: 10,000 idle connections on each door of
// `sluice serve` (anvil, policy, throttle, milter), one door at a time;
// each costs the daemon a bounded amount of memory, none is dropped, and
// the door keeps answering.
func TestIdleConnectionsServe(t *testing.T) {
	n := idleConns(t)
	bin, _ := muxBinaries(t)
	for _, name := range []string{"anvil", "policy", "throttle", "milter"} {
		// A fresh daemon per door: RSS never shrinks, so a door measured
		// after another would reuse the memory its predecessor grew.
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			// The throttle's idle limit is its request timeout: long enough here.
			cfg := serveAllDoors(t, dir, "", "", `request_timeout = "10m"`, "")
			web := filepath.Join(dir, "web")
			p := relStart(t, bin, []string{"serve", "-c", cfg}, filepath.Join(dir, name), web)
			for _, d := range serveDoors(dir) {
				if d.name == name {
					idleFigures(t, p, d, web, n)
				}
			}
			if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if err := p.wait(t, 60*time.Second); err != nil {
				t.Fatalf("exit: %v\n%s", err, p.stderr.String())
			}
		})
	}
}

// startRelMux starts `sluice mux` in the foreground with the fake worker,
// as the defang user when run as root, and returns it with its main
// socket. timeout is -c.
func startRelMux(t *testing.T, timeout int) (*relProc, string) {
	t.Helper()
	bin, worker := muxBinaries(t)
	uarg, u := asUser(t)
	spool := spoolDir(t, u)
	sock := filepath.Join(spool, "mx.sock")
	args := append([]string{"mux", "-D", "-z", spool, "-s", "unix:" + sock, "-f", worker, "-m", "1", "-x", "2", "-c", strconv.Itoa(timeout)}, uarg...)
	return relStart(t, bin, args, sock), sock
}

// TestIdleConnectionsMux: 10,000 idle connections on `sluice mux`'s main
// socket (a connection must send its command within -c seconds; here 600).
func TestIdleConnectionsMux(t *testing.T) {
	n := idleConns(t)
	p, sock := startRelMux(t, 600)
	d := door{"mux", sock, func(t *testing.T, sock string) {
		if got := muxQuery(t, sock, "free\n"); !freeRe.MatchString(got) {
			t.Fatalf("mux free: %q", got)
		}
	}}
	idleFigures(t, p, d, "", n)
}

// freeRe matches the answer to "free": the number of free workers.
var freeRe = regexp.MustCompile(`^\d+\n$`)

// trickle writes msg to c one byte per second until the server closes the
// connection, and returns how long that took and how many bytes went
// out; it fails the test if the server has not closed it after limit.
func trickle(t *testing.T, c net.Conn, msg string, limit time.Duration) (time.Duration, int) {
	t.Helper()
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		_, _ = io.Copy(io.Discard, c) // anvil's announcement, then EOF
	}()
	start := time.Now()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	sent := 0
	for {
		if sent < len(msg) {
			if _, err := c.Write([]byte{msg[sent]}); err != nil {
				<-closed
				return time.Since(start), sent
			}
			sent++
		}
		select {
		case <-closed:
			return time.Since(start), sent
		case <-tick.C:
		}
		if time.Since(start) > limit {
			c.Close()
			<-closed
			t.Fatalf("a client sending one byte per second was not cut off after %v (%d bytes sent)", limit, sent)
		}
	}
}

// TestSlowClientsCut: on every door, a client that sends a real request
// one byte per second is cut off by the door's deadline (request_timeout
// 1 s, the milter's too; mux -c 10, its minimum), before
// the request is complete. The only time bound asserted is that it did
// not hang for 60 s. The doors are tried in parallel.
func TestSlowClientsCut(t *testing.T) {
	if testing.Short() {
		t.Skip("slow clients take seconds")
	}
	bin, _ := muxBinaries(t)
	dir := t.TempDir()
	rt := `request_timeout = "1s"`
	cfg := serveAllDoors(t, dir, rt, rt, rt, rt)
	p := relStart(t, bin, []string{"serve", "-c", cfg}, filepath.Join(dir, "anvil"), filepath.Join(dir, "policy"), filepath.Join(dir, "throttle"), filepath.Join(dir, "milter"))
	// The milter's first packet, SMFIC_OPTNEG (17 bytes): an MTA that
	// takes 17 s to send it has stalled.
	optneg, _ := wire.Encode(nil, &wire.OptNeg{Version: 6, Actions: wire.AllActions, Protocol: wire.AllProtocol})
	requests := map[string]string{
		"anvil":    "request=connect\nident=smtp:192.0.2.1\n\n",
		"policy":   policyRequest,
		"throttle": "ACQUIRE relay.example.org\n",
		"milter":   string(optneg),
	}
	check := func(t *testing.T, name, msg string, took time.Duration, sent int) {
		t.Logf("%s: cut off after %v, %d of %d bytes sent", name, took.Round(100*time.Millisecond), sent, len(msg))
		if sent == len(msg) {
			t.Errorf("%s: a request sent at one byte per second got through whole (%d bytes in %v): no deadline bounds a request", name, sent, took.Round(time.Second))
		}
	}
	t.Run("doors", func(t *testing.T) {
		for _, d := range serveDoors(dir) {
			t.Run(d.name, func(t *testing.T) {
				t.Parallel()
				c, err := net.Dial("unix", d.sock)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				took, sent := trickle(t, c, requests[d.name], 60*time.Second)
				check(t, d.name, requests[d.name], took, sent)
				d.ask(t, d.sock) // the door still serves
			})
		}
		t.Run("mux", func(t *testing.T) {
			t.Parallel()
			_, sock := startRelMux(t, 10)
			c, err := net.Dial("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			msg := "relayok 192.0.2.9 host.example 25 127.0.0.1 25 NOQUEUE\n"
			took, sent := trickle(t, c, msg, 60*time.Second)
			check(t, "mux", msg, took, sent)
		})
	})
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if err := p.wait(t, 60*time.Second); err != nil {
		t.Fatalf("exit: %v\n%s", err, p.stderr.String())
	}
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
