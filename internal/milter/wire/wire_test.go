package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"reflect"
	"runtime"
	"strings"
	"testing"
)

// pkt builds a raw packet.
func pkt(code Code, data string) []byte { return AppendPacket(nil, code, []byte(data)) }

// roundTrip encodes m, reads it back as a packet and decodes it.
func roundTrip(t *testing.T, m Msg, response bool) Msg {
	t.Helper()
	b, err := Encode(nil, m)
	if err != nil {
		t.Fatalf("Encode(%#v): %v", m, err)
	}
	p, err := ReadPacket(bytes.NewReader(b), DefaultMaxData, nil)
	if err != nil {
		t.Fatalf("ReadPacket(%q): %v", b, err)
	}
	if p.Code != m.Code() {
		t.Fatalf("code %v, want %v", p.Code, m.Code())
	}
	var got Msg
	if response {
		got, err = DecodeResponse(p)
	} else {
		got, err = DecodeCommand(p)
	}
	if err != nil {
		t.Fatalf("decode %q: %v", b, err)
	}
	return got
}

func TestRoundTripCommands(t *testing.T) {
	cmds := []Msg{
		&OptNeg{Version: 6, Actions: AllActions, Protocol: AllProtocol},
		&OptNeg{Version: 2, Actions: V1Actions, Protocol: V1Protocol},
		&Macro{Cmd: CmdConnect, NameValues: []string{"j", "mx.example", "{daemon_name}", "smtpd", "v", ""}},
		&Macro{Cmd: CmdHelo},
		&Connect{Host: "client.example", Family: FamilyInet, Port: 54321, Addr: "192.0.2.1"},
		&Connect{Host: "[2001:db8::1]", Family: FamilyInet6, Port: 25, Addr: "2001:db8::1"},
		&Connect{Host: "localhost", Family: FamilyUnix, Addr: "/run/smtp.sock"},
		&Connect{Host: "localhost", Family: FamilyUnknown},
		&Helo{Name: "client.example"},
		&Mail{Addr: "<s@example.org>", Args: []string{"SIZE=100", "BODY=8BITMIME"}},
		&Mail{Addr: "<>"},
		&Mail{Rcpt: true, Addr: "<r@example.net>", Args: []string{"NOTIFY=NEVER"}},
		&Header{Name: "Subject", Value: " hello"},
		&Header{Name: "X-Empty", Value: ""},
		&Body{Chunk: []byte("line 1\r\nline 2\r\n")},
		&EOM{},
		&EOM{Chunk: []byte("last chunk\r\n")},
		&Unknown{Line: "XFROB now"},
		&Empty{C: CmdAbort}, &Empty{C: CmdQuit}, &Empty{C: CmdQuitNC}, &Empty{C: CmdData}, &Empty{C: CmdEOH},
	}
	for _, m := range cmds {
		if got := roundTrip(t, m, false); !reflect.DeepEqual(got, m) {
			t.Errorf("round trip %v: got %#v, want %#v", m.Code(), got, m)
		}
	}
}

func TestRoundTripResponses(t *testing.T) {
	resps := []Msg{
		&OptNeg{Version: 6, Actions: ActAddHeader | ActSetSymList, Protocol: ProtoNoHelo | ProtoNRHeader,
			Macros: []MacroRequest{{StageConnect, "{client_addr} j"}, {StageEOM, ""}, {StageEOH, "i"}}},
		&ReplyCode{Text: "421 4.7.0 class full"},
		&ReplyCode{Text: "550-5.7.1 first\r\n550-5.7.1 second\r\n550 5.7.1 third"},
		&ReplyCode{Text: "451"},
		&AddHeader{Name: "X-Sluice", Value: "checked"},
		&ChangeHeader{Insert: true, Index: 0, Name: "X-First", Value: "1"},
		&ChangeHeader{Index: 2, Name: "Received", Value: ""},
		&AddRcpt{Addr: "<bcc@example.org>"},
		&AddRcpt{Par: true, Addr: "<bcc@example.org>", Args: "NOTIFY=NEVER ORCPT=rfc822;x@example.org"},
		&AddRcpt{Par: true, Addr: "<bcc@example.org>"},
		&DelRcpt{Addr: "<r@example.net>"},
		&ChangeFrom{Addr: "<bounce@example.org>", Args: "RET=HDRS"},
		&ChangeFrom{Addr: "<>"},
		&ReplaceBody{Chunk: []byte("new body\r\n")},
		&Quarantine{Reason: "held for review"},
	}
	for _, c := range []Code{RespContinue, RespAccept, RespReject, RespTempfail, RespDiscard, RespShutdown,
		RespSkip, RespProgress, RespConnFail, RespSetSymList} {
		resps = append(resps, &Empty{C: c})
	}
	for _, m := range resps {
		if got := roundTrip(t, m, true); !reflect.DeepEqual(got, m) {
			t.Errorf("round trip %v: got %#v, want %#v", m.Code(), got, m)
		}
	}
}

