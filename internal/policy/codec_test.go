package policy

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// A request as Postfix 3.7 sends it at END-OF-MESSAGE.
const eomRequest = `request=smtpd_access_policy
protocol_state=END-OF-MESSAGE
protocol_name=ESMTP
client_address=192.0.2.10
client_name=mx.example.net
client_port=41234
reverse_client_name=mx.example.net
server_address=192.0.2.1
server_port=25
helo_name=mx.example.net
sender=alice@example.net
recipient=bob@example.org
recipient_count=1
queue_id=4Xyz1234
instance=1a2b.6543.abc.0
size=12345
etrn_domain=
stress=
sasl_method=
sasl_username=
sasl_sender=
ccert_subject=
ccert_issuer=
ccert_fingerprint=
ccert_pubkey_fingerprint=
encryption_protocol=TLSv1.3
encryption_cipher=TLS_AES_256_GCM_SHA384
encryption_keysize=256
policy_context=
compatibility_level=3.6
mail_version=3.7.11
some_future_attribute=ignored

`

func TestDecodeFull(t *testing.T) {
	d := NewDecoder(strings.NewReader(eomRequest+eomRequest), Limits{})
	var r Request
	for i := range 2 {
		if err := d.Decode(&r); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if r.ProtocolState != "END-OF-MESSAGE" || r.Sender != "alice@example.net" || r.RecipientCount != 1 ||
			r.Size != 12345 || r.EncryptionKeysize != 256 || r.ClientPort != "41234" || r.MailVersion != "3.7.11" || r.Instance != "1a2b.6543.abc.0" {
			t.Fatalf("request %d: %+v", i, r)
		}
	}
	if d.Unknown != 2 {
		t.Errorf("unknown attributes %d, want 2", d.Unknown)
	}
	if err := d.Decode(&r); !errors.Is(err, io.EOF) {
		t.Fatalf("end: %v", err)
	}
}

// TestDecodeValuesLastUntilNextDecode: a request's strings are views of
// the decoder's buffer: the next Decode clears it, so a value kept by
// mistake reads as NUL bytes, never as the next request's; Clone keeps a
// request whole.
func TestDecodeValuesLastUntilNextDecode(t *testing.T) {
	d := NewDecoder(strings.NewReader(eomRequest+strings.Replace(eomRequest, "alice@example.net", "carol@example.com", 1)), Limits{})
	var r Request
	if err := d.Decode(&r); err != nil {
		t.Fatal(err)
	}
	kept, view := r.Clone(), r.Sender
	if err := d.Decode(&r); err != nil {
		t.Fatal(err)
	}
	if r.Sender != "carol@example.com" {
		t.Fatalf("second request's sender %q", r.Sender)
	}
	if kept.Sender != "alice@example.net" || kept.Instance != "1a2b.6543.abc.0" || kept.Size != 12345 {
		t.Errorf("the clone changed with the next Decode: %+v", kept)
	}
	if view != strings.Repeat("\x00", len("alice@example.net")) {
		t.Errorf("a value kept past the next Decode reads %q, want NUL bytes", view)
	}
}

// TestDecodeAllocatesNothing: once its buffer has grown, decoding a
// request allocates nothing.
func TestDecodeAllocatesNothing(t *testing.T) {
	r := strings.NewReader(eomRequest)
	d := NewDecoder(r, Limits{})
	var req Request
	decode := func() {
		r.Reset(eomRequest)
		if err := d.Decode(&req); err != nil {
			t.Fatal(err)
		}
	}
	decode()
	if n := testing.AllocsPerRun(100, decode); n != 0 {
		t.Fatalf("%v allocations per request, want 0", n)
	}
}

// TestDecodeInPieces: requests that come a byte at a time, or several in
// one read, or larger than the first buffer, decode the same.
func TestDecodeInPieces(t *testing.T) {
	long := strings.Replace(eomRequest, "alice@example.net", strings.Repeat("a", 10000)+"@example.net", 1)
	in := eomRequest + long + eomRequest
	for name, r := range map[string]io.Reader{
		"one byte a read": iotest.OneByteReader(strings.NewReader(in)),
		"all in one read": strings.NewReader(in),
		"half a request":  iotest.HalfReader(strings.NewReader(in)),
	} {
		d := NewDecoder(r, Limits{})
		var req Request
		for i, want := range []string{"alice@example.net", strings.Repeat("a", 10000) + "@example.net", "alice@example.net"} {
			if err := d.Decode(&req); err != nil {
				t.Fatalf("%s: request %d: %v", name, i, err)
			}
			if req.Sender != want || req.MailVersion != "3.7.11" || req.Size != 12345 {
				t.Fatalf("%s: request %d: sender of %d bytes, %+v", name, i, len(req.Sender), req.MailVersion)
			}
		}
		if err := d.Decode(&req); !errors.Is(err, io.EOF) {
			t.Fatalf("%s: after the last request: %v, want io.EOF", name, err)
		}
	}
}

// stutterReader returns nothing, and no error, every other call.
type stutterReader struct {
	r    io.Reader
	skip bool
}

func (s *stutterReader) Read(p []byte) (int, error) {
	if s.skip = !s.skip; s.skip {
		return 0, nil
	}
	return s.r.Read(p)
}

