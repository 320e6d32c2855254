package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"time"

	"sluice/bench/internal/fakeserver"
	"sluice/bench/internal/loadgen"
)

// fakePolicy is a minimal policy server. It counts messages per sender at
// END-OF-MESSAGE (or recipients at RCPT with countRCPT), answers DUNNO
// until a sender has used limit, then DEFER_IF_PERMIT; with reply set it
// answers every request with that text instead. It also checks the shape
// of the requests it gets.
type fakePolicy struct {
	limit     int
	countRCPT bool
	reply     string // if not empty, sent verbatim as every reply
	// closeAfter, if not 0, closes each connection after that many
	// replies; split writes each reply a byte at a time; hang answers
	// the first request of each connection and no other.
	closeAfter int
	split      bool
	hang       bool

	srv *fakeserver.Server
	mu  sync.Mutex

	// Guarded by mu.
	counts    map[string]int
	reqs      int
	bytes     int
	rcpt      int
	eom       int
	problems  []string
	instances map[string]bool // instances whose END-OF-MESSAGE was seen
	ports     map[string]bool // client ports seen
}

func startFake(t *testing.T, f *fakePolicy) *fakePolicy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.counts = map[string]int{}
	f.instances = map[string]bool{}
	f.ports = map[string]bool{}
	f.srv = fakeserver.Start(t, ln, f.handle)
	return f
}

func (f *fakePolicy) addr() string { return f.srv.Addr() }

// wantAttrs is Postfix 3.7's attribute list as policyload sends it.
var wantAttrs = strings.Fields(`request protocol_state protocol_name client_address client_name
	client_port reverse_client_name server_address server_port helo_name sender recipient
	recipient_count queue_id instance size etrn_domain stress sasl_method sasl_username
	sasl_sender ccert_subject ccert_issuer ccert_fingerprint ccert_pubkey_fingerprint
	encryption_protocol encryption_cipher encryption_keysize policy_context
	compatibility_level mail_version`)

func (f *fakePolicy) handle(c net.Conn) {
	r := bufio.NewReader(c)
	// Per connection: the current message's instance and its RCPT count.
	var instance string
	var rcpts int
	for served := 0; f.closeAfter == 0 || served < f.closeAfter; served++ {
		attrs := map[string]string{}
		var names []string
		size := 0
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			size += len(line)
			if line == "\n" {
				break
			}
			name, value, ok := strings.Cut(strings.TrimSuffix(line, "\n"), "=")
			if !ok {
				return
			}
			attrs[name] = value
			names = append(names, name)
		}
		var reply string
		f.mu.Lock()
		f.reqs++
		f.bytes += size
		problem := func(format string, args ...any) {
			if len(f.problems) < 10 {
				f.problems = append(f.problems, fmt.Sprintf(format, args...))
			}
		}
		if strings.Join(names, " ") != strings.Join(wantAttrs, " ") {
			problem("attributes %q", names)
		}
		state := attrs["protocol_state"]
		if attrs["instance"] == "" || attrs["sender"] == "" || attrs["client_address"] == "" {
			problem("empty instance, sender or client_address: %v", attrs)
		}
		switch state {
		case "RCPT":
			f.rcpt++
			if attrs["instance"] != instance {
				if rcpts != 0 {
					problem("new instance %s before END-OF-MESSAGE of %s", attrs["instance"], instance)
				}
				if f.instances[attrs["instance"]] {
					problem("instance %s reused", attrs["instance"])
				}
				instance, rcpts = attrs["instance"], 0
				f.ports[attrs["client_port"]] = true
			}
			rcpts++
			if attrs["recipient"] == "" || attrs["recipient_count"] != "0" {
				problem("RCPT with recipient=%q recipient_count=%q", attrs["recipient"], attrs["recipient_count"])
			}
			if (rcpts == 1) != (attrs["queue_id"] == "") {
				problem("RCPT %d of a message with queue_id=%q", rcpts, attrs["queue_id"])
			}
			if f.countRCPT {
				reply = f.count(attrs["sender"])
			} else {
				reply = "action=DUNNO\n\n"
			}
		case "END-OF-MESSAGE":
			f.eom++
			n, _ := strconv.Atoi(attrs["recipient_count"])
			if attrs["instance"] != instance || n != rcpts || n < 1 || n > 3 {
				problem("END-OF-MESSAGE instance=%s recipient_count=%d after %d RCPTs of %s", attrs["instance"], n, rcpts, instance)
			}
			if (n == 1) != (attrs["recipient"] != "") {
				problem("END-OF-MESSAGE with %d recipients and recipient=%q", n, attrs["recipient"])
			}
			if attrs["queue_id"] == "" || attrs["size"] == "0" {
				problem("END-OF-MESSAGE without queue_id or size: %v", attrs)
			}
			f.instances[instance] = true
			rcpts = 0
			if f.countRCPT {
				reply = "action=DUNNO\n\n"
			} else {
				reply = f.count(attrs["sender"])
			}
		default:
			problem("protocol_state=%q", state)
			reply = "action=DUNNO\n\n"
		}
		if f.reply != "" {
			reply = f.reply
		}
		f.mu.Unlock()
		if f.hang && served > 0 {
			continue
		}
		if err := f.write(c, reply); err != nil {
			return
		}
	}
}

