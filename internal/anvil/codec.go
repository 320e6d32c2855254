// Package anvil speaks Postfix's anvil(8) protocol: the server that smtpd
// asks for client connection counts and event rates, over a stream socket,
// with plain "name=value" attributes.
//
// The package knows the wire format and the connection rules; what the
// counts are comes from a Handler, written in the protocol's own terms.
package anvil

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"

	"sluice/internal/netserve"
)

// Announcement is what a Postfix >= 3.6 server sends first on every
// connection; clients refuse a server that does not.
const Announcement = "protocol=anvil_protocol\n\n"

// DefaultMaxLine is the default cap on one request line, "name=value\n".
// Postfix caps names and values at 4 x line_length_limit (8 KiB); an anvil
// ident is "service:address" and never comes near this.
const DefaultMaxLine = 1024

// Request names a request kind.
type Request uint8

// The requests, as smtpd and the TLS code send them.
const (
	Unknown      Request = iota
	Connect              // count and rate a new connection
	Disconnect           // end a connection
	Message              // a MAIL FROM
	Recipient            // a RCPT TO (or VRFY)
	NewTLS               // a new (not resumed) TLS session
	NewTLSStatus         // report the new-TLS rate without counting
	Auth                 // an AUTH command
	TLSTrace             // Postfix 3.12: a TLS trace event ("tlstr")
	Lookup               // report every counter, changing nothing
)

var requestNames = map[string]Request{
	"connect":       Connect,
	"disconnect":    Disconnect,
	"message":       Message,
	"recipient":     Recipient,
	"newtls":        NewTLS,
	"newtls_status": NewTLSStatus,
	"auth":          Auth,
	"tlstr":         TLSTrace,
	"lookup":        Lookup,
}

var requestStrings = func() (out [Lookup + 1]string) {
	for name, v := range requestNames {
		out[v] = name
	}
	out[Unknown] = "unknown"
	return out
}()

// String is the request's name on the wire ("connect", "message", ...).
func (r Request) String() string {
	if int(r) < len(requestStrings) {
		return requestStrings[r]
	}
	return "unknown"
}

// ParseRequest returns the Request named name (Unknown if none).
func ParseRequest(name []byte) Request {
	return requestNames[string(name)] // no allocation: the compiler optimises map[string(b)]
}

// ErrProtocol is wrapped by every malformed-input error.
var ErrProtocol = errors.New("anvil: protocol error")

// Decoder reads requests from a client stream.
type Decoder struct {
	r       *bufio.Reader
	maxLine int
	ident   string // the last request's ident: the next is most often the same
}

// NewDecoder returns a Decoder reading r, with lines capped at maxLine
// bytes (DefaultMaxLine if <= 0).
func NewDecoder(r io.Reader, maxLine int) *Decoder {
	if maxLine <= 0 {
		maxLine = DefaultMaxLine
	}
	return &Decoder{r: bufio.NewReaderSize(r, max(maxLine, 16)), maxLine: maxLine}
}

// Msg is one decoded request.
type Msg struct {
	Req Request // which request
	// Name is the request name as sent, kept only when Req is Unknown.
	Name string
	// Ident is the client the request is about (service:address).
	Ident string
}

// Decode reads one request: exactly "request=NAME\nident=IDENT\n\n", in
// that order, as anvil scans it (missing or extra attributes are errors).
// At a clean end of stream between requests it returns io.EOF.
func (d *Decoder) Decode() (Msg, error) {
	var m Msg
	line, err := d.line()
	if err != nil {
		if errors.Is(err, io.EOF) && len(line) == 0 {
			return m, io.EOF
		}
		return m, truncated(err)
	}
	v, err := attr(line, "request")
	if err != nil {
		return m, err
	}
	// The next read may overwrite the buffer: keep an unknown name.
	if m.Req = ParseRequest(v); m.Req == Unknown {
		m.Name = printable(v)
	}
	line, err = d.line()
	if err != nil {
		return m, truncated(err)
	}
	v, err = attr(line, "ident")
	if err != nil {
		return m, err
	}
	if string(v) != d.ident {
		d.ident = string(v)
	}
	m.Ident = d.ident
	line, err = d.line()
	if err != nil {
		return m, truncated(err)
	}
	if len(line) != 0 {
		n := line
		if i := bytes.IndexByte(line, '='); i >= 0 {
			n = line[:i]
		}
		return m, fmt.Errorf("%w: unexpected attribute %q after ident", ErrProtocol, printable(n))
	}
	return m, nil
}

func truncated(err error) error {
	if errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: stream ended inside a request", ErrProtocol)
	}
	return err
}

// line returns the next line without its "\n".
func (d *Decoder) line() ([]byte, error) {
	line, err := d.r.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) || len(line) > d.maxLine {
			return nil, fmt.Errorf("%w: line longer than %d bytes", ErrProtocol, d.maxLine)
		}
		return line, err
	}
	if len(line) > d.maxLine {
		return nil, fmt.Errorf("%w: line longer than %d bytes", ErrProtocol, d.maxLine)
	}
	return line[:len(line)-1], nil
}

func attr(line []byte, want string) ([]byte, error) {
	if len(line) == 0 {
		return nil, fmt.Errorf("%w: missing attribute %q", ErrProtocol, want)
	}
	i := bytes.IndexByte(line, '=')
	if i < 0 {
		return nil, fmt.Errorf("%w: attribute without \"=\": %q", ErrProtocol, printable(line))
	}
	if string(line[:i]) != want {
		return nil, fmt.Errorf("%w: expected attribute %q, got %q", ErrProtocol, want, printable(line[:i]))
	}
	v := line[i+1:]
	if bytes.IndexByte(v, 0) >= 0 {
		return nil, fmt.Errorf("%w: NUL byte in %s value", ErrProtocol, want)
	}
	return v, nil
}

var printable = netserve.Printable

// Reply builds one reply in a reusable buffer.
type Reply struct{ b []byte }

// Reset starts a new reply.
func (r *Reply) Reset() { r.b = r.b[:0] }

// Int appends "name=value\n".
func (r *Reply) Int(name string, v int64) {
	r.b = append(r.b, name...)
	r.b = append(r.b, '=')
	r.b = strconv.AppendInt(r.b, v, 10)
	r.b = append(r.b, '\n')
}

// Bytes ends the reply and returns it.
func (r *Reply) Bytes() []byte {
	r.b = append(r.b, '\n')
	return r.b
}
