package milter

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"sluice/internal/milter/miltest"
	"sluice/internal/milter/wire"
)

func TestMain(m *testing.M) {
	if addr := os.Getenv(idleClientEnv); addr != "" {
		os.Exit(idleClient(addr))
	}
	goleak.VerifyTestMain(m)
}

// recorder is a Handler implementing every step; it records the events,
// counts Close per session and checks that a session's callbacks never
// overlap.
type recorder struct {
	mu      sync.Mutex
	events  []string
	closes  map[uint64]int
	running map[uint64]bool
	overlap int

	connect func(s *Session) Response // default Continue
	eom     func(s *Session, m *Modifier) Response
	body    Response
}

func newRecorder() *recorder {
	return &recorder{closes: map[uint64]int{}, running: map[uint64]bool{}}
}

func (r *recorder) enter(s *Session, format string, args ...any) func() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.running[s.ID()] {
		r.overlap++
	}
	r.running[s.ID()] = true
	r.events = append(r.events, fmt.Sprintf("%d ", s.ID())+fmt.Sprintf(format, args...))
	return func() {
		r.mu.Lock()
		r.running[s.ID()] = false
		r.mu.Unlock()
	}
}

func (r *recorder) Connect(s *Session, host string, f Family, port uint16, addr string) Response {
	defer r.enter(s, "connect %s %v %d %s", host, f, port, addr)()
	if r.connect != nil {
		return r.connect(s)
	}
	return Continue
}
func (r *recorder) Helo(s *Session, name string) Response {
	defer r.enter(s, "helo %s", name)()
	return Continue
}
func (r *recorder) MailFrom(s *Session, from string, args []string) Response {
	defer r.enter(s, "mail %s %v", from, args)()
	return Continue
}
func (r *recorder) RcptTo(s *Session, rcpt string, args []string) Response {
	defer r.enter(s, "rcpt %s %v", rcpt, args)()
	return Continue
}
func (r *recorder) Data(s *Session) Response { defer r.enter(s, "data")(); return Continue }
func (r *recorder) Header(s *Session, name, value string) Response {
	defer r.enter(s, "header %s=%q", name, value)()
	return Continue
}
func (r *recorder) EOH(s *Session) Response { defer r.enter(s, "eoh")(); return Continue }
func (r *recorder) Body(s *Session, chunk []byte) Response {
	defer r.enter(s, "body %q", chunk)()
	return r.body
}
func (r *recorder) EOM(s *Session, m *Modifier) Response {
	defer r.enter(s, "eom")()
	if r.eom != nil {
		return r.eom(s, m)
	}
	return Accept
}
func (r *recorder) Abort(s *Session) { defer r.enter(s, "abort")() }
func (r *recorder) Unknown(s *Session, line string) Response {
	defer r.enter(s, "unknown %s", line)()
	return Reject
}
func (r *recorder) Close(s *Session) {
	defer r.enter(s, "close")()
	r.mu.Lock()
	r.closes[s.ID()]++
	r.mu.Unlock()
}

func (r *recorder) log() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.events...)
}

// closed returns how many sessions were closed, and fails if one was
// closed twice or callbacks overlapped.
func (r *recorder) closed(t *testing.T) int {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, n := range r.closes {
		if n != 1 {
			t.Errorf("session %d closed %d times", id, n)
		}
	}
	if r.overlap != 0 {
		t.Errorf("%d overlapping callbacks within a session", r.overlap)
	}
	return len(r.closes)
}

// waitClosed waits until n sessions were closed.
func (r *recorder) waitClosed(t *testing.T, n int) {
	t.Helper()
	eventually(t, func() bool { return r.closed(t) >= n }, "%d sessions closed", n)
	if got := r.closed(t); got != n {
		t.Fatalf("%d sessions closed, want %d", got, n)
	}
}

// eventually polls cond for up to 10 s: a bound on a hang, not a timing
// threshold.
func eventually(t *testing.T, cond func() bool, format string, args ...any) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for "+format, args...)
		}
		time.Sleep(time.Millisecond)
	}
}

// minimal implements only the required methods.
type minimal struct{ closes atomic.Int64 }

func (*minimal) Connect(*Session, string, Family, uint16, string) Response { return Continue }
func (m *minimal) Close(*Session)                                          { m.closes.Add(1) }

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// start serves o on a loopback TCP port and closes the server at the
// end of the test.
func start(t testing.TB, o Options) (*Server, string) {
	t.Helper()
	if o.Logger == nil {
		o.Logger = quiet()
	}
	s := NewServer(o)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(l) }()
	t.Cleanup(func() {
		s.Close()
		if err := <-served; !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve returned %v", err)
		}
	})
	return s, l.Addr().String()
}

func dial(t testing.TB, addr string) *miltest.MTA {
	t.Helper()
	m, err := miltest.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func wantCode(t testing.TB, got wire.Code, err error, want wire.Code) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("reply %v, want %v", got, want)
	}
}

func connect(t testing.TB, m *miltest.MTA) {
	t.Helper()
	c, err := m.Verdict(&wire.Connect{Host: "client.example", Family: wire.FamilyInet, Port: 4321, Addr: "192.0.2.1"})
	wantCode(t, c, err, wire.RespContinue)
}