// write sends reply as the fake is set to.
func (f *fakePolicy) write(c net.Conn, reply string) error {
	if f.split {
		for i := range len(reply) {
			if _, err := io.WriteString(c, reply[i:i+1]); err != nil {
				return err
			}
			time.Sleep(50 * time.Microsecond)
		}
		return nil
	}
	_, err := io.WriteString(c, reply)
	return err
}

// count counts one event for sender; f.mu is held.
func (f *fakePolicy) count(sender string) string {
	if f.counts[sender] >= f.limit {
		return fmt.Sprintf("action=DEFER_IF_PERMIT too much mail from %s\nextra=ignored\n\n", sender)
	}
	f.counts[sender]++
	return "action=dunno\n\n" // lower case, as policyd-rate-limit answers
}

func testConfig(addr string) config {
	return config{
		Flags:       loadgen.Flags{Conns: 4, Duration: 300 * time.Millisecond, Warmup: 50 * time.Millisecond, Label: "fake"},
		addr:        addr,
		clients:     1000,
		senders:     1000,
		seed:        1,
		probeSender: "probe@probe.example",
	}
}

func TestRunAgainstFake(t *testing.T) {
	// Three senders with a limit of 20 messages each: most messages are
	// deferred, so the tally must show both actions.
	f := startFake(t, &fakePolicy{limit: 20})
	cfg := testConfig(f.addr())
	cfg.senders = 3
	res := run(cfg, &testLog{t})
	t.Logf("%v", res)
	if res.Reqs == 0 {
		t.Fatalf("reqs = 0, want > 0")
	}
	if res.Errors != 0 {
		t.Errorf("errors = %d, want 0", res.Errors)
	}
	if res.P50us <= 0 || res.P99us < res.P50us || res.P999us < res.P99us {
		t.Errorf("implausible percentiles p50=%v p99=%v p999=%v", res.P50us, res.P99us, res.P999us)
	}
	var sum uint64
	for _, n := range res.Actions {
		sum += n
	}
	if sum != res.Reqs {
		t.Errorf("actions %v add up to %d, want reqs=%d", res.Actions, sum, res.Reqs)
	}
	if res.Actions["DUNNO"] == 0 || res.Actions["DEFER_IF_PERMIT"] == 0 || len(res.Actions) != 2 {
		t.Errorf("actions = %v, want DUNNO and DEFER_IF_PERMIT", res.Actions)
	}

	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range f.problems {
		t.Errorf("request problem: %s", p)
	}
	if uint64(f.reqs) < res.Reqs {
		t.Errorf("server saw %d requests, client measured %d", f.reqs, res.Reqs)
	}
	// One to three RCPTs per END-OF-MESSAGE: about two on average.
	if ratio := float64(f.rcpt) / float64(f.eom); ratio < 1.7 || ratio > 2.3 {
		t.Errorf("RCPT/END-OF-MESSAGE = %d/%d = %.2f, want about 2", f.rcpt, f.eom, ratio)
	}
	if avg := f.bytes / f.reqs; avg < 850 || avg > 950 {
		t.Errorf("average request size %d bytes, want about 900", avg)
	}
	// A new client port per session, and sessions of one to three messages.
	if len(f.ports) < f.eom/4 {
		t.Errorf("%d client ports for %d messages, want a new one per session", len(f.ports), f.eom)
	}
	for s, n := range f.counts {
		if n != 20 {
			t.Errorf("sender %s counted %d times, want the limit 20", s, n)
		}
	}
}

