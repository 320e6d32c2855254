package app

import (
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"sluice/internal/milter"
	"sluice/internal/milter/miltest"
	"sluice/internal/milter/wire"
)

// milterConfig serves the milter on a unix socket in dir with the class
// 127.0.0.0/8 capped at 2 incoming sessions.
func milterConfig(dir, extra string) string {
	return fmt.Sprintf(`state_dir = %q
[[class]]
name = "loopback"
match = ["127.0.0.0/8", "::1"]
refuse = 2
[[class]]
name = "rest"
match = ["*"]
[anvil]
enabled = false
[policy]
enabled = false
[throttle]
enabled = false
[milter]
listen = ["unix:milter"]
%s`, dir, extra)
}

// dialMilter connects as an MTA would for an SMTP client at addr and
// returns the reply to CONNECT.
func dialMilter(t *testing.T, sock, host, addr string) (*miltest.MTA, wire.Msg) {
	t.Helper()
	m, err := miltest.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	if err := m.Negotiate(6, wire.AllActions, wire.AllProtocol); err != nil {
		t.Fatal(err)
	}
	fam := wire.FamilyInet
	if strings.Contains(addr, ":") {
		fam = wire.FamilyInet6
	}
	r, err := m.Command(&wire.Connect{Host: host, Family: fam, Port: 4711, Addr: addr})
	if err != nil {
		t.Fatal(err)
	}
	return m, r
}

func replyText(r wire.Msg) string {
	if rc, ok := r.(*wire.ReplyCode); ok {
		return rc.Text
	}
	return r.Code().String()
}

func TestMilterClassCap(t *testing.T) {
	dir := t.TempDir()
	d := startDaemon(t, writeConfig(t, dir, milterConfig(dir, "")))
	sock := filepath.Join(dir, "milter")
	a, r := dialMilter(t, sock, "[127.0.0.1]", "127.0.0.1")
	if r.Code() != wire.RespContinue {
		t.Fatalf("first session: %v", replyText(r))
	}
	// Only CONNECT is negotiated: the other steps cost the MTA nothing.
	if a.Neg.Protocol&wire.ProtoNoMail == 0 || a.Neg.Protocol&wire.ProtoNoRcpt == 0 || a.Neg.Protocol&wire.ProtoNoBody == 0 {
		t.Errorf("steps beyond CONNECT negotiated: %v", a.Neg.Protocol)
	}
	// Sendmail's form of an IPv6 address.
	b, r := dialMilter(t, sock, "localhost", "IPv6:0:0:0:0:0:0:0:1")
	if r.Code() != wire.RespContinue {
		t.Fatalf("second session: %v", replyText(r))
	}
	_, r = dialMilter(t, sock, "[127.0.0.3]", "127.0.0.3")
	if got := replyText(r); !strings.HasPrefix(got, "421 4.7.0 Too many sessions from class loopback (2/2)") {
		t.Fatalf("third session: %q", got)
	}
	// Another class is not held back.
	if _, r := dialMilter(t, sock, "mx.example.org", "192.0.2.1"); r.Code() != wire.RespContinue {
		t.Fatalf("other class: %v", replyText(r))
	}
	// A session that ends frees its slot, whether by QUIT or by EOF.
	if err := a.Quit(); err != nil {
		t.Fatal(err)
	}
	waitHeld(t, d, "loopback", 1)
	if _, r := dialMilter(t, sock, "[127.0.0.4]", "127.0.0.4"); r.Code() != wire.RespContinue {
		t.Fatalf("after a QUIT: %v", replyText(r))
	}
	b.Close()
	waitHeld(t, d, "loopback", 1)
	st := d.Status()
	var door bool
	for _, dr := range st.Doors {
		door = door || dr.Name == "milter"
	}
	if !door {
		t.Errorf("the status has no milter door: %+v", st.Doors)
	}
}