func TestNegotiateV6(t *testing.T) {
	rec := newRecorder()
	macros := []wire.MacroRequest{{Stage: wire.StageConnect, Names: "{client_addr} j"}}
	_, addr := start(t, Options{Handler: rec, Actions: wire.ActAddHeader | wire.ActQuarantine,
		Protocol: wire.ProtoHeaderLeadingSpace | wire.ProtoMDS1M, Macros: macros})
	m := dial(t, addr)
	must(t, m.Negotiate(6, wire.AllActions, wire.AllProtocol|wire.ProtoMDS256K|wire.ProtoMDS1M))
	want := wire.OptNeg{Version: 6, Actions: wire.ActAddHeader | wire.ActQuarantine | wire.ActSetSymList,
		Protocol: wire.ProtoSkip | wire.ProtoHeaderLeadingSpace, Macros: macros}
	if !reflect.DeepEqual(m.Neg, want) {
		t.Fatalf("negotiated %+v, want %+v", m.Neg, want)
	}
	// Without SETSYMLIST on offer, no macro request and no such action.
	m2 := dial(t, addr)
	must(t, m2.Negotiate(6, wire.ActAddHeader, wire.AllProtocol))
	if m2.Neg.Actions != wire.ActAddHeader || m2.Neg.Macros != nil {
		t.Fatalf("negotiated %+v", m2.Neg)
	}
	// A future version is answered with 6.
	m3 := dial(t, addr)
	must(t, m3.Negotiate(7, wire.AllActions, wire.AllProtocol))
	if m3.Neg.Version != 6 {
		t.Fatalf("version %d", m3.Neg.Version)
	}
}

// TestNegotiateStepsOff: the steps a handler does not implement are
// negotiated off, with no reply where the MTA cannot leave them out.
func TestNegotiateStepsOff(t *testing.T) {
	h := &minimal{}
	_, addr := start(t, Options{Handler: h})
	m := dial(t, addr)
	must(t, m.Negotiate(6, wire.AllActions, wire.AllProtocol))
	want := (wire.NoStepMask | wire.NoReplyMask) &^ (wire.ProtoNoConnect | wire.ProtoNRConnect)
	if m.Neg.Protocol != want || m.Neg.Actions != 0 {
		t.Fatalf("protocol %v actions %v, want %v", m.Neg.Protocol, m.Neg.Actions, want)
	}
	connect(t, m)
	// An MTA offering only NR_HDR: headers come, unanswered; the rest is
	// answered CONTINUE by the engine.
	m2 := dial(t, addr)
	must(t, m2.Negotiate(6, wire.AllActions, wire.ProtoNRHeader))
	if m2.Neg.Protocol != wire.ProtoNRHeader {
		t.Fatalf("protocol %v", m2.Neg.Protocol)
	}
	connect(t, m2)
	mods, final, err := m2.Message("<a@example.org>", "<b@example.net>", []string{"Subject", "x", "To", "y"}, "body\r\n")
	if err != nil || len(mods) != 0 || final.Code() != wire.RespContinue {
		t.Fatalf("message: %v %v %v", mods, final, err)
	}
	must(t, m2.Quit())
	eventually(t, func() bool { return h.closes.Load() == 2 || h.closes.Load() == 1 }, "close")
}

func TestNegotiateV2(t *testing.T) {
	rec := newRecorder()
	_, addr := start(t, Options{Handler: rec, Actions: wire.ActAddHeader | wire.ActChangeFrom})
	m := dial(t, addr)
	// Actions and protocol 0 mean the version-1 sets.
	must(t, m.Negotiate(2, 0, 0))
	if m.Neg.Version != 2 || m.Neg.Actions != wire.ActAddHeader || m.Neg.Protocol != 0 {
		t.Fatalf("negotiated %+v", m.Neg)
	}
	connect(t, m)
	rec.eom = func(s *Session, mod *Modifier) Response {
		if err := mod.ChangeFrom("<x>", ""); !errors.Is(err, ErrNotNegotiated) {
			t.Errorf("ChangeFrom on v2: %v", err)
		}
		must(t, mod.AddHeader("X-V2", "yes"))
		return Continue
	}
	mods, final, err := m.Message("<a@example.org>", "<b@example.net>", []string{"Subject", "x"}, "hi\r\n")
	must(t, err)
	if final.Code() != wire.RespContinue || len(mods) != 1 || !reflect.DeepEqual(mods[0], &wire.AddHeader{Name: "X-V2", Value: "yes"}) {
		t.Fatalf("mods %v final %v", mods, final)
	}
	must(t, m.Quit())
	rec.waitClosed(t, 1)
	got := strings.Join(rec.log(), "\n")
	if strings.Contains(got, "data") {
		t.Errorf("a v2 session saw DATA:\n%s", got)
	}
}

func TestNegotiateRefusesVersion1(t *testing.T) {
	rec := newRecorder()
	_, addr := start(t, Options{Handler: rec})
	m := dial(t, addr)
	if err := m.Negotiate(1, 0, 0); err == nil {
		t.Fatal("version 1 negotiated")
	}
	rec.waitClosed(t, 1)
}

