package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"sluice/bench/internal/fakeserver"
	"sluice/bench/internal/rounds"
	"sluice/internal/testutil/wait"
)

// fakeSMTP is a minimal SMTP server: greeting, EHLO, MAIL, RCPT, DATA
// and QUIT, with the greeting's and RCPT's codes chosen, and the client
// addresses it saw.
type fakeSMTP struct {
	greet, rcpt   int
	dropAfterEHLO chan struct{} // if not nil: after EHLO, wait for it to close, then hang up

	srv  *fakeserver.Server
	mu   sync.Mutex
	from map[string]int // client IP -> sessions
	msgs int
}

func startSMTP(t *testing.T, greet, rcpt int, drop chan struct{}) *fakeSMTP {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeSMTP{greet: greet, rcpt: rcpt, dropAfterEHLO: drop, from: map[string]int{}}
	f.srv = fakeserver.Start(t, ln, f.handle)
	return f
}

func (f *fakeSMTP) handle(c net.Conn) {
	ip := c.RemoteAddr().(*net.TCPAddr).IP.String()
	f.mu.Lock()
	f.from[ip]++
	f.mu.Unlock()
	fmt.Fprintf(c, "%d fake ESMTP\r\n", f.greet)
	if f.greet != 220 {
		return
	}
	r := bufio.NewReader(c)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		verb := strings.ToUpper(strings.Fields(line + " x")[0])
		switch verb {
		case "EHLO":
			io.WriteString(c, "250-fake\r\n250 PIPELINING\r\n")
			if f.dropAfterEHLO != nil {
				<-f.dropAfterEHLO
				io.WriteString(c, "421 4.4.2 timeout\r\n")
				return
			}
		case "RCPT":
			fmt.Fprintf(c, "%d rcpt\r\n", f.rcpt)
		case "DATA":
			io.WriteString(c, "354 go\r\n")
			for {
				l, err := r.ReadString('\n')
				if err != nil {
					return
				}
				if l == ".\r\n" {
					break
				}
			}
			f.mu.Lock()
			f.msgs++
			f.mu.Unlock()
			io.WriteString(c, "250 queued\r\n")
		case "QUIT":
			io.WriteString(c, "221 bye\r\n")
			return
		default:
			io.WriteString(c, "250 ok\r\n")
		}
	}
}

func (f *fakeSMTP) seen(ip string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.from[ip]
}

// TestSend: a message is sent whole from the chosen address; a refusal
// at the greeting or at RCPT is an error.
func TestSend(t *testing.T) {
	ok := startSMTP(t, 220, 250, nil)
	src := net.IPv4(127, 0, 1, 3)
	if _, err := send(context.Background(), src, ok.srv.Addr(), 10*time.Second); err != nil {
		t.Fatalf("send: %v", err)
	}
	ok.mu.Lock()
	msgs := ok.msgs
	ok.mu.Unlock()
	if ok.seen("127.0.1.3") != 1 || msgs != 1 {
		t.Errorf("sessions from 127.0.1.3: %d, messages %d; want 1, 1", ok.seen("127.0.1.3"), msgs)
	}
	for _, tc := range []struct{ greet, rcpt int }{{421, 250}, {554, 250}, {220, 450}, {220, 550}} {
		f := startSMTP(t, tc.greet, tc.rcpt, nil)
		if _, err := send(context.Background(), src, f.srv.Addr(), 10*time.Second); !errors.Is(err, errReply) {
			t.Errorf("greeting %d, RCPT %d: err %v, want errReply", tc.greet, tc.rcpt, err)
		}
	}
}

// TestSendTimeout: a server that never greets fails the message at its
// timeout.
func TestSendTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	quiet := make(chan struct{})
	srv := fakeserver.Start(t, ln, func(net.Conn) { <-quiet })
	defer close(quiet)
	if _, err := send(context.Background(), net.IPv4(127, 0, 1, 1), srv.Addr(), 50*time.Millisecond); err == nil {
		t.Fatal("send to a silent server succeeded")
	}
}