// TestKnownBytes pins encodings to the bytes of real traces.
func TestKnownBytes(t *testing.T) {
	cases := []struct {
		m    Msg
		want string
	}{
		{&OptNeg{Version: 6, Actions: 0x1ff, Protocol: 0x1fffff},
			"\x00\x00\x00\x0dO\x00\x00\x00\x06\x00\x00\x01\xff\x00\x1f\xff\xff"},
		{&Connect{Host: "localhost", Family: FamilyInet, Port: 0x1234, Addr: "127.0.0.1"},
			"\x00\x00\x00\x18Clocalhost\x004\x12\x34127.0.0.1\x00"},
		{&Connect{Host: "localhost", Family: FamilyUnknown}, "\x00\x00\x00\x0cClocalhost\x00U"},
		{&Macro{Cmd: CmdEOM, NameValues: []string{"i", "4XyZ"}}, "\x00\x00\x00\x09DEi\x004XyZ\x00"},
		{&Empty{C: RespContinue}, "\x00\x00\x00\x01c"},
		{&ChangeHeader{Index: 1, Name: "A", Value: "b"}, "\x00\x00\x00\x09m\x00\x00\x00\x01A\x00b\x00"},
	}
	for _, c := range cases {
		got, err := Encode(nil, c.m)
		if err != nil || string(got) != c.want {
			t.Errorf("Encode(%#v) = %q, %v; want %q", c.m, got, err, c.want)
		}
	}
}

func TestParseHeader(t *testing.T) {
	h := func(n uint32, c byte) []byte { return append(binary.BigEndian.AppendUint32(nil, n), c) }
	if c, n, err := ParseHeader(h(1, 'c'), 10); err != nil || c != RespContinue || n != 0 {
		t.Errorf("bare code: %v %d %v", c, n, err)
	}
	if _, n, err := ParseHeader(h(11, 'B'), 10); err != nil || n != 10 {
		t.Errorf("at cap: %d %v", n, err)
	}
	cases := []struct {
		h    []byte
		max  int
		want error
		msg  string
	}{
		{h(0, 'c'), 10, ErrMalformed, "zero length"},
		{h(12, 'B'), 10, ErrTooLarge, "payload of 11 bytes, cap 10"},
		{h(0xffffffff, 'B'), DefaultMaxData, ErrTooLarge, "payload of 4294967294 bytes"},
		{h(2, 'B'), -1, ErrTooLarge, "cap -1"},
		{[]byte{0, 0, 1}, 10, ErrMalformed, "header of 3 bytes"},
	}
	for _, c := range cases {
		_, _, err := ParseHeader(c.h, c.max)
		if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("ParseHeader(%q, %d) = %v, want %v containing %q", c.h, c.max, err, c.want, c.msg)
		}
	}
}