// TestFullSession follows the Postfix trace of docs/protocols/milter.md, "A session on the wire": macros before
// each stage, every step, two messages with ABORT after each, every
// modification at EOM.
func TestFullSession(t *testing.T) {
	rec := newRecorder()
	var macroSeen []string
	rec.eom = func(s *Session, m *Modifier) Response {
		for _, name := range []string{"j", "{daemon_name}", "daemon_name", "i", "mail_addr", "rcpt_addr", "{nope}"} {
			v, ok := s.Macro(name)
			macroSeen = append(macroSeen, fmt.Sprintf("%s=%s/%v", name, v, ok))
		}
		must(t, m.AddHeader("X-Added", "v1"))
		must(t, m.InsertHeader(0, "X-Top", "v2"))
		must(t, m.ChangeHeader(1, "Subject", "changed"))
		must(t, m.DeleteHeader(2, "Received"))
		must(t, m.AddRecipient("<new@example.org>", ""))
		must(t, m.AddRecipient("<par@example.org>", "NOTIFY=NEVER"))
		must(t, m.DeleteRecipient("<r@example.net>"))
		must(t, m.ChangeFrom("<bounce@example.org>", "RET=HDRS"))
		must(t, m.ReplaceBody([]byte(strings.Repeat("x", wire.MaxChunk+10))))
		must(t, m.Quarantine("held"))
		return MustReply(550, "5.7.1", "no", "100% sure")
	}
	_, addr := start(t, Options{Handler: rec, Actions: wire.AllActions})
	m := dial(t, addr)
	must(t, m.Negotiate(6, wire.AllActions, wire.AllProtocol))
	must(t, m.Macro(wire.CmdConnect, "j", "mx.example", "{daemon_name}", "smtpd"))
	connect(t, m)
	must(t, m.Macro(wire.CmdHelo))
	c, err := m.Verdict(&wire.Helo{Name: "vm"})
	wantCode(t, c, err, wire.RespContinue)
	for msg := 1; msg <= 2; msg++ {
		must(t, m.Macro(wire.CmdMail, "{mail_addr}", "s@example.org"))
		c, err = m.Verdict(&wire.Mail{Addr: "<s@example.org>", Args: []string{"SIZE=10"}})
		wantCode(t, c, err, wire.RespContinue)
		must(t, m.Macro(wire.CmdRcpt, "{rcpt_addr}", "r@example.net"))
		c, err = m.Verdict(&wire.Mail{Rcpt: true, Addr: "<r@example.net>"})
		wantCode(t, c, err, wire.RespContinue)
		must(t, m.Macro(wire.CmdData, "i", fmt.Sprintf("QID%d", msg)))
		c, err = m.Verdict(&wire.Empty{C: wire.CmdData})
		wantCode(t, c, err, wire.RespContinue)
		c, err = m.Verdict(&wire.Header{Name: "Subject", Value: "hi"})
		wantCode(t, c, err, wire.RespContinue)
		c, err = m.Verdict(&wire.Empty{C: wire.CmdEOH})
		wantCode(t, c, err, wire.RespContinue)
		c, err = m.Verdict(&wire.Body{Chunk: []byte("hello\r\n")})
		wantCode(t, c, err, wire.RespContinue)
		mods, progress, final, err := m.EOM()
		must(t, err)
		if progress != 0 {
			t.Errorf("progress %d", progress)
		}
		if want := "550-5.7.1 no\r\n550 5.7.1 100%% sure"; final.Code() != wire.RespReplyCode || final.(*wire.ReplyCode).Text != want {
			t.Fatalf("final %#v, want %q", final, want)
		}
		wantMods := []wire.Msg{
			&wire.AddHeader{Name: "X-Added", Value: "v1"},
			&wire.ChangeHeader{Insert: true, Index: 0, Name: "X-Top", Value: "v2"},
			&wire.ChangeHeader{Index: 1, Name: "Subject", Value: "changed"},
			&wire.ChangeHeader{Index: 2, Name: "Received", Value: ""},
			&wire.AddRcpt{Addr: "<new@example.org>"},
			&wire.AddRcpt{Par: true, Addr: "<par@example.org>", Args: "NOTIFY=NEVER"},
			&wire.DelRcpt{Addr: "<r@example.net>"},
			&wire.ChangeFrom{Addr: "<bounce@example.org>", Args: "RET=HDRS"},
			&wire.ReplaceBody{Chunk: []byte(strings.Repeat("x", wire.MaxChunk))},
			&wire.ReplaceBody{Chunk: []byte(strings.Repeat("x", 10))},
			&wire.Quarantine{Reason: "held"},
		}
		if !reflect.DeepEqual(mods, wantMods) {
			t.Fatalf("modifications:\n%#v\nwant\n%#v", mods, wantMods)
		}
		must(t, m.Abort()) // Postfix: ABORT after every message
	}
	must(t, m.Abort()) // and at the end
	c, err = m.Verdict(&wire.Unknown{Line: "XFROB"})
	wantCode(t, c, err, wire.RespReject)
	must(t, m.Quit())
	rec.waitClosed(t, 1)
	want := []string{
		"1 connect client.example inet 4321 192.0.2.1", "1 helo vm",
		"1 mail <s@example.org> [SIZE=10]", "1 rcpt <r@example.net> []", "1 data", `1 header Subject="hi"`, "1 eoh", `1 body "hello\r\n"`, "1 eom",
		"1 mail <s@example.org> [SIZE=10]", "1 rcpt <r@example.net> []", "1 data", `1 header Subject="hi"`, "1 eoh", `1 body "hello\r\n"`, "1 eom",
		"1 unknown XFROB", "1 close",
	}
	if got := rec.log(); !reflect.DeepEqual(got, want) {
		t.Errorf("events:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	wantMacros := "j=mx.example/true {daemon_name}=smtpd/true daemon_name=smtpd/true i=QID1/true mail_addr=s@example.org/true rcpt_addr=r@example.net/true {nope}=/false"
	if got := strings.Join(macroSeen[:7], " "); got != wantMacros {
		t.Errorf("macros at EOM 1: %s\nwant %s", got, wantMacros)
	}
	if got := macroSeen[7+3]; got != "i=QID2/true" {
		t.Errorf("macro i at EOM 2: %s", got)
	}
}

// TestAbortResetsMessage: ABORT in the middle of a message calls Abort
// and drops the message's macros but keeps the connection's.
func TestAbortResetsMessage(t *testing.T) {
	rec := newRecorder()
	var seen []string
	rec.eom = func(s *Session, m *Modifier) Response {
		for _, n := range []string{"j", "mail_addr"} {
			v, ok := s.Macro(n)
			seen = append(seen, fmt.Sprintf("%s=%s/%v", n, v, ok))
		}
		return Accept
	}
	_, addr := start(t, Options{Handler: rec})
	m := dial(t, addr)
	must(t, m.Negotiate(6, wire.AllActions, wire.AllProtocol))
	must(t, m.Macro(wire.CmdConnect, "j", "mx"))
	connect(t, m)
	must(t, m.Abort()) // no message yet: no Abort callback
	must(t, m.Macro(wire.CmdMail, "{mail_addr}", "s@x"))
	c, err := m.Verdict(&wire.Mail{Addr: "<s@x>"})
	wantCode(t, c, err, wire.RespContinue)
	must(t, m.Abort())
	_, _, final, err := m.EOM()
	must(t, err)
	if final.Code() != wire.RespAccept {
		t.Fatalf("final %v", final)
	}
	must(t, m.Quit())
	rec.waitClosed(t, 1)
	want := []string{"1 connect client.example inet 4321 192.0.2.1", "1 mail <s@x> []", "1 abort", "1 eom", "1 close"}
	if got := rec.log(); !reflect.DeepEqual(got, want) {
		t.Errorf("events %q, want %q", got, want)
	}
	if got := strings.Join(seen, " "); got != "j=mx/true mail_addr=/false" {
		t.Errorf("macros after ABORT: %s", got)
	}
}

// TestNoReply: on NR_* steps nothing is sent, so after a run of
// reply-less commands the first packet the MTA reads is EOM's verdict.
func TestNoReply(t *testing.T) {
	rec := newRecorder()
	nr := wire.ProtoNRConnect | wire.ProtoNRHelo | wire.ProtoNRMail | wire.ProtoNRRcpt | wire.ProtoNRData |
		wire.ProtoNRHeader | wire.ProtoNREOH | wire.ProtoNRBody | wire.ProtoNRUnknown
	rec.connect = func(*Session) Response { return Reject } // ignored: no reply
	_, addr := start(t, Options{Handler: rec, Protocol: nr})
	m := dial(t, addr)
	must(t, m.Negotiate(6, wire.AllActions, wire.AllProtocol))
	if m.Neg.Protocol&nr != nr {
		t.Fatalf("protocol %v", m.Neg.Protocol)
	}
	for _, msg := range []wire.Msg{
		&wire.Connect{Host: "h", Family: wire.FamilyUnknown}, &wire.Helo{Name: "h"},
		&wire.Mail{Addr: "<a>"}, &wire.Mail{Rcpt: true, Addr: "<b>"}, &wire.Empty{C: wire.CmdData},
		&wire.Header{Name: "A", Value: "b"}, &wire.Empty{C: wire.CmdEOH}, &wire.Body{Chunk: []byte("x")},
		&wire.Unknown{Line: "X"},
	} {
		r, err := m.Command(msg)
		if err != nil || r != nil {
			t.Fatalf("%v: %v %v", msg.Code(), r, err)
		}
	}
	_, _, final, err := m.EOM()
	must(t, err)
	if final.Code() != wire.RespAccept {
		t.Fatalf("first reply after no-reply steps: %v", final.Code())
	}
	must(t, m.Quit())
	rec.waitClosed(t, 1)
	if n := len(rec.log()); n != 11 {
		t.Errorf("%d events, want 11: %q", n, rec.log())
	}
}

// TestQuitNC: QUIT_NC closes the session and starts a new one on the
// same socket.
func TestQuitNC(t *testing.T) {
	rec := newRecorder()
	_, addr := start(t, Options{Handler: rec})
	m := dial(t, addr)
	must(t, m.Negotiate(6, wire.AllActions, wire.AllProtocol))
	must(t, m.Macro(wire.CmdConnect, "j", "first"))
	var first *Session
	rec.connect = func(s *Session) Response {
		first = s
		return Continue
	}
	connect(t, m)
	c, err := m.Verdict(&wire.Mail{Addr: "<a>"})
	wantCode(t, c, err, wire.RespContinue)
	must(t, m.QuitNC())
	var j []string
	var second *Session
	rec.connect = func(s *Session) Response {
		v, ok := s.Macro("j")
		j = append(j, fmt.Sprint(v, ok))
		second = s
		return Continue
	}
	connect(t, m)
	must(t, m.Quit())
	rec.waitClosed(t, 2)
	// The first session (made with the connection) stays itself after its
	// close: the next one is another.
	if first == nil || first == second || first.ID() != 1 || second.ID() != 2 {
		t.Errorf("sessions %p and %p", first, second)
	} else if v, ok := first.Macro("j"); !ok || v != "first" {
		t.Errorf("the first session's macro j after its close: %q %v", v, ok)
	}
	want := []string{"1 connect client.example inet 4321 192.0.2.1", "1 mail <a> []", "1 abort", "1 close",
		"2 connect client.example inet 4321 192.0.2.1", "2 close"}
	if got := rec.log(); !reflect.DeepEqual(got, want) {
		t.Errorf("events %q, want %q", got, want)
	}
	if len(j) != 1 || j[0] != "false" {
		t.Errorf("connect macros leaked into the new session: %q", j)
	}
}

func TestSkip(t *testing.T) {
	rec := newRecorder()
	rec.body = Skip
	_, addr := start(t, Options{Handler: rec})
	for _, offer := range []wire.Protocol{wire.AllProtocol, wire.AllProtocol &^ wire.ProtoSkip} {
		m := dial(t, addr)
		must(t, m.Negotiate(6, wire.AllActions, offer))
		connect(t, m)
		want := wire.RespSkip
		if offer&wire.ProtoSkip == 0 {
			want = wire.RespContinue
		}
		c, err := m.Verdict(&wire.Body{Chunk: []byte("x")})
		wantCode(t, c, err, want)
	}
}

// TestProgress: Modifier.Progress reaches the MTA before the verdict.
func TestProgress(t *testing.T) {
	rec := newRecorder()
	rec.eom = func(s *Session, m *Modifier) Response {
		for range 3 {
			must(t, m.Progress())
		}
		return Accept
	}
	var kept *Modifier
	prev := rec.eom
	rec.eom = func(s *Session, m *Modifier) Response { kept = m; return prev(s, m) }
	_, addr := start(t, Options{Handler: rec})
	m := dial(t, addr)
	must(t, m.Negotiate(6, wire.AllActions, wire.AllProtocol))
	connect(t, m)
	_, progress, final, err := m.EOM()
	must(t, err)
	if progress != 3 || final.Code() != wire.RespAccept {
		t.Fatalf("progress %d final %v", progress, final)
	}
	if err := kept.AddHeader("X", "y"); !errors.Is(err, ErrModifierDone) {
		t.Errorf("modifier after EOM: %v", err)
	}
}

func TestHandlerPanic(t *testing.T) {
	rec := newRecorder()
	rec.connect = func(*Session) Response { panic("boom") }
	_, addr := start(t, Options{Handler: rec})
	m := dial(t, addr)
	must(t, m.Negotiate(6, wire.AllActions, wire.AllProtocol))
	c, err := m.Verdict(&wire.Connect{Host: "h", Family: wire.FamilyUnknown})
	wantCode(t, c, err, wire.RespTempfail)
	must(t, m.Quit())
	rec.waitClosed(t, 1)
}

// TestMalformed: each malformed or out-of-place packet ends the session
// (the MTA then applies its default action), with Close called.
func TestMalformed(t *testing.T) {
	cases := map[string][]byte{
		"zero length":           {0, 0, 0, 0, 'C'},
		"over the cap":          {0, 0, 0x10, 0, 'B'},
		"truncated":             {0, 0, 0, 9, 'H', 'x'},
		"connect before optneg": wire.AppendPacket(nil, wire.CmdConnect, []byte("h\x00U")),
		"bad macro":             append(optneg(), wire.AppendPacket(nil, wire.CmdMacro, []byte("Cj\x00"))...),
		"bad connect":           append(optneg(), wire.AppendPacket(nil, wire.CmdConnect, []byte("h\x00Z"))...),
		"second connect": append(append(optneg(), wire.AppendPacket(nil, wire.CmdConnect, []byte("h\x00U"))...),
			wire.AppendPacket(nil, wire.CmdConnect, []byte("h\x00U"))...),
	}
	for name, in := range cases {
		t.Run(name, func(t *testing.T) {
			rec := newRecorder()
			_, addr := start(t, Options{Handler: rec, MaxData: 1024})
			m := dial(t, addr)
			_, err := m.Conn.Write(in)
			must(t, err)
			must(t, m.Conn.(*net.TCPConn).CloseWrite())
			m.Conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			rest, err := io.ReadAll(m.Conn)
			if err != nil {
				t.Fatalf("session not closed: %v", err)
			}
			_ = rest // OPTNEG and CONNECT replies
			rec.waitClosed(t, 1)
		})
	}
}

func optneg() []byte {
	b, _ := wire.Encode(nil, &wire.OptNeg{Version: 6, Actions: wire.AllActions, Protocol: wire.AllProtocol})
	return b
}

// TestUnknownCodeIgnored: a command code the engine does not know gets
// no reply and the session goes on.
func TestUnknownCodeIgnored(t *testing.T) {
	rec := newRecorder()
	_, addr := start(t, Options{Handler: rec})
	m := dial(t, addr)
	must(t, m.Negotiate(6, wire.AllActions, wire.AllProtocol))
	_, err := m.Conn.Write(wire.AppendPacket(nil, 'J', []byte("x")))
	must(t, err)
	connect(t, m)
}

// TestQueueFull: with the one worker busy and the queue full, CONNECT is
// answered tempfail at once; a callback dropped on a no-reply step makes
// the session's next reply tempfail until the message ends.
func TestQueueFull(t *testing.T) {
	release := make(chan struct{})
	var blocked atomic.Int32
	rec := newRecorder()
	rec.connect = func(s *Session) Response {
		if s.Data == nil && blocked.Add(1) <= 2 {
			<-release
		}
		return Continue
	}
	s, addr := start(t, Options{Handler: rec, Workers: 1, QueueLen: 1, Protocol: wire.ProtoNRMail})
	// A holds the worker, B waits in the queue.
	a, b := dial(t, addr), dial(t, addr)
	must(t, a.Negotiate(6, wire.AllActions, wire.AllProtocol))
	must(t, b.Negotiate(6, wire.AllActions, wire.AllProtocol))
	must(t, a.Send(&wire.Connect{Host: "a", Family: wire.FamilyUnknown}))
	eventually(t, func() bool { return blocked.Load() == 1 }, "A's Connect running")
	must(t, b.Send(&wire.Connect{Host: "b", Family: wire.FamilyUnknown}))
	eventually(t, func() bool { return s.waiting.Load() == 1 }, "B queued")
	c := dial(t, addr)
	must(t, c.Negotiate(6, wire.AllActions, wire.AllProtocol))
	code, err := c.Verdict(&wire.Connect{Host: "c", Family: wire.FamilyUnknown})
	wantCode(t, code, err, wire.RespTempfail)
	// C's MAIL (no reply) is dropped too; its RCPT gets tempfail without
	// the handler; after ABORT the session is served again.
	r, err := c.Command(&wire.Mail{Addr: "<x>"})
	if err != nil || r != nil {
		t.Fatalf("MAIL: %v %v", r, err)
	}
	code, err = c.Verdict(&wire.Mail{Rcpt: true, Addr: "<y>"})
	wantCode(t, code, err, wire.RespTempfail)
	if n := s.QueueFull(); n != 2 {
		t.Errorf("QueueFull() = %d, want 2", n)
	}
	close(release)
	for _, m := range []*miltest.MTA{a, b} {
		r, err := m.Read()
		if err != nil || r.Code() != wire.RespContinue {
			t.Fatalf("held CONNECT: %v %v", r, err)
		}
	}
	must(t, c.Abort())
	code, err = c.Verdict(&wire.Mail{Rcpt: true, Addr: "<y>"})
	wantCode(t, code, err, wire.RespContinue)
	for _, m := range []*miltest.MTA{a, b, c} {
		must(t, m.Quit())
	}
	rec.waitClosed(t, 3)
	for _, e := range rec.log() {
		if strings.Contains(e, "<x>") {
			t.Errorf("dropped MAIL reached the handler: %s", e)
		}
	}
}

// TestIdleTimeout: a session silent for IdleTimeout is closed, with its
// Close callback.
func TestIdleTimeout(t *testing.T) {
	rec := newRecorder()
	_, addr := start(t, Options{Handler: rec, IdleTimeout: 50 * time.Millisecond})
	m := dial(t, addr)
	must(t, m.Negotiate(6, wire.AllActions, wire.AllProtocol))
	connect(t, m)
	m.Conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := m.Conn.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("read on an idle session: %v, want EOF", err)
	}
	rec.waitClosed(t, 1)
}

// TestShutdownDrains: Shutdown stops accepting but lets open sessions
// finish their messages; it returns when the last one quits.
func TestShutdownDrains(t *testing.T) {
	rec := newRecorder()
	s, addr := start(t, Options{Handler: rec})
	m := dial(t, addr)
	must(t, m.Negotiate(6, wire.AllActions, wire.AllProtocol))
	connect(t, m)
	done := make(chan error, 1)
	go func() { done <- s.Shutdown(context.Background()) }()
	eventually(t, func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err != nil
	}, "the listener to close")
	_, final, err := m.Message("<a>", "<b>", nil, "x\r\n")
	must(t, err)
	if final.Code() != wire.RespAccept {
		t.Fatalf("final %v", final)
	}
	select {
	case err := <-done:
		t.Fatalf("Shutdown returned %v with a session open", err)
	default:
	}
	must(t, m.Quit())
	if err := <-done; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	// The probes above may have opened sessions too; each was closed once.
	rec.closed(t)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.closes[1] != 1 {
		t.Errorf("the draining session was closed %d times", rec.closes[1])
	}
}