func TestMalformedReplyIsAnError(t *testing.T) {
	for _, reply := range []string{
		"result=DUNNO\n\n",                // no action
		"action=\n\n",                     // empty action
		"[LOG info]: x\naction=DUNNO\n\n", // a line without "="
	} {
		f := startFake(t, &fakePolicy{limit: 1000, reply: reply})
		res := run(testConfig(f.addr()), io.Discard)
		if res.Errors == 0 {
			t.Errorf("reply %q: errors = 0, want > 0", reply)
		}
		if res.Reqs != 0 || len(res.Actions) != 0 {
			t.Errorf("reply %q: reqs = %d, actions = %v; want none", reply, res.Reqs, res.Actions)
		}
	}
}

// TestBrokenConnectionsReconnect: a server that closes every connection
// after a few replies costs an error each time, the connection is made
// again and the load goes on; replies that come a byte at a time are
// whole replies, not errors.
func TestBrokenConnectionsReconnect(t *testing.T) {
	f := startFake(t, &fakePolicy{limit: 1 << 30, closeAfter: 5})
	res := run(testConfig(f.addr()), io.Discard)
	if res.Errors == 0 || res.Reqs < 4*res.Errors {
		t.Errorf("errors = %d, reqs = %d; want an error per 5 requests and the load going on", res.Errors, res.Reqs)
	}
	f.mu.Lock()
	for _, p := range f.problems {
		t.Errorf("request problem: %s", p)
	}
	f.mu.Unlock()

	s := startFake(t, &fakePolicy{limit: 1 << 30, split: true})
	res = run(testConfig(s.addr()), &testLog{t})
	if res.Errors != 0 || res.Reqs == 0 || res.Actions["DUNNO"] != res.Reqs {
		t.Errorf("replies in pieces: %v; want no errors and every reply DUNNO", res)
	}
}

// TestHungServerTimesOut: requests a server never answers fail once the
// window and its grace are over, and the run ends.
func TestHungServerTimesOut(t *testing.T) {
	f := startFake(t, &fakePolicy{limit: 1 << 30, hang: true})
	cfg := testConfig(f.addr())
	cfg.grace = 100 * time.Millisecond
	cfg.Conns = 2
	begin := time.Now()
	res := run(cfg, io.Discard)
	if res.Errors != 2 || res.Reqs != 0 {
		t.Errorf("errors = %d, reqs = %d; want the 2 hung requests failed, none measured", res.Errors, res.Reqs)
	}
	if took := time.Since(begin); took > 10*time.Second {
		t.Errorf("the run took %v", took)
	}
}

// TestWaitPastDeadline: a wait whose deadline is already past returns at
// once (a negative epoll_wait timeout would wait for ever).
func TestWaitPastDeadline(t *testing.T) {
	cfg := testConfig("127.0.0.1:9")
	e, err := newEngine(&cfg, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer e.close()
	done := make(chan error, 1)
	go func() {
		_, err := e.wait(time.Now().Add(-50 * time.Millisecond))
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a wait past its deadline did not return")
	}
}

func TestDialFailureIsAnError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	cfg := testConfig(addr)
	cfg.Duration = 50 * time.Millisecond
	cfg.Warmup = 0
	res := run(cfg, io.Discard)
	if res.Errors == 0 || res.Reqs != 0 {
		t.Errorf("errors = %d, reqs = %d; want errors and no requests", res.Errors, res.Reqs)
	}
}