// TestParseLength: the length alone, before the code byte, is judged as
// ParseHeader judges it.
func TestParseLength(t *testing.T) {
	l := func(n uint32) []byte { return binary.BigEndian.AppendUint32(nil, n) }
	if n, err := ParseLength(l(11), 10); err != nil || n != 10 {
		t.Errorf("at cap: %d %v", n, err)
	}
	if n, err := ParseLength(l(1), 10); err != nil || n != 0 {
		t.Errorf("bare code: %d %v", n, err)
	}
	for _, c := range []struct {
		h    []byte
		want error
		msg  string
	}{
		{l(0), ErrMalformed, "zero length"},
		{l(12), ErrTooLarge, "payload of 11 bytes, cap 10"},
		{[]byte{0, 0, 1}, ErrMalformed, "length of 3 bytes"},
	} {
		if _, err := ParseLength(c.h, 10); !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("ParseLength(%q) = %v, want %v containing %q", c.h, err, c.want, c.msg)
		}
		if len(c.h) == LengthSize {
			_, _, herr := ParseHeader(append(c.h, 'B'), 10)
			_, lerr := ParseLength(c.h, 10)
			if herr == nil || lerr == nil || herr.Error() != lerr.Error() {
				t.Errorf("ParseHeader says %v, ParseLength %v", herr, lerr)
			}
		}
	}
}

// TestReadPacketNoAllocBeforeCap checks that a huge length is refused
// before the payload is read or allocated: only the error is allocated.
func TestReadPacketNoAllocBeforeCap(t *testing.T) {
	in := []byte{0x7f, 0xff, 0xff, 0xff, 'B'}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range 10 {
		if _, err := ReadPacket(bytes.NewReader(in), 1024, nil); !errors.Is(err, ErrTooLarge) {
			t.Fatalf("got %v", err)
		}
	}
	runtime.ReadMemStats(&after)
	if n := after.TotalAlloc - before.TotalAlloc; n > 10*1024 {
		t.Errorf("%d bytes allocated for 10 refused packets", n)
	}
}

func TestReadPacket(t *testing.T) {
	stream := append(pkt(CmdAbort, ""), pkt(CmdHelo, "x\x00")...)
	r := bytes.NewReader(stream)
	buf := make([]byte, 0, 16)
	p, err := ReadPacket(r, 100, buf)
	if err != nil || p.Code != CmdAbort || len(p.Data) != 0 {
		t.Fatalf("first: %+v %v", p, err)
	}
	p, err = ReadPacket(r, 100, buf)
	if err != nil || p.Code != CmdHelo || string(p.Data) != "x\x00" || &p.Data[0] != &buf[:1][0] {
		t.Fatalf("second (in buf): %+v %v", p, err)
	}
	if _, err := ReadPacket(r, 100, buf); err != io.EOF {
		t.Fatalf("end: %v", err)
	}
	for _, in := range [][]byte{{0, 0}, {0, 0, 0, 5, 'L', 'a'}, {0, 0, 0, 1}} {
		_, err := ReadPacket(bytes.NewReader(in), 100, nil)
		if !errors.Is(err, ErrMalformed) || !errors.Is(err, io.ErrUnexpectedEOF) || !strings.Contains(err.Error(), "truncated") {
			t.Errorf("ReadPacket(%q) = %v, want truncated", in, err)
		}
	}
	if _, err := ReadPacket(bytes.NewReader([]byte{0, 0, 0, 0, 'c'}), 100, nil); !errors.Is(err, ErrMalformed) {
		t.Errorf("zero length: %v", err)
	}
}