// TestShutdownDeadline: when ctx ends first, the remaining sessions are
// closed, each with its Close callback.
func TestShutdownDeadline(t *testing.T) {
	rec := newRecorder()
	s, addr := start(t, Options{Handler: rec})
	for range 3 {
		m := dial(t, addr)
		must(t, m.Negotiate(6, wire.AllActions, wire.AllProtocol))
		connect(t, m)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Shutdown(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Shutdown: %v", err)
	}
	rec.waitClosed(t, 3)
	if n := s.Sessions(); n != 0 {
		t.Errorf("%d sessions after Shutdown", n)
	}
}

// TestCloseExactlyOnce ends many concurrent sessions every possible way
// and checks that each Session is closed exactly once.
func TestCloseExactlyOnce(t *testing.T) {
	rec := newRecorder()
	s, addr := start(t, Options{Handler: rec, Workers: 4, QueueLen: 8})
	const n = 300
	var wg sync.WaitGroup
	var sessions atomic.Int64
	openAtEnd := make(chan *miltest.MTA, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m, err := miltest.Dial("tcp", addr)
			if err != nil {
				t.Error(err)
				return
			}
			sessions.Add(1)
			if err := m.Negotiate(6, wire.AllActions, wire.AllProtocol); err != nil {
				t.Error(err)
				m.Close()
				return
			}
			_, _ = m.Verdict(&wire.Connect{Host: "h", Family: wire.FamilyUnknown})
			switch i % 6 {
			case 0:
				m.Message("<a>", "<b>", []string{"A", "b"}, "x")
				m.Quit()
				m.Close()
			case 1:
				m.Close() // EOF
			case 2:
				m.QuitNC()
				sessions.Add(1)
				m.Verdict(&wire.Connect{Host: "h2", Family: wire.FamilyUnknown})
				m.Quit()
				m.Close()
			case 3:
				m.Conn.Write([]byte{0, 0, 0, 0, 'X'}) // malformed
				io.Copy(io.Discard, m.Conn)
				m.Close()
			case 4:
				m.Send(&wire.Mail{Addr: "<a>"}) // mid-message EOF
				m.Close()
			case 5:
				openAtEnd <- m // closed by the server
			}
		}()
	}
	wg.Wait()
	close(openAtEnd)
	eventually(t, func() bool { return rec.closed(t) == int(sessions.Load())-n/6 }, "sessions to end")
	s.Close()
	for m := range openAtEnd {
		m.Close()
	}
	if got, want := rec.closed(t), int(sessions.Load()); got != want {
		t.Fatalf("%d sessions closed, want %d", got, want)
	}
}