func TestProbe(t *testing.T) {
	for _, tc := range []struct {
		name      string
		countRCPT bool
		limit     int
		want      probeResult
	}{
		{"eom", false, 1000, probeResult{Probe: 1001, Admitted: 1000, Refused: 1, FirstRefused: 1001, RefusedEOM: 1}},
		{"rcpt", true, 1000, probeResult{Probe: 1001, Admitted: 1000, Refused: 1, FirstRefused: 1001, RefusedRCPT: 1}},
		{"no-limit", false, 1 << 30, probeResult{Probe: 1001, Admitted: 1001}},
		{"low-limit", false, 10, probeResult{Probe: 1001, Admitted: 10, Refused: 991, FirstRefused: 11, RefusedEOM: 991}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := startFake(t, &fakePolicy{limit: tc.limit, countRCPT: tc.countRCPT})
			cfg := testConfig(f.addr())
			cfg.probe = 1001
			got := runProbe(cfg, &testLog{t})
			tc.want.Target = "fake"
			if tc.want.Refused > 0 {
				tc.want.FirstAction = "DEFER_IF_PERMIT too much mail from probe@probe.example"
			}
			if got != tc.want {
				t.Errorf("probe = %+v\nwant    %+v", got, tc.want)
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			for _, p := range f.problems {
				t.Errorf("request problem: %s", p)
			}
			if len(f.counts) != 1 {
				t.Errorf("probe used senders %v, want only the probe sender", f.counts)
			}
		})
	}
}

func TestMainOutputAndExitStatus(t *testing.T) {
	good := startFake(t, &fakePolicy{limit: 1 << 30})
	bad := startFake(t, &fakePolicy{limit: 1 << 30, reply: "nothing=here\n\n"})
	for _, tc := range []struct {
		name   string
		args   []string
		status int
		prefix string
		suffix string
	}{
		{"good", []string{"-addr", good.addr()}, 0, "target=x c=2 reqs=", " errors=0 actions=DUNNO:"},
		{"good-json", []string{"-addr", good.addr(), "-json"}, 0, `{"target":"x","c":2,"reqs":`, `"errors":0,"actions":{"DUNNO":`},
		{"bad", []string{"-addr", bad.addr()}, 1, "target=x c=2 reqs=0 ", " actions=-"},
		{"probe", []string{"-addr", good.addr(), "-probe", "5"}, 0, "target=x probe=5 admitted=5 refused=0 ", ` first_action=""`},
		{"probe-bad", []string{"-addr", bad.addr(), "-probe", "5"}, 1, "target=x probe=5 admitted=0 ", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			args := append([]string{"-c", "2", "-duration", "100ms", "-warmup", "0s", "-label", "x"}, tc.args...)
			st := realMain(args, &out, &errb)
			if st != tc.status {
				t.Errorf("exit status %d, want %d; stderr: %s", st, tc.status, errb.String())
			}
			s := out.String()
			if !strings.HasPrefix(s, tc.prefix) || strings.Count(s, "\n") != 1 || !strings.Contains(s, tc.suffix) {
				t.Errorf("output %q, want one line starting %q containing %q", s, tc.prefix, tc.suffix)
			}
			if strings.HasPrefix(s, "{") {
				var v map[string]any
				if err := json.Unmarshal([]byte(s), &v); err != nil {
					t.Errorf("bad JSON: %v", err)
				}
			}
		})
	}
	var out, errb bytes.Buffer
	if st := realMain(nil, &out, &errb); st != 2 {
		t.Errorf("without -addr: exit status %d, want 2", st)
	}
}

func TestReadReply(t *testing.T) {
	for _, tc := range []struct {
		reply string
		want  string // the action; "" for an error
	}{
		{"action=DUNNO\n\n", "DUNNO"},
		{"action=DEFER_IF_PERMIT too much mail\n\n", "DEFER_IF_PERMIT too much mail"},
		{"foo=bar\naction=OK\nbaz=\n\n", "OK"},
		{"action=450 4.7.1 slow down\naction=DUNNO\n\n", "450 4.7.1 slow down"},
		{"foo=bar\n\n", ""},
		{"action=\n\n", ""},
		{"action= \n\n", ""},
		{"DUNNO\n\n", ""},
		{"=DUNNO\n\n", ""},
		{"action=DUNNO\n", ""},
		{"action=DUNNO", ""},
		{"action=" + strings.Repeat("x", 5000) + "\n\n", ""},
	} {
		c := &conn{rd: iotest.OneByteReader(strings.NewReader(tc.reply))}
		act, err := c.readReply()
		if tc.want == "" {
			if err == nil {
				t.Errorf("reply %.40q: action %q, want an error", tc.reply, act)
			}
		} else if err != nil || string(act) != tc.want {
			t.Errorf("reply %.40q: action %q, err %v; want %q", tc.reply, act, err, tc.want)
		}
	}
}