func TestDecodeMalformed(t *testing.T) {
	cases := []struct {
		code     Code
		data     string
		response bool
		msg      string
	}{
		{CmdOptNeg, "\x00\x00\x00\x06\x00\x00", false, "OPTNEG payload of 6 bytes, want at least 12"},
		{CmdOptNeg, strings.Repeat("\x00", 12) + "\x00\x00", false, "2 stray bytes"},
		{CmdOptNeg, strings.Repeat("\x00", 12) + "\x00\x00\x00\x09j\x00", true, "unknown macro stage 9"},
		{CmdOptNeg, strings.Repeat("\x00", 12) + "\x00\x00\x00\x01j", true, "macro list without its terminating NUL"},
		{CmdMacro, "", false, "MACRO without a command code"},
		{CmdMacro, "Cj\x00", false, `name "j" without a value`},
		{CmdMacro, "Cj\x00x", false, "macro without its terminating NUL"},
		{CmdConnect, "", false, "missing host name"},
		{CmdConnect, "host", false, "host name without its terminating NUL"},
		{CmdConnect, "host\x00", false, "without an address family"},
		{CmdConnect, "host\x00X", false, "unknown address family 'X'"},
		{CmdConnect, "host\x004\x00", false, "truncated port"},
		{CmdConnect, "host\x004\x00\x19", false, "missing address"},
		{CmdConnect, "host\x004\x00\x19127.0.0.1", false, "address without its terminating NUL"},
		{CmdConnect, "host\x004\x00\x19127.0.0.1\x00x", false, "1 unexpected bytes at the end"},
		{CmdConnect, "host\x00Ux", false, "1 unexpected bytes at the end"},
		{CmdHelo, "", false, "missing HELO name"},
		{CmdHelo, "a\x00b\x00", false, "unexpected bytes"},
		{CmdMail, "", false, "MAIL: milter/wire: malformed packet: missing address"},
		{CmdRcpt, "<a>\x00SIZE=1", false, "RCPT: milter/wire: malformed packet: ESMTP argument without"},
		{CmdHeader, "Subject\x00", false, "missing header value"},
		{CmdHeader, "Subject", false, "header name without"},
		{CmdHeader, "a\x00b\x00c\x00", false, "unexpected bytes"},
		{CmdUnknown, "HELP", false, "command line without"},
		{CmdAbort, "x", false, "ABORT takes no payload, got 1 bytes"},
		{CmdEOH, "x", false, "EOH takes no payload"},
		{'J', "", false, "unknown command code 'J'"},
		{'z', "", true, "unknown response code 'z'"},
		{RespContinue, "x", true, "CONTINUE takes no payload"},
		{RespReplyCode, "250 ok\x00", true, "does not start with a 4xx or 5xx code"},
		{RespReplyCode, "550 ok", true, "reply text without"},
		{RespInsHeader, "\x00\x00", true, "truncated index"},
		{RespChgHeader, "\x00\x00\x00\x01X\x00", true, "missing header value"},
		{RespAddRcpt, "<a>\x00ARGS\x00", true, "unexpected bytes"},
		{RespAddRcptPar, "<a>\x00ARGS", true, "ESMTP arguments without"},
		{RespChgFrom, "", true, "missing address"},
		{RespDelRcpt, "<a>", true, "address without"},
		{RespQuarantine, "", true, "missing quarantine reason"},
	}
	for _, c := range cases {
		p := Packet{Code: c.code, Data: []byte(c.data)}
		var err error
		if c.response {
			_, err = DecodeResponse(p)
		} else {
			_, err = DecodeCommand(p)
		}
		if err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("decode %v %q = %v, want %q", c.code, c.data, err, c.msg)
		}
		if err != nil && !errors.Is(err, ErrMalformed) {
			t.Errorf("decode %v %q: %v does not wrap ErrMalformed", c.code, c.data, err)
		}
	}
}

func TestEncodeInvalid(t *testing.T) {
	cases := []struct {
		m   Msg
		msg string
	}{
		{&Helo{Name: "a\x00b"}, "NUL byte inside HELO name"},
		{&Connect{Host: "h", Family: 'X'}, "address family 'X'"},
		{&Macro{Cmd: CmdConnect, NameValues: []string{"j"}}, "odd number of macro strings"},
		{&OptNeg{Macros: []MacroRequest{{Stage: 7}}}, "macro stage 7"},
		{&ReplyCode{Text: "250 ok"}, "4xx or 5xx"},
		{&AddRcpt{Addr: "<a>", Args: "X=1"}, "need ADDRCPT_PAR"},
		{&Mail{Addr: "<a>", Args: []string{"A\x00"}}, "NUL byte inside ESMTP argument"},
		{&AddHeader{Name: "X", Value: "\x00"}, "NUL byte inside header value"},
	}
	for _, c := range cases {
		out, err := Encode([]byte("keep"), c.m)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("Encode(%#v) = %v, want %q", c.m, err, c.msg)
		}
		if string(out) != "keep" {
			t.Errorf("Encode(%#v) changed dst on error: %q", c.m, out)
		}
	}
}