// TestNoGoroutineLeft: after Close, neither the workers nor the
// connection goroutines are left, whatever state the sessions were in.
func TestNoGoroutineLeft(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	release := make(chan struct{})
	rec := newRecorder()
	rec.connect = func(s *Session) Response {
		if s.ID() == 1 {
			<-release // a callback in flight at Close
		}
		return Continue
	}
	s := NewServer(Options{Handler: rec, Logger: quiet()})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	served := make(chan error, 1)
	go func() { served <- s.Serve(l) }()
	var mtas []*miltest.MTA
	for i := range 5 {
		m, err := miltest.Dial("tcp", l.Addr().String())
		must(t, err)
		mtas = append(mtas, m)
		must(t, m.Negotiate(6, wire.AllActions, wire.AllProtocol))
		if i == 0 {
			must(t, m.Send(&wire.Connect{Host: "h", Family: wire.FamilyUnknown}))
			eventually(t, func() bool { return len(rec.log()) == 1 }, "the first Connect to run")
		} else {
			connect(t, m)
		}
	}
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	// Close is under way once Serve has returned; it must then wait for
	// the callback in flight.
	if err := <-served; !errors.Is(err, ErrServerClosed) {
		t.Fatal(err)
	}
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) with a callback in flight", err)
	default:
	}
	close(release)
	must(t, <-closed)
	for _, m := range mtas {
		m.Close()
	}
	if n := rec.closed(t); n != 5 {
		t.Fatalf("%d sessions closed, want 5", n)
	}
}

