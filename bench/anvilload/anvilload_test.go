package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"sluice/bench/internal/fakeserver"

	"sluice/bench/internal/loadgen"
)

// fakeAnvil is a minimal anvil server: it announces itself and answers
// connect, message, recipient and disconnect as Postfix's anvil does (count
// and rates without a time window).
type fakeAnvil struct {
	announce string          // sent on accept
	badReply map[string]bool // request names answered with status=-1

	srv   *fakeserver.Server
	mu    sync.Mutex
	count map[string]int
	rate  map[string]int
}

func startFake(t *testing.T, announce string, badReply ...string) *fakeAnvil {
	t.Helper()
	path := filepath.Join(t.TempDir(), "anvil")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeAnvil{
		announce: announce,
		badReply: map[string]bool{},
		count:    map[string]int{},
		rate:     map[string]int{},
	}
	for _, r := range badReply {
		f.badReply[r] = true
	}
	f.srv = fakeserver.Start(t, ln, f.handle)
	return f
}

func (f *fakeAnvil) socket() string { return f.srv.Addr() }

func (f *fakeAnvil) handle(c net.Conn) {
	r := bufio.NewReader(c)
	w := bufio.NewWriter(c)
	if _, err := io.WriteString(w, f.announce); err != nil || w.Flush() != nil {
		return
	}
	for {
		req, err1 := r.ReadString('\n')
		ident, err2 := r.ReadString('\n')
		end, err3 := r.ReadString('\n')
		if err1 != nil || err2 != nil || err3 != nil {
			return
		}
		name, ok1 := strings.CutPrefix(strings.TrimSuffix(req, "\n"), "request=")
		id, ok2 := strings.CutPrefix(strings.TrimSuffix(ident, "\n"), "ident=")
		if !ok1 || !ok2 || end != "\n" {
			return // Postfix's anvil drops a connection with a bad request.
		}
		f.mu.Lock()
		switch {
		case f.badReply[name]:
			fmt.Fprintf(w, "status=-1\n\n")
		case name == "connect":
			f.count[id]++
			f.rate[id]++
			fmt.Fprintf(w, "status=0\ncount=%d\nrate=%d\n\n", f.count[id], f.rate[id])
		case name == "message" || name == "recipient":
			f.rate[id+" "+name]++
			fmt.Fprintf(w, "status=0\nrate=%d\n\n", f.rate[id+" "+name])
		case name == "disconnect":
			f.count[id]--
			fmt.Fprintf(w, "status=0\n\n")
		default:
			fmt.Fprintf(w, "status=-1\n\n")
		}
		f.mu.Unlock()
		if w.Flush() != nil {
			return
		}
	}
}

func testConfig(socket string) config {
	return config{
		Flags:   loadgen.Flags{Conns: 4, Duration: 300 * time.Millisecond, Warmup: 50 * time.Millisecond, Label: "fake"},
		socket:  socket,
		clients: 1000,
		seed:    1,
	}
}

func TestRunAgainstFake(t *testing.T) {
	f := startFake(t, "protocol=anvil_protocol\n\n")
	res := run(testConfig(f.socket()), &testLog{t})
	t.Logf("%v", res)
	if res.Reqs == 0 {
		t.Errorf("reqs = 0, want > 0")
	}
	if res.Errors != 0 {
		t.Errorf("errors = %d, want 0", res.Errors)
	}
	if res.P50us <= 0 || res.P99us < res.P50us {
		t.Errorf("implausible percentiles p50=%v p99=%v", res.P50us, res.P99us)
	}
	// Every session ended with a disconnect or a dropped connection; after
	// the run no client should hold more than the 4 connections' worth.
	f.mu.Lock()
	defer f.mu.Unlock()
	for id, n := range f.count {
		if n < 0 || n > 4 {
			t.Errorf("count[%s] = %d after the run", id, n)
		}
	}
}

func TestWrongAnnouncement(t *testing.T) {
	f := startFake(t, "protocol=policy_protocol\n\n")
	res := run(testConfig(f.socket()), io.Discard)
	if res.Errors == 0 {
		t.Errorf("errors = 0, want > 0")
	}
	if res.Reqs != 0 {
		t.Errorf("reqs = %d, want 0", res.Reqs)
	}
}

func TestBadStatus(t *testing.T) {
	f := startFake(t, "protocol=anvil_protocol\n\n", "disconnect")
	res := run(testConfig(f.socket()), io.Discard)
	if res.Errors == 0 {
		t.Errorf("errors = 0, want > 0")
	}
}

func TestMainOutputAndExitStatus(t *testing.T) {
	good := startFake(t, "protocol=anvil_protocol\n\n")
	bad := startFake(t, "protocol=anvil_protocol\nextra=1\n\n")
	for _, tc := range []struct {
		name   string
		socket string
		json   bool
		status int
		prefix string
	}{
		{"good", good.socket(), false, 0, "target=x c=2 reqs="},
		{"good-json", good.socket(), true, 0, `{"target":"x","c":2,"reqs":`},
		{"bad", bad.socket(), false, 1, "target=x c=2 reqs=0 "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			args := []string{"-socket", tc.socket, "-c", "2", "-duration", "100ms", "-warmup", "0s", "-label", "x"}
			if tc.json {
				args = append(args, "-json")
			}
			st := realMain(args, &out, &errb)
			if st != tc.status {
				t.Errorf("exit status %d, want %d; stderr: %s", st, tc.status, errb.String())
			}
			if !strings.HasPrefix(out.String(), tc.prefix) || strings.Count(out.String(), "\n") != 1 {
				t.Errorf("output %q, want one line starting %q", out.String(), tc.prefix)
			}
		})
	}
	var out, errb bytes.Buffer
	if st := realMain(nil, &out, &errb); st != 2 {
		t.Errorf("without -socket: exit status %d, want 2", st)
	}
}

func TestReadReplyRejectsMalformed(t *testing.T) {
	for _, tc := range []struct {
		kind  int
		reply string
		ok    bool
	}{
		{reqConnect, "status=0\ncount=1\nrate=1\n\n", true},
		{reqConnect, "status=0\nrate=1\ncount=1\n\n", false},
		{reqConnect, "status=0\ncount=1\n\n", false},
		{reqConnect, "status=0\ncount=1\nrate=1\nextra=1\n\n", false},
		{reqMessage, "status=0\nrate=7\n\n", true},
		{reqMessage, "status=0\nrate=x\n\n", false},
		{reqMessage, "status=0\nrate=\n\n", false},
		{reqRecipient, "status=-1\nrate=1\n\n", false},
		{reqDisconnect, "status=0\n\n", true},
		{reqDisconnect, "status=0\n", false},
		{reqDisconnect, "status 0\n\n", false},
	} {
		w := &worker{r: bufio.NewReader(strings.NewReader(tc.reply))}
		err := w.readReply(tc.kind)
		if (err == nil) != tc.ok {
			t.Errorf("%s reply %q: err = %v, want ok=%v", kindNames[tc.kind], tc.reply, err, tc.ok)
		}
	}
}

// testLog sends the generator's error descriptions to the test log.
type testLog struct{ t *testing.T }

func (l *testLog) Write(p []byte) (int, error) {
	l.t.Logf("%s", bytes.TrimSuffix(p, []byte("\n")))
	return len(p), nil
}