func TestCheckReplyText(t *testing.T) {
	good := []string{
		"421 4.7.0 try later", "550", "451 ", "554 5.7.1 100%% sure",
		"550-5.7.1 a\r\n550 5.7.1 b", "452-x\r\n452-y\r\n452 z", "550 tab\there",
		"550 " + strings.Repeat("x", MaxReplyLine-4),
	}
	for _, s := range good {
		if err := CheckReplyText(s); err != nil {
			t.Errorf("CheckReplyText(%q) = %v", s, err)
		}
	}
	bad := []struct{ in, msg string }{
		{"", "empty reply"},
		{"250 ok", "4xx or 5xx"},
		{"600 no", "4xx or 5xx"},
		{"4a1 x", "4xx or 5xx"},
		{"45", "4xx or 5xx"},
		{"550-a", "want ' ' after the code of the last line"},
		{"550 a\r\n550 b", "want '-' after the code of a line that is not the last"},
		{"550x", "want ' '"},
		{"550-a\r\n451 b", "has code 451, line 1 has 550"},
		{"550 a\nb", "control character 0x0a"},
		{"550 a\rb", "control character 0x0d"},
		{"550 a\x00", "control character 0x00"},
		{"550-a\r\n", "line 2 does not start"},
		{"550 " + strings.Repeat("x", MaxReplyLine-3), "limit 510"},
	}
	for _, c := range bad {
		err := CheckReplyText(c.in)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("CheckReplyText(%q) = %v, want %q", c.in, err, c.msg)
		}
	}
}

func TestStrings(t *testing.T) {
	if s := (ActAddHeader | ActSetSymList).String(); s != "ADDHDRS|SETSYMLIST" {
		t.Error(s)
	}
	if s := (ProtoNoHelo | ProtoNRHeader | ProtoMDS1M | 0x400000).String(); s != "NOHELO|NR_HDR|0x400000|MDS_1M" {
		t.Error(s)
	}
	if s := Protocol(0).String(); s != "0" {
		t.Error(s)
	}
	if s := CmdEOM.String() + " " + RespReplyCode.String() + " " + Code('J').String(); s != "EOM REPLYCODE 'J'" {
		t.Error(s)
	}
	if s := StageEOH.String() + " " + Stage(9).String(); s != "eoh stage9" {
		t.Error(s)
	}
	if s := FamilyInet6.String() + " " + FamilyUnix.String() + " " + Family('x').String(); s != "inet6 unix 'x'" {
		t.Error(s)
	}
	for c := Code(0); c < 128; c++ {
		nr, ns := NoReplyFor(c), NoStepFor(c)
		if (nr == 0) != (ns == 0) || nr&NoReplyMask != nr || ns&NoStepMask != ns {
			t.Errorf("%v: NR %v NO %v", c, nr, ns)
		}
	}
}

// realPackets is a Postfix 3.7 session (docs/protocols/milter.md, "A session on the wire") plus every response,
// the seed corpus of FuzzDecode and the input of the benchmarks.
func realPackets() [][]byte {
	var out [][]byte
	add := func(m Msg) {
		b, err := Encode(nil, m)
		if err != nil {
			panic(err)
		}
		out = append(out, b)
	}
	add(&OptNeg{Version: 6, Actions: 0x1ff, Protocol: 0x1fffff})
	add(&Macro{Cmd: CmdConnect, NameValues: []string{"j", "mx.example", "{daemon_name}", "mx.example", "{daemon_addr}", "127.0.0.1", "v", "Postfix 3.7.11", "_", "localhost [127.0.0.1]"}})
	add(&Connect{Host: "localhost", Family: FamilyInet, Port: 40000, Addr: "127.0.0.1"})
	add(&Macro{Cmd: CmdHelo})
	add(&Helo{Name: "vm"})
	add(&Macro{Cmd: CmdMail, NameValues: []string{"{mail_addr}", "s@example.org", "{mail_host}", "example.org", "{mail_mailer}", "smtp"}})
	add(&Mail{Addr: "<s@example.org>", Args: []string{"SIZE=2000"}})
	add(&Mail{Rcpt: true, Addr: "<r@example.net>"})
	add(&Empty{C: CmdData})
	add(&Header{Name: "From", Value: "<s@example.org>"})
	add(&Empty{C: CmdEOH})
	add(&Body{Chunk: bytes.Repeat([]byte("0123456789abcdefghijklmnopqrstuvwxyz\r\n"), 50)})
	add(&Macro{Cmd: CmdEOM, NameValues: []string{"i", "4XyZ1234"}})
	add(&Empty{C: CmdEOM})
	add(&Empty{C: CmdAbort})
	add(&Unknown{Line: "XFROB"})
	add(&Empty{C: CmdQuit})
	add(&OptNeg{Version: 6, Actions: ActAddHeader | ActSetSymList, Protocol: ProtoNoHelo, Macros: []MacroRequest{{StageConnect, "{client_addr}"}}})
	add(&ReplyCode{Text: "421 4.7.0 class full"})
	add(&ChangeHeader{Insert: true, Name: "X", Value: "y"})
	add(&AddRcpt{Par: true, Addr: "<a>", Args: "NOTIFY=NEVER"})
	add(&ChangeFrom{Addr: "<b>"})
	add(&Quarantine{Reason: "r"})
	add(&Empty{C: RespAccept})
	return out
}