// TestDecodePipelinedAfterLarge: many requests that come together, after
// one that grew the buffer, decode in order; each one's strings read as
// NUL bytes once the next is decoded; a reader that sometimes returns
// nothing without an error is asked again.
func TestDecodePipelinedAfterLarge(t *testing.T) {
	long := strings.Replace(eomRequest, "alice@example.net", strings.Repeat("b", 12000)+"@example.net", 1)
	var in strings.Builder
	in.WriteString(long)
	for i := range 300 {
		in.WriteString(strings.Replace(eomRequest, "alice@example.net", fmt.Sprintf("u%d@example.net", i), 1))
	}
	d := NewDecoder(&stutterReader{r: strings.NewReader(in.String())}, Limits{})
	var req Request
	if err := d.Decode(&req); err != nil || len(req.Sender) != 12012 {
		t.Fatalf("the large request: %v, sender of %d bytes", err, len(req.Sender))
	}
	for i := range 300 {
		kept := req.Sender
		if err := d.Decode(&req); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if want := fmt.Sprintf("u%d@example.net", i); req.Sender != want {
			t.Fatalf("request %d: sender %q, want %q", i, req.Sender, want)
		}
		if kept != strings.Repeat("\x00", len(kept)) {
			t.Fatalf("request %d: the sender before reads %.20q, want NUL bytes", i, kept)
		}
	}
	if err := d.Decode(&req); !errors.Is(err, io.EOF) {
		t.Fatalf("after the last request: %v, want io.EOF", err)
	}
}

func TestDecodeAnyOrderLastWins(t *testing.T) {
	in := "sender=a@x\nrequest=smtpd_access_policy\nsender=b@x\nrecipient_count=\n\n"
	var r Request
	if err := NewDecoder(strings.NewReader(in), Limits{}).Decode(&r); err != nil {
		t.Fatal(err)
	}
	if r.Sender != "b@x" || r.RecipientCount != 0 {
		t.Fatalf("%+v", r)
	}
}

func TestDecodeMalformed(t *testing.T) {
	lim := Limits{MaxLine: 300, MaxAttrs: 50, MaxRequest: 2000}
	many := strings.Repeat("x=y\n", 51)
	cases := []struct{ in, want string }{
		{"sender=a\n\n", "no request= attribute"},
		{"request=other\n\n", `unsupported request "other"`},
		{"request=smtpd_access_policy\ngarbage\n\n", `attribute without "="`},
		{"request=smtpd_access_policy\n=x\n\n", "attribute with an empty name"},
		{"request=smtpd_access_policy\nsender=" + strings.Repeat("a", 400) + "\n\n", "line longer than 300 bytes"},
		{"request=smtpd_access_policy\n" + many + "\n", "more than 50 attributes"},
		{"request=smtpd_access_policy\n" + strings.Repeat("sender="+strings.Repeat("a", 200)+"\n", 15) + "\n", "request longer than 2000 bytes"},
		{"request=smtpd_access_policy\nsize=12x\n\n", `size="12x": not a non-negative number`},
		{"request=smtpd_access_policy\nrecipient_count=-1\n\n", "not a non-negative number"},
		{"request=smtpd_access_policy\nsender=a\x00b\n\n", "NUL byte"},
		{"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\n\n", `attribute without "="`},
		{"request=smtpd_access_policy\nsender=a\n", "stream ended inside a request"},
		{"request=smtpd_acc", "stream ended inside a request"},
	}
	for _, c := range cases {
		var r Request
		err := NewDecoder(strings.NewReader(c.in), lim).Decode(&r)
		if err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, ErrProtocol) {
			t.Errorf("Decode(%.40q) = %v, want %q", c.in, err, c.want)
		}
	}
}

func TestAppendReply(t *testing.T) {
	if got := string(AppendReply(nil, "DUNNO")); got != "action=DUNNO\n\n" {
		t.Fatalf("%q", got)
	}
	if got := string(AppendReply(nil, "450 a\nb\rc")); got != "action=450 a b c\n\n" {
		t.Fatalf("%q", got)
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte(eomRequest))
	f.Add([]byte("request=smtpd_access_policy\nprotocol_state=RCPT\n\nrequest=smtpd_access_policy\n\n"))
	f.Add([]byte("sender=\nrequest=x\n\n\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		d := NewDecoder(strings.NewReader(string(in)), Limits{MaxLine: 256, MaxAttrs: 40, MaxRequest: 1024})
		var r Request
		for range 50 {
			if err := d.Decode(&r); err != nil {
				return
			}
			if len(r.Sender) > 256 || len(r.ClientAddress) > 256 {
				t.Fatalf("value over the line cap")
			}
		}
	})
}

// BenchmarkDecode is the cost of parsing one full END-OF-MESSAGE request.
func BenchmarkDecode(b *testing.B) {
	r := strings.NewReader("")
	d := NewDecoder(r, Limits{})
	var req Request
	b.ReportAllocs()
	b.SetBytes(int64(len(eomRequest)))
	for b.Loop() {
		r.Reset(eomRequest)
		if err := d.Decode(&req); err != nil {
			b.Fatal(err)
		}
	}
}