// TestBotHoldsAndReconnects: a bot holds its session after EHLO, counts
// the server's drop, and reconnects; a refusing server counts refusals.
func TestBotHoldsAndReconnects(t *testing.T) {
	drop := make(chan struct{})
	f := startSMTP(t, 220, 250, drop)
	rf := roundFlags{addr: f.srv.Addr(), botRetry: time.Millisecond}
	var st botStats
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); rf.bot(ctx, botAddr(7, 5), &st) }()
	wait.For(t, func() bool { return st.held.Load() == 1 }, "the bot to hold a session")
	close(drop)
	wait.For(t, func() bool { return st.dropped.Load() >= 1 && st.connects.Load() >= 2 }, "a drop and a reconnect")
	cancel()
	<-done
	if st.held.Load() != 0 {
		t.Errorf("held %d after the bot stopped", st.held.Load())
	}
	if n := f.seen(botAddr(7, 5).String()); n < 2 {
		t.Errorf("sessions from the bot's address: %d", n)
	}

	refusing := startSMTP(t, 421, 250, nil)
	rf.addr = refusing.srv.Addr()
	var rs botStats
	ctx, cancel = context.WithCancel(context.Background())
	done = make(chan struct{})
	go func() { defer close(done); rf.bot(ctx, botAddr(8, 5), &rs) }()
	wait.For(t, func() bool { return rs.refused.Load() >= 2 }, "two refusals")
	cancel()
	<-done
	if rs.held.Load() != 0 || rs.dropped.Load() != 0 {
		t.Errorf("refused bot: held %d dropped %d", rs.held.Load(), rs.dropped.Load())
	}
}

// TestAddresses: the three groups' addresses do not overlap; bots are
// five to a /24, singles one to a /24, known peers in 127.0.1.0/24.
func TestAddresses(t *testing.T) {
	net24 := func(ip net.IP) string { return ip.Mask(net.CIDRMask(24, 32)).String() }
	seen := map[string]string{}
	nets := map[string]map[string]bool{"bot": {}, "single": {}, "known": {}}
	add := func(group string, ip net.IP) {
		if g, ok := seen[ip.String()]; ok {
			t.Fatalf("%s address %s is also a %s's", group, ip, g)
		}
		seen[ip.String()] = group
		nets[group][net24(ip)] = true
	}
	for i := range 200 {
		add("bot", botAddr(i, 5))
	}
	for k := range 500 {
		add("single", singleAddr(k))
	}
	for i := range 4 {
		add("known", knownAddr(i))
	}
	if len(nets["bot"]) != 40 || len(nets["single"]) != 500 || len(nets["known"]) != 1 {
		t.Errorf("/24s: bots %d, singles %d, known %d; want 40, 500, 1", len(nets["bot"]), len(nets["single"]), len(nets["known"]))
	}
	for n := range nets["bot"] {
		if nets["single"][n] || nets["known"][n] {
			t.Errorf("bot network %s shared", n)
		}
	}
	if !net.ParseIP("127.0.1.0").Equal(knownAddr(0).Mask(net.CIDRMask(24, 32))) {
		t.Errorf("known peers' network %s", net24(knownAddr(0)))
	}
	for i := range 256 * 5 {
		if ip := botAddr(i, 5); !(&net.IPNet{IP: net.IPv4(127, 20, 0, 0), Mask: net.CIDRMask(16, 32)}).Contains(ip) {
			t.Fatalf("bot %d at %s, outside 127.20.0.0/16 (the cost runs' refused network)", i, ip)
		}
	}
}

// TestResultLine: the line's fields, as flood.sh reads them.
func TestResultLine(t *testing.T) {
	r := result{label: "xla-static", base: 10 * time.Second, flood: 40 * time.Second,
		baseOK: 200, floodOK: 400, floodLate: 2, floodFail: 3, floodP99: 1500 * time.Millisecond,
		singleOK: 30, singleN: 40, held: []float64{30, 29, 30, 31}, bots: 200}
	line := r.line()
	for name, want := range map[string]string{
		"row": "xla-static", "base_mps": "20.00", "flood_mps": "10.00", "goodput": "0.500",
		"p99_ms": "1500.0", "late": "2", "fails": "3", "single_rate": "0.750", "singles": "40",
		"held_median": "30", "held_max": "31", "bots": "200",
	} {
		if got, _ := rounds.Field(line, name); got != want {
			t.Errorf("%s = %q, want %q in %s", name, got, want, line)
		}
	}
	empty := result{label: "x", base: time.Second, flood: time.Second}.line()
	for name, want := range map[string]string{"goodput": "0.000", "single_rate": "1.000", "held_median": "0"} {
		if got, _ := rounds.Field(empty, name); got != want {
			t.Errorf("no messages: %s = %q, want %q", name, got, want)
		}
	}
}