// TestServeAfterClose: Serve after Close refuses at once.
func TestServeAfterClose(t *testing.T) {
	s := NewServer(Options{Handler: &minimal{}, Logger: quiet()})
	s.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	if err := s.Serve(l); !errors.Is(err, ErrServerClosed) {
		t.Fatalf("Serve: %v", err)
	}
	// Shutdown of a server never served returns at once.
	must(t, NewServer(Options{Handler: &minimal{}}).Shutdown(context.Background()))
}

func TestUnixSocket(t *testing.T) {
	rec := newRecorder()
	s := NewServer(Options{Handler: rec, Logger: quiet()})
	l, err := net.Listen("unix", t.TempDir()+"/milter.sock")
	must(t, err)
	served := make(chan error, 1)
	go func() { served <- s.Serve(l) }()
	m, err := miltest.Dial("unix", l.Addr().String())
	must(t, err)
	must(t, m.Negotiate(6, wire.AllActions, wire.AllProtocol))
	connect(t, m)
	_, final, err := m.Message("<a>", "<b>", nil, "body")
	must(t, err)
	if final.Code() != wire.RespAccept {
		t.Fatalf("final %v", final)
	}
	must(t, m.Quit())
	m.Close()
	must(t, s.Shutdown(context.Background()))
	if err := <-served; !errors.Is(err, ErrServerClosed) {
		t.Fatal(err)
	}
	rec.waitClosed(t, 1)
}

