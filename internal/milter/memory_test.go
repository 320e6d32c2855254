package milter

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"

	"sluice/internal/milter/miltest"
	"sluice/internal/milter/wire"
)

const (
	idleClientEnv  = "MILTER_IDLE_CLIENT_ADDR"
	idleClientNEnv = "MILTER_IDLE_CLIENT_N"
)

// idleClient runs in a child process (see TestMain): it opens n
// sessions, negotiates and connects each, says "ready", and keeps them
// open until its standard input closes. Running the MTA side in another
// process keeps its memory out of the measurement (and its file
// descriptors out of this process's limit).
func idleClient(addr string) int {
	n, _ := strconv.Atoi(os.Getenv(idleClientNEnv))
	conns := make([]*miltest.MTA, 0, n)
	for range n {
		m, err := miltest.Dial("tcp", addr)
		if err == nil {
			err = m.Negotiate(6, wire.AllActions, wire.AllProtocol)
		}
		if err == nil {
			_, err = m.Verdict(&wire.Connect{Host: "client.example", Family: wire.FamilyInet, Port: 4321, Addr: "192.0.2.1"})
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "idle client:", err)
			return 1
		}
		conns = append(conns, m)
	}
	fmt.Println("ready")
	bufio.NewReader(os.Stdin).ReadString('\n')
	for _, m := range conns {
		m.Close()
	}
	return 0
}

// memUsed returns the live heap plus the goroutine stacks in use, after
// a GC (which also shrinks idle goroutines' stacks), and the process's
// resident set size.
func memUsed(t *testing.T) (goBytes, rss uint64) {
	runtime.GC()
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	status, err := os.ReadFile("/proc/self/status")
	if err == nil {
		for _, line := range strings.Split(string(status), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
				kb, _ := strconv.ParseUint(f[1], 10, 64)
				rss = kb * 1024
			}
		}
	}
	return ms.HeapAlloc + ms.StackInuse, rss
}

// TestIdleSessionMemory opens 10,000 idle sessions (after OPTNEG and
// CONNECT, as an SMTP session waiting for its client) and measures what
// each costs the server: live heap plus goroutine stack, the figure the
// design targets at <= 16 KiB, and RSS, reported only (it includes heap
// the runtime keeps for reuse). Under the race detector, whose shadow
// memory inflates everything, it runs 1,000 sessions and only reports.
func TestIdleSessionMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("opens 10,000 sessions")
	}
	n := 10000
	if raceEnabled {
		n = 1000
	}
	h := &minimal{}
	s, addr := start(t, Options{Handler: h, MaxSessions: n})
	goBefore, rssBefore := memUsed(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), idleClientEnv+"="+addr, idleClientNEnv+"="+strconv.Itoa(n))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	must(t, err)
	stdout, err := cmd.StdoutPipe()
	must(t, err)
	must(t, cmd.Start())
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "ready\n" {
		stdin.Close()
		cmd.Wait()
		t.Fatalf("idle client: %q %v", line, err)
	}
	eventually(t, func() bool { return s.Sessions() == n }, "%d sessions", n)
	goAfter, rssAfter := memUsed(t)
	perGo := float64(int64(goAfter)-int64(goBefore)) / float64(n)
	perRSS := float64(int64(rssAfter)-int64(rssBefore)) / float64(n)
	t.Logf("%d idle sessions: %.0f bytes each (Go heap + stacks), %.0f bytes each (RSS); %d goroutines",
		n, perGo, perRSS, runtime.NumGoroutine())
	stdin.Close()
	must(t, cmd.Wait())
	eventually(t, func() bool { return h.closes.Load() == int64(n) }, "%d sessions closed", n)
	if !raceEnabled && perGo > 16<<10 {
		t.Errorf("an idle session costs %.0f bytes, target <= 16 KiB", perGo)
	}
}