// TestFlags: bad settings are refused with exit status 2, -h lists them.
func TestFlags(t *testing.T) {
	for _, args := range [][]string{
		{}, {"nope"}, {"round"}, {"round", "-addr", "x:1", "-known", "0"}, {"round", "-addr", "x:1", "-bots", "-1"},
		{"round", "-addr", "x:1", "-duration", "0s"}, {"round", "-addr", "x:1", "-bots", "100000", "-bots-per-net", "1"},
		{"round", "-addr", "x:1", "extra"}, {"round", "-addr", "x:1", "-timeout", "0s"},
		{"cost", "-addr", "x:1"}, {"cost", "-addr", "x:1", "-sid", "1", "-expect", "maybe"},
		{"cost", "-addr", "x:1", "-sid", "1", "-c", "0"}, {"postfix", "-dir", "/tmp/x"},
		{"postfix", "-dir", "/tmp/x", "-port", "1", "-set", "novalue"},
	} {
		var out, errb bytes.Buffer
		if code := realMain(args, nil, &out, &errb); code != 2 {
			t.Errorf("%q: exit %d, want 2 (%s)", args, code, errb.String())
		}
	}
	for _, sub := range []string{"round", "cost", "postfix"} {
		var out, errb bytes.Buffer
		if code := realMain([]string{sub, "-h"}, nil, &out, &errb); code != 0 || !strings.Contains(errb.String(), "-addr") && !strings.Contains(errb.String(), "-dir") {
			t.Errorf("%s -h: exit %d, %s", sub, code, errb.String())
		}
	}
	var rf roundFlags
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	rf.register(fs)
	if err := fs.Parse([]string{"-addr", "127.0.0.1:25"}); err != nil || rf.check() != nil {
		t.Errorf("the defaults are refused: %v %v", err, rf.check())
	}
}

// TestSocketmap: the map answers "OK reject" inside the networks and
// "NOTFOUND " outside, over sluice's socket map server; bad networks are
// refused.
func TestSocketmap(t *testing.T) {
	for _, bad := range []string{"", "127.20.0.0", "127.20.0.0/33", "x/8", "127.20.0.0/16,"} {
		if _, err := parseNets(bad); err == nil {
			t.Errorf("parseNets(%q) accepted", bad)
		}
	}
	nets, err := parseNets("127.20.0.0/16, 10.0.0.0/8")
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{
		"127.20.3.4": "OK reject", "10.1.2.3": "OK reject", "127.21.0.1": "NOTFOUND ", "junk": "NOTFOUND ", "": "NOTFOUND ",
	} {
		if got := mapAnswer(nets, key); got != want {
			t.Errorf("mapAnswer(%q) = %q, want %q", key, got, want)
		}
	}

	path := t.TempDir() + "/map.sock"
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var out syncBuffer
	done := make(chan error, 1)
	go func() { done <- runSocketmap(path, "127.20.0.0/16", r, &out) }()
	wait.For(t, func() bool { return strings.Contains(out.String(), "ready") }, "the map server's ready line")
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	for key, want := range map[string]string{"127.20.9.9": "9:OK reject,", "127.0.1.1": "9:NOTFOUND ,"} {
		q := "flood " + key
		fmt.Fprintf(c, "%d:%s,", len(q), q)
		got := make([]byte, len(want))
		if _, err := io.ReadFull(br, got); err != nil || string(got) != want {
			t.Errorf("lookup %s: %q, %v; want %q", key, got, err, want)
		}
	}
	w.Close() // the liveness pipe's end stops the server
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// syncBuffer is a bytes.Buffer safe for one writer and one reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
