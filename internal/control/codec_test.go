package control

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestDecodeRequest(t *testing.T) {
	req, err := DecodeRequest([]byte(`{"command":"key.show","args":{"rule":"out"},"attrs":{"sender":"a@b.example"}}`))
	if err != nil || req.Command != "key.show" || req.Args["rule"] != "out" || req.Attrs["sender"] != "a@b.example" {
		t.Fatalf("DecodeRequest = %+v, %v", req, err)
	}
}

// TestDecodeRequestMalformed: every malformed request is an error
// wrapping ErrProtocol, never a panic or a partial request.
func TestDecodeRequestMalformed(t *testing.T) {
	many := func(n int) string {
		var b strings.Builder
		b.WriteString(`{"command":"x","args":{`)
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(`"a` + strings.Repeat("b", i%50) + string(rune('a'+i%26)) + string(rune('a'+i/26%26)) + `":""`)
		}
		return b.String() + "}}"
	}
	for name, in := range map[string]string{
		"empty":            ``,
		"not JSON":         `key show`,
		"array":            `["key.show"]`,
		"no command":       `{"args":{}}`,
		"empty command":    `{"command":""}`,
		"command case":     `{"command":"Key.show"}`,
		"command space":    `{"command":"key show"}`,
		"command too long": `{"command":"` + strings.Repeat("a", 33) + `"}`,
		"unknown field":    `{"command":"key.show","who":"me"}`,
		"args not strings": `{"command":"key.show","args":{"n":1}}`,
		"empty arg name":   `{"command":"key.show","args":{"":"x"}}`,
		"long arg name":    `{"command":"key.show","args":{"` + strings.Repeat("a", 65) + `":"x"}}`,
		"long value":       `{"command":"key.show","attrs":{"sender":"` + strings.Repeat("a", 4097) + `"}}`,
		"too many args":    many(33),
		"two values":       `{"command":"a"}{"command":"b"}`,
		"trailing garbage": `{"command":"a"} x`,
		"not UTF-8":        "{\"command\":\"a\",\"args\":{\"k\":\"\xff\"}}",
		"truncated":        `{"command":"key.show","args":{"rule":"out"`,
	} {
		if req, err := DecodeRequest([]byte(in)); !errors.Is(err, ErrProtocol) {
			t.Errorf("%s: DecodeRequest(%.40q) = %+v, %v; want ErrProtocol", name, in, req, err)
		}
	}
}

// TestReadRequestLines: the line cap holds before decoding; a line cut by
// the end of input is refused; end of input between lines is io.EOF; CRLF
// is accepted.
func TestReadRequestLines(t *testing.T) {
	r := bufio.NewReaderSize(strings.NewReader(`{"command":"a"}`+"\r\n"+`{"command":"b"}`+"\n"), 16)
	for _, want := range []string{"a", "b"} {
		req, err := ReadRequest(r, 100)
		if err != nil || req.Command != want {
			t.Fatalf("ReadRequest = %+v, %v; want %s", req, err, want)
		}
	}
	if _, err := ReadRequest(r, 100); !errors.Is(err, io.EOF) {
		t.Fatalf("at the end: %v; want io.EOF", err)
	}
	long := `{"command":"a","args":{"k":"` + strings.Repeat("x", 200) + `"}}` + "\n"
	if _, err := ReadRequest(bufio.NewReaderSize(strings.NewReader(long), 16), 100); !errors.Is(err, ErrProtocol) {
		t.Fatalf("a line over the cap: %v; want ErrProtocol", err)
	}
	if _, err := ReadRequest(bufio.NewReader(strings.NewReader(`{"command":"a"}`)), 100); !errors.Is(err, ErrProtocol) {
		t.Fatalf("a line without its newline: %v; want ErrProtocol", err)
	}
}

func TestRequestRoundTrip(t *testing.T) {
	in := Request{Command: "exempt.add", Args: map[string]string{"rule": "out", "key": "sender=a@b.example", "for": "1m"}}
	var b bytes.Buffer
	if err := EncodeRequest(&b, in); err != nil {
		t.Fatal(err)
	}
	out, err := ReadRequest(bufio.NewReader(&b), 0)
	if err != nil || out.Command != in.Command || out.Args["for"] != "1m" {
		t.Fatalf("round trip = %+v, %v", out, err)
	}
}

// FuzzDecodeRequest: no input panics; whatever is accepted is a valid
// request that encodes and decodes back the same.
func FuzzDecodeRequest(f *testing.F) {
	for _, s := range []string{
		`{"command":"key.show","args":{"rule":"out","key":"sender=a@b.example"}}`,
		`{"command":"explain","attrs":{"sender":"a@b.example","client_address":"192.0.2.1","protocol_state":"RCPT"}}`,
		`{"command":"exempt.add","args":{"rule":"out","key":"sender=a@b.example","raise":"5","for":"1m"}}`,
		`{"command":"throttle.suspend","args":{"key":"mx.example","for":"30s"}}`,
		`{"command":"a"}{"command":"b"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		req, err := DecodeRequest(in)
		if err != nil {
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("error not wrapping ErrProtocol: %v", err)
			}
			return
		}
		var b bytes.Buffer
		if err := EncodeRequest(&b, req); err != nil {
			t.Fatal(err)
		}
		again, err := ReadRequest(bufio.NewReader(&b), MaxResponse)
		if err != nil || again.Command != req.Command || len(again.Args) != len(req.Args) || len(again.Attrs) != len(req.Attrs) {
			t.Fatalf("accepted %q, but it does not survive the wire: %+v, %v", in, again, err)
		}
	})
}