// waitHeld waits until class holds n sessions (sessions end
// asynchronously after the MTA's QUIT or EOF).
func waitHeld(t *testing.T, d *Daemon, class string, n int64) {
	t.Helper()
	var held int64
	for range 3000 {
		var err error
		held, err = d.lim.Held(t.Context(), "class\x00"+class)
		if err != nil {
			t.Fatal(err)
		}
		if held == n {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("class %s holds %d sessions, want %d", class, held, n)
}

func TestMilterPolicyRules(t *testing.T) {
	dir := t.TempDir()
	startDaemon(t, writeConfig(t, dir, milterConfig(dir, `policy_rules = true
[[policy.rule]]
name = "rcpts"
count = "recipients"
stage = "RCPT"
key = ["client_address"]
limit = ["3/1h exact"]
action = "DEFER_IF_PERMIT 4.7.1 too many recipients from {key}"
[[policy.rule]]
name = "size"
count = "bytes"
key = ["sender"]
limit = ["1000/1h smooth"]
action = "REJECT 5.7.1 too many bytes"
`)))
	m, r := dialMilter(t, filepath.Join(dir, "milter"), "mx.example.org", "192.0.2.1")
	if r.Code() != wire.RespContinue {
		t.Fatal(replyText(r))
	}
	if m.Neg.Protocol&(wire.ProtoNoMail|wire.ProtoNoRcpt|wire.ProtoNoBody) != 0 {
		t.Fatalf("rules need MAIL, RCPT and the body; negotiated %v", m.Neg.Protocol)
	}
	// HELO, the headers and the body are only recorded or counted: the
	// MTA need not wait for their replies. MAIL, RCPT and DATA may be
	// refused, so they keep theirs.
	if nr := wire.ProtoNRHelo | wire.ProtoNRHeader | wire.ProtoNREOH | wire.ProtoNRBody; m.Neg.Protocol&nr != nr ||
		m.Neg.Protocol&(wire.ProtoNRMail|wire.ProtoNRRcpt|wire.ProtoNRData) != 0 {
		t.Fatalf("negotiated %v; want no reply to HELO, headers, EOH and body only", m.Neg.Protocol)
	}
	// Drive the steps by hand: MAIL, RCPTs, then DATA..EOM.
	run := func(rcpts int, body string) string {
		if v, err := m.Verdict(&wire.Mail{Addr: "<a@example.org>"}); err != nil || v != wire.RespContinue {
			t.Fatalf("MAIL: %v %v", v, err)
		}
		for range rcpts {
			r, err := m.Command(&wire.Mail{Rcpt: true, Addr: "<b@example.net>"})
			if err != nil {
				t.Fatal(err)
			}
			if r.Code() != wire.RespContinue {
				m.Abort()
				return "RCPT " + replyText(r)
			}
		}
		for _, s := range []wire.Msg{&wire.Empty{C: wire.CmdData}, &wire.Header{Name: "Subject", Value: "x"}, &wire.Empty{C: wire.CmdEOH}, &wire.Body{Chunk: []byte(body)}} {
			if v, err := m.Verdict(s); err != nil || (v != 0 && v != wire.RespContinue) {
				t.Fatalf("%v: %v %v", s.Code(), v, err)
			}
		}
		_, _, final, err := m.EOM()
		if err != nil {
			t.Fatal(err)
		}
		if final.Code() != wire.RespContinue && final.Code() != wire.RespAccept {
			return "EOM " + replyText(final)
		}
		return ""
	}
	if got := run(2, "hello\r\n"); got != "" {
		t.Fatalf("first message: %q", got)
	}
	if got := run(2, "hello\r\n"); got != "RCPT 450 4.7.1 too many recipients from client_address=192.0.2.1" {
		t.Fatalf("second message: %q", got)
	}
	m2, _ := dialMilter(t, filepath.Join(dir, "milter"), "mx2.example.org", "192.0.2.2")
	m = m2
	if got := run(1, strings.Repeat("x", 2000)); got != "EOM 550 5.7.1 too many bytes" {
		t.Fatalf("big message: %q", got)
	}
}

func TestMilterResponse(t *testing.T) {
	for act, want := range map[string]string{
		"":                                    "continue",
		"DUNNO":                               "continue",
		"WARN over the limit":                 "continue",
		"DISCARD":                             "discard",
		"DEFER_IF_PERMIT 4.7.1 slow down":     "450 4.7.1 slow down",
		"DEFER try later":                     "450 4.7.1 try later",
		"REJECT":                              "550 5.7.1 Rate limit reached",
		"421 4.7.0 Too many sessions":         "421 4.7.0 Too many sessions",
		"452 4.5.3 Too many recipients":       "452 4.5.3 Too many recipients",
		"554 no":                              "554 5.7.1 no",
		"451 5.7.1 mismatched class":          "451 4.7.1 5.7.1 mismatched class",
		"BOGUS":                               "tempfail",
		"DEFER_IF_PERMIT 100% over, {really}": "450 4.7.1 100%% over, {really}",
	} {
		// String names a verdict, and quotes a reply's text.
		got := milterResponse(act).String()
		if text, err := strconv.Unquote(got); err == nil {
			got = text
		}
		if got != want {
			t.Errorf("milterResponse(%q) = %q, want %q", act, got, want)
		}
	}
}

func TestMilterAddr(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1":            "127.0.0.1",
		"IPv6:0:0:0:0:0:0:0:1": "::1",
		"ipv6:2001:db8::1":     "2001:db8::1",
		"::ffff:192.0.2.1":     "192.0.2.1",
		"[192.0.2.7]":          "192.0.2.7",
		"not an address":       "invalid IP",
	} {
		fam := milter.FamilyInet
		if strings.Contains(in, ":") {
			fam = milter.FamilyInet6
		}
		if got := milterAddr(fam, in).String(); got != want {
			t.Errorf("milterAddr(%q) = %s, want %s", in, got, want)
		}
	}
	if milterAddr(milter.FamilyUnix, "/run/x").IsValid() {
		t.Error("a unix socket path was read as an address")
	}
}

// TestMilterPauseWhenFull: with every class full the listener stops
// accepting, and starts again when a session ends.
func TestMilterPauseWhenFull(t *testing.T) {
	dir := t.TempDir()
	body := strings.Replace(milterConfig(dir, "pause_when_full = true\n"), "[[class]]\nname = \"rest\"\nmatch = [\"*\"]", "[[class]]\nname = \"rest\"\nmatch = [\"*\"]\nrefuse = 1", 1)
	d := startDaemon(t, writeConfig(t, dir, body))
	sock := filepath.Join(dir, "milter")
	a, _ := dialMilter(t, sock, "[127.0.0.1]", "127.0.0.1")
	dialMilter(t, sock, "[127.0.0.2]", "127.0.0.2")
	dialMilter(t, sock, "x.example", "192.0.2.1")
	waitHeld(t, d, "rest", 1)
	// Every class is full: a new connection is not accepted (its OPTNEG
	// gets no answer) until a session ends.
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	m := miltest.New(c)
	if err := m.Send(&wire.OptNeg{Version: 6, Actions: wire.AllActions, Protocol: wire.AllProtocol}); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	var b [1]byte
	if _, err := c.Read(b[:]); err == nil {
		t.Fatal("a connection was served while every class was full")
	}
	a.Quit()
	r, err := m.Read()
	if err != nil {
		t.Fatalf("after a session ended, the waiting connection was not served: %v", err)
	}
	if r.Code() != wire.CmdOptNeg {
		t.Fatalf("got %v", r.Code())
	}
}