func TestReply(t *testing.T) {
	good := []struct {
		code  int
		x     string
		lines []string
		want  string
	}{
		{421, "4.7.0", []string{"class full"}, "421 4.7.0 class full"},
		{550, "", []string{"no"}, "550 no"},
		{451, "", nil, "451"},
		{451, "4.3.2", nil, "451 4.3.2"},
		{550, "5.7.1", []string{"a", "b", "c"}, "550-5.7.1 a\r\n550-5.7.1 b\r\n550 5.7.1 c"},
		{554, "", []string{"50% off"}, "554 50%% off"},
	}
	for _, c := range good {
		r, err := Reply(c.code, c.x, c.lines...)
		if err != nil || r.Text() != c.want || r.Code() != wire.RespReplyCode {
			t.Errorf("Reply(%d, %q, %q) = %q, %v; want %q", c.code, c.x, c.lines, r.Text(), err, c.want)
		}
	}
	bad := []struct {
		code  int
		x     string
		lines []string
		msg   string
	}{
		{250, "", nil, "not 4xx or 5xx"},
		{600, "", nil, "not 4xx or 5xx"},
		{421, "5.7.0", nil, "not 4.x.y"},
		{421, "4.7", nil, "not 4.x.y"},
		{421, "4.x.0", nil, "not 4.x.y"},
		{421, "4.1000.0", nil, "not 4.x.y"},
		{550, "", []string{"a\r\nb"}, "control character 0x0d"},
		{550, "", []string{"a\x00"}, "control character 0x00"},
		{550, "", []string{strings.Repeat("x", 600)}, "limit 510"},
	}
	for _, c := range bad {
		_, err := Reply(c.code, c.x, c.lines...)
		if !errors.Is(err, ErrReply) || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("Reply(%d, %q, %q) = %v, want %q", c.code, c.x, c.lines, err, c.msg)
		}
	}
	if (Response{}).Code() != wire.RespContinue || Tempfail.String() != "tempfail" {
		t.Error("zero Response or String")
	}
	defer func() {
		if recover() == nil {
			t.Error("MustReply did not panic")
		}
	}()
	MustReply(200, "")
}

