package policy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unsafe"

	"sluice/internal/netserve"
)

// Limits on one request. Postfix caps each name and value at
// 4 x line_length_limit (8 KiB by default) and sends about 30 attributes.
const (
	DefaultMaxLine    = 16 << 10  // one "name=value" line
	DefaultMaxAttrs   = 128       // attributes per request
	DefaultMaxRequest = 128 << 10 // bytes per request
)

// ErrProtocol is wrapped by every malformed-input error.
var ErrProtocol = errors.New("policy: protocol error")

// Limits bound what a Decoder accepts.
type Limits struct {
	MaxLine    int // bytes of one "name=value" line (default DefaultMaxLine)
	MaxAttrs   int // attributes of one request (default DefaultMaxAttrs)
	MaxRequest int // bytes of one request (default DefaultMaxRequest)
}

func (l *Limits) defaults() {
	if l.MaxLine <= 0 {
		l.MaxLine = DefaultMaxLine
	}
	if l.MaxAttrs <= 0 {
		l.MaxAttrs = DefaultMaxAttrs
	}
	if l.MaxRequest <= 0 {
		l.MaxRequest = DefaultMaxRequest
	}
}

// Decoder reads policy requests from a stream.
type Decoder struct {
	r     *bufio.Reader
	lim   Limits
	buf   []byte // the request's attributes, back to back
	prev  []byte // the buffer of the request before, cleared
	marks []mark
	// Unknown counts attributes ignored because sluice does not know them.
	Unknown int
}

// NewDecoder returns a Decoder reading r within lim (zero fields: defaults).
func NewDecoder(r io.Reader, lim Limits) *Decoder {
	lim.defaults()
	return &Decoder{r: bufio.NewReaderSize(r, 4096), lim: lim}
}

// Decode reads one request into req (which it resets). Attributes may come
// in any order; a repeated one keeps its last value; unknown ones are
// ignored. A request without request=smtpd_access_policy is an error. At
// a clean end of stream between requests it returns io.EOF.
//
// The request's strings are views of the decoder's buffer, not copies:
// they are valid until the next Decode. The decoder takes turns between
// two buffers and clears the one it leaves, so that a string kept by
// mistake reads as NUL bytes while the next request is decided, not as
// its plausible value. A caller that keeps a value longer copies it
// (strings.Clone, Request.Clone). Decoding allocates nothing once the
// buffers have grown to the connection's largest request.
func (d *Decoder) Decode(req *Request) error {
	req.Reset()
	clear(d.buf)
	d.buf, d.prev = d.prev[:0], d.buf
	d.marks = d.marks[:0]
	attrs := 0
	for {
		line, err := d.line()
		if err != nil {
			if errors.Is(err, io.EOF) {
				if attrs == 0 && len(line) == 0 {
					return io.EOF
				}
				return fmt.Errorf("%w: stream ended inside a request", ErrProtocol)
			}
			return err
		}
		if len(d.buf)+len(line)+1 > d.lim.MaxRequest {
			return fmt.Errorf("%w: request longer than %d bytes", ErrProtocol, d.lim.MaxRequest)
		}
		if len(line) == 0 {
			break
		}
		if attrs++; attrs > d.lim.MaxAttrs {
			return fmt.Errorf("%w: more than %d attributes", ErrProtocol, d.lim.MaxAttrs)
		}
		i := bytes.IndexByte(line, '=')
		if i <= 0 {
			if i == 0 {
				return fmt.Errorf("%w: attribute with an empty name", ErrProtocol)
			}
			return fmt.Errorf("%w: attribute without \"=\": %q", ErrProtocol, printable(line))
		}
		start := len(d.buf)
		d.buf = append(d.buf, line...)
		d.marks = append(d.marks, mark{start: start, eq: start + i, end: len(d.buf)})
	}
	if i := bytes.IndexByte(d.buf, 0); i >= 0 {
		return fmt.Errorf("%w: NUL byte in a request", ErrProtocol)
	}
	// The whole request seen as one string, without a copy; every value is
	// a slice of it, valid until the next Decode.
	text := unsafe.String(unsafe.SliceData(d.buf), len(d.buf))
	for _, m := range d.marks {
		name, value := text[m.start:m.eq], text[m.eq+1:m.end]
		if p := req.field(name); p != nil {
			*p = value
		} else if p := req.number(name); p != nil {
			v, err := parseNumber(value)
			if err != nil {
				return fmt.Errorf("%w: %s=%q: %v", ErrProtocol, name, printable([]byte(value)), err)
			}
			*p = v
		} else {
			d.Unknown++
		}
	}
	if req.Request == "" {
		return fmt.Errorf("%w: no request= attribute", ErrProtocol)
	}
	if req.Request != "smtpd_access_policy" {
		return fmt.Errorf("%w: unsupported request %q", ErrProtocol, printable([]byte(req.Request)))
	}
	return nil
}

// mark locates one attribute in Decoder.buf.
type mark struct{ start, eq, end int }

// parseNumber parses a decimal count; empty means 0, as Postfix leaves
// unavailable numbers.
func parseNumber(b string) (int64, error) {
	if len(b) == 0 {
		return 0, nil
	}
	v, err := strconv.ParseInt(b, 10, 64)
	if err != nil || v < 0 {
		return 0, errors.New("not a non-negative number")
	}
	return v, nil
}

// line returns the next line without its "\n".
func (d *Decoder) line() ([]byte, error) {
	line, err := d.r.ReadSlice('\n')
	for errors.Is(err, bufio.ErrBufferFull) {
		// A line longer than the buffer: collect it up to the cap.
		buf := append([]byte(nil), line...)
		for errors.Is(err, bufio.ErrBufferFull) {
			if len(buf) > d.lim.MaxLine {
				return nil, fmt.Errorf("%w: line longer than %d bytes", ErrProtocol, d.lim.MaxLine)
			}
			line, err = d.r.ReadSlice('\n')
			buf = append(buf, line...)
		}
		line = buf
	}
	if err != nil {
		return line, err
	}
	if len(line) > d.lim.MaxLine+1 {
		return nil, fmt.Errorf("%w: line longer than %d bytes", ErrProtocol, d.lim.MaxLine)
	}
	return line[:len(line)-1], nil
}

var printable = netserve.Printable

// AppendReply appends "action=ACTION\n\n" to b. Newlines in the action are
// replaced with spaces: a reply is one line.
func AppendReply(b []byte, action string) []byte {
	b = append(b, "action="...)
	if strings.ContainsAny(action, "\r\n\x00") {
		action = strings.Map(func(r rune) rune {
			if r == '\r' || r == '\n' || r == 0 {
				return ' '
			}
			return r
		}, action)
	}
	b = append(b, action...)
	return append(b, '\n', '\n')
}