func TestFirstWordAndRefusal(t *testing.T) {
	for _, tc := range []struct {
		action, word string
		refusal      bool
	}{
		{"DUNNO", "DUNNO", false},
		{"dunno", "DUNNO", false},
		{"OK", "OK", false},
		{"defer_if_permit Rate limit reach, retry later", "DEFER_IF_PERMIT", true},
		{"DEFER_IF_REJECT x", "DEFER_IF_REJECT", true},
		{"REJECT", "REJECT", true},
		{"DEFER try later", "DEFER", true},
		{"450 4.7.1 too much mail", "450", true},
		{"554 5.7.1 no", "554", true},
		{"250", "250", false},
		{"PREPEND X-Rate: 3", "PREPEND", false},
		{"  WARN x", "WARN", false},
	} {
		w := firstWord(nil, []byte(tc.action))
		if string(w) != tc.word || isRefusal(w) != tc.refusal {
			t.Errorf("%q: word %q refusal %v, want %q %v", tc.action, w, isRefusal(w), tc.word, tc.refusal)
		}
	}
}

func TestHotPathDoesNotAllocate(t *testing.T) {
	p := buildParts(1000, 1000, "probe@probe.example")
	m := message{client: 999, port: 65535, sender: 999, rcpts: [3]int{1, 2, 3}, n: 3, size: 99999, seq: 1 << 40}
	buf := make([]byte, 0, 2048)
	prefix := []byte("12345678.1003f.")
	var tl tally
	tl.add([]byte("DUNNO"))
	word := make([]byte, 0, 64)
	st := stream{parts: p, clients: 1000, senders: 1000, rng: rand.New(rand.NewPCG(1, 2)), prefix: prefix, idx: 63}
	var rb replyBuf
	allocs := testing.AllocsPerRun(100, func() {
		buf = p.appendRequest(buf[:0], &m, false, 2, prefix, 63)
		buf = p.appendRequest(buf[:0], &m, true, 0, prefix, 63)
		buf = st.appendNext(buf[:0])
		st.answered()
		rb.n += copy(rb.space(), "action=dunno\n\n")
		act, ok, err := rb.next()
		if !ok || err != nil {
			t.Fatalf("reply: %q %v %v", act, ok, err)
		}
		word = firstWord(word, act)
		tl.add(word)
	})
	if allocs != 0 {
		t.Errorf("%v allocations per request, want 0", allocs)
	}
	if len(buf) > 1000 {
		t.Errorf("longest request is %d bytes, want under 1000", len(buf))
	}
}

// TestReplyBuf: replies that come together are taken one by one, a reply
// cut short waits for its end, and one longer than the buffer is an error.
func TestReplyBuf(t *testing.T) {
	var rb replyBuf
	rb.n += copy(rb.space(), "action=OK\n\naction=DUNNO\nx=1\n\naction=REJ")
	for _, want := range []string{"OK", "DUNNO"} {
		if act, ok, err := rb.next(); !ok || err != nil || string(act) != want {
			t.Fatalf("next = %q, %v, %v; want %q", act, ok, err, want)
		}
	}
	if act, ok, err := rb.next(); ok || err != nil {
		t.Fatalf("with half a reply: next = %q, %v, %v; want to wait", act, ok, err)
	}
	rb.n += copy(rb.space(), "ECT\n\n")
	if act, ok, err := rb.next(); !ok || err != nil || string(act) != "REJECT" {
		t.Fatalf("next = %q, %v, %v; want REJECT", act, ok, err)
	}
	rb.reset()
	rb.n += copy(rb.space(), "action="+strings.Repeat("x", replyMax))
	if _, _, err := rb.next(); err == nil || len(rb.space()) != 0 {
		t.Errorf("a full buffer without a whole reply: err %v, space %d; want an error", err, len(rb.space()))
	}
}

// testLog sends the generator's error descriptions to the test log.
type testLog struct{ t *testing.T }

func (l *testLog) Write(p []byte) (int, error) {
	l.t.Logf("%s", bytes.TrimSuffix(p, []byte("\n")))
	return len(p), nil
}