func TestModifierChecks(t *testing.T) {
	c := &conn{actions: wire.ActAddHeader}
	m := &Modifier{c: c}
	cases := []struct {
		err  error
		want error
	}{
		{m.AddHeader("", "v"), ErrInvalid},
		{m.AddHeader("Bad Name", "v"), ErrInvalid},
		{m.AddHeader("Bad:Name", "v"), ErrInvalid},
		{m.AddHeader("X", "a\r\nb"), ErrInvalid},
		{m.AddHeader("X", "a\nb"), ErrInvalid},
		{m.AddHeader("X", "a\x00"), ErrInvalid},
		{m.AddHeader("X", "folded\r\n\tline"), nil},
		{m.InsertHeader(-1, "X", "v"), ErrInvalid},
		{m.ChangeHeader(0, "X", "v"), ErrInvalid},
		{m.ChangeHeader(1, "X", "v"), ErrNotNegotiated},
		{m.AddRecipient("", ""), ErrInvalid},
		{m.AddRecipient("<a>", "X=1\r\n"), ErrInvalid},
		{m.AddRecipient("<a>", ""), ErrNotNegotiated},
		{m.AddRecipient("<a>", "NOTIFY=NEVER"), ErrNotNegotiated},
		{m.DeleteRecipient("<a>"), ErrNotNegotiated},
		{m.ChangeFrom("<a>", ""), ErrNotNegotiated},
		{m.ReplaceBody(nil), ErrNotNegotiated},
		{m.Quarantine(""), ErrInvalid},
		{m.Quarantine("r"), ErrNotNegotiated},
	}
	for i, c := range cases {
		if (c.want == nil && c.err != nil) || !errors.Is(c.err, c.want) {
			t.Errorf("case %d: %v, want %v", i, c.err, c.want)
		}
	}
	if c.actions = wire.ActChangeBody; m.ReplaceBody(nil) != nil {
		t.Error("empty body replacement refused")
	}
	m.finish(false)
	if err := m.Progress(); !errors.Is(err, ErrModifierDone) {
		t.Error(err)
	}
}

// TestNoQueue: with a negative QueueLen (the configuration's queue = 0) a
// callback that finds the only worker busy is answered at once instead of
// waiting.
func TestNoQueue(t *testing.T) {
	release := make(chan struct{})
	var blocked atomic.Int32
	rec := newRecorder()
	rec.connect = func(s *Session) Response {
		if blocked.Add(1) == 1 {
			<-release
		}
		return Continue
	}
	s, addr := start(t, Options{Handler: rec, Workers: 1, QueueLen: -1})
	a, b := dial(t, addr), dial(t, addr)
	must(t, a.Negotiate(6, wire.AllActions, wire.AllProtocol))
	must(t, b.Negotiate(6, wire.AllActions, wire.AllProtocol))
	must(t, a.Send(&wire.Connect{Host: "a", Family: wire.FamilyUnknown}))
	eventually(t, func() bool { return blocked.Load() == 1 }, "A's Connect running")
	code, err := b.Verdict(&wire.Connect{Host: "b", Family: wire.FamilyUnknown})
	wantCode(t, code, err, wire.RespTempfail)
	if n := s.QueueFull(); n != 1 {
		t.Errorf("QueueFull() = %d, want 1", n)
	}
	close(release)
	r, err := a.Read()
	if err != nil || r.Code() != wire.RespContinue {
		t.Fatalf("held CONNECT: %v %v", r, err)
	}
	for _, m := range []*miltest.MTA{a, b} {
		must(t, m.Quit())
	}
	rec.waitClosed(t, 2)
}