// FuzzDecode feeds a byte stream through the framing and both decoders;
// whatever decodes must encode again and decode to the same message.
func FuzzDecode(f *testing.F) {
	for _, p := range realPackets() {
		f.Add(p)
	}
	f.Add([]byte{0, 0, 0, 0, 'c'})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 'B'})
	f.Fuzz(func(t *testing.T, in []byte) {
		r := bytes.NewReader(in)
		for {
			p, err := ReadPacket(r, 4096, nil)
			if err != nil {
				if err != io.EOF && !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrTooLarge) {
					t.Fatalf("unexpected error class: %v", err)
				}
				return
			}
			for _, response := range []bool{false, true} {
				var m Msg
				if response {
					m, err = DecodeResponse(p)
				} else {
					m, err = DecodeCommand(p)
				}
				if err != nil {
					if !errors.Is(err, ErrMalformed) {
						t.Fatalf("decode error does not wrap ErrMalformed: %v", err)
					}
					continue
				}
				b, err := Encode(nil, m)
				if err != nil {
					t.Fatalf("re-encode %#v: %v", m, err)
				}
				p2, err := ReadPacket(bytes.NewReader(b), len(b), nil)
				if err != nil {
					t.Fatalf("re-read: %v", err)
				}
				m2 := NewCommand(p2.Code)
				if response {
					m2 = NewResponse(p2.Code)
				}
				if err := m2.DecodeData(p2.Data); err != nil {
					t.Fatalf("re-decode %q: %v", b, err)
				}
				if !reflect.DeepEqual(normal(m), normal(m2)) {
					t.Fatalf("round trip: %#v != %#v", m, m2)
				}
			}
		}
	})
}

// normal maps empty and nil slices together for comparison.
func normal(m Msg) Msg {
	switch v := m.(type) {
	case *Body:
		if len(v.Chunk) == 0 {
			return &Body{}
		}
	case *ReplaceBody:
		if len(v.Chunk) == 0 {
			return &ReplaceBody{}
		}
	}
	return m
}

func BenchmarkDecode(b *testing.B) {
	stream := bytes.Join(realPackets()[:17], nil)
	b.SetBytes(int64(len(stream)))
	b.ReportAllocs()
	r := bytes.NewReader(stream)
	buf := make([]byte, 0, 4096)
	for b.Loop() {
		r.Reset(stream)
		for {
			p, err := ReadPacket(r, DefaultMaxData, buf)
			if err != nil {
				break
			}
			if _, err := DecodeCommand(p); err != nil {
				b.Fatal(err)
			}
		}
	}
}

func BenchmarkEncode(b *testing.B) {
	msgs := []Msg{
		&Empty{C: RespContinue},
		&ReplyCode{Text: "421 4.7.0 class full"},
		&AddHeader{Name: "X-Sluice", Value: "checked"},
		&ChangeHeader{Insert: true, Name: "X-First", Value: "1"},
		&AddRcpt{Par: true, Addr: "<a@example.org>", Args: "NOTIFY=NEVER"},
		&Empty{C: RespAccept},
	}
	buf := make([]byte, 0, 1024)
	b.ReportAllocs()
	for b.Loop() {
		buf = buf[:0]
		for _, m := range msgs {
			var err error
			if buf, err = Encode(buf, m); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.SetBytes(int64(len(buf)))
}
