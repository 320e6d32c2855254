package policy

import (
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
	r     io.Reader
	lim   Limits
	buf   []byte // what was read; the request being decoded starts at head
	other []byte // the buffer the decoder turns to, cleared
	// buf[head:tail] was read and is not part of a decoded request;
	// buf[last:head] is the request decoded last.
	head, tail, last int
	marks            []mark // relative to head
	// Unknown counts attributes ignored because sluice does not know them.
	Unknown int
}

// readSize is a decoder's first buffer: a request from Postfix is about
// 1 KiB.
const readSize = 4096

// NewDecoder returns a Decoder reading r within lim (zero fields: defaults).
func NewDecoder(r io.Reader, lim Limits) *Decoder {
	lim.defaults()
	return &Decoder{r: r, lim: lim, buf: make([]byte, readSize)}
}

// Decode reads one request into req (which it resets). Attributes may come
// in any order; a repeated one keeps its last value; unknown ones are
// ignored. A request without request=smtpd_access_policy is an error. At
// a clean end of stream between requests it returns io.EOF.
//
// The request is read into the decoder's buffer and parsed where it lies:
// its strings are views of that buffer, not copies, valid until the next
// Decode. The next Decode clears the request's bytes, and never reuses
// them while it decides the request after: a string kept by mistake reads
// as NUL bytes, not as a plausible value of another request. (It goes on
// in the same buffer when more requests came with this one, and turns to
// its other buffer when nothing did or this one is full.) A caller that
// keeps a value longer copies it (strings.Clone, Request.Clone). Decoding
// allocates nothing once the buffers have grown to the connection's
// largest request, and costs what the request's bytes cost.
func (d *Decoder) Decode(req *Request) error {
	req.Reset()
	d.forget()
	d.marks = d.marks[:0]
	n, err := d.scan()
	if err != nil {
		return err
	}
	b := d.buf[d.head : d.head+n]
	d.last, d.head = d.head, d.head+n
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return fmt.Errorf("%w: NUL byte in a request", ErrProtocol)
	}
	// The whole request seen as one string, without a copy; every value is
	// a slice of it, valid until the next Decode.
	text := unsafe.String(unsafe.SliceData(b), n)
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

// forget clears the request decoded last. When nothing came after it, the
// next request is read into the other buffer, so that this one stays
// cleared while the next is decided.
func (d *Decoder) forget() {
	clear(d.buf[d.last:d.head])
	d.last = d.head
	if d.head < d.tail {
		return
	}
	if d.other == nil {
		d.other = make([]byte, readSize)
	}
	d.buf, d.other = d.other, d.buf
	d.head, d.tail, d.last = 0, 0, 0
}

// scan finds the request's lines, reading until its empty line, and marks
// its attributes; it returns the request's length (to its empty line
// included). Offsets are relative to d.head, which a fill may move.
func (d *Decoder) scan() (int, error) {
	start, pos := 0, 0 // the line being looked at, how far it was searched
	var rerr error
	for {
		i := bytes.IndexByte(d.buf[d.head+pos:d.tail], '\n')
		if i < 0 {
			if d.tail-d.head-start > d.lim.MaxLine {
				return 0, fmt.Errorf("%w: line longer than %d bytes", ErrProtocol, d.lim.MaxLine)
			}
			if rerr != nil {
				if !errors.Is(rerr, io.EOF) {
					return 0, rerr
				}
				if d.tail == d.head {
					return 0, io.EOF
				}
				return 0, fmt.Errorf("%w: stream ended inside a request", ErrProtocol)
			}
			pos = d.tail - d.head
			rerr = d.fill()
			continue
		}
		end := pos + i
		line := d.buf[d.head+start : d.head+end]
		if len(line) > d.lim.MaxLine {
			return 0, fmt.Errorf("%w: line longer than %d bytes", ErrProtocol, d.lim.MaxLine)
		}
		if end+1 > d.lim.MaxRequest {
			return 0, fmt.Errorf("%w: request longer than %d bytes", ErrProtocol, d.lim.MaxRequest)
		}
		if len(line) == 0 {
			return end + 1, nil
		}
		if len(d.marks) == d.lim.MaxAttrs {
			return 0, fmt.Errorf("%w: more than %d attributes", ErrProtocol, d.lim.MaxAttrs)
		}
		eq := bytes.IndexByte(line, '=')
		if eq <= 0 {
			if eq == 0 {
				return 0, fmt.Errorf("%w: attribute with an empty name", ErrProtocol)
			}
			return 0, fmt.Errorf("%w: attribute without \"=\": %q", ErrProtocol, printable(line))
		}
		d.marks = append(d.marks, mark{start: start, eq: start + eq, end: end})
		start, pos = end+1, end+1
	}
}

// fill reads into the free end of the buffer. A full buffer first moves
// the request being read to the start of the other one, grown when the
// request alone filled it, up to what the limits let a request and one
// line take; the buffer left is cleared.
func (d *Decoder) fill() error {
	if d.tail == len(d.buf) {
		size := len(d.buf)
		if d.head == 0 {
			most := d.lim.MaxRequest + d.lim.MaxLine + 2
			if size >= most { // the checks in scan fire first: a guard
				return fmt.Errorf("%w: request longer than %d bytes", ErrProtocol, d.lim.MaxRequest)
			}
			size = min(2*size, most)
		}
		next := d.other
		if len(next) < size {
			next = make([]byte, size)
		}
		n := copy(next, d.buf[d.head:d.tail])
		clear(d.buf[:d.tail])
		d.buf, d.other = next, d.buf
		d.head, d.tail, d.last = 0, n, 0
	}
	// As bufio does, a reader that returns nothing and no error is asked
	// again a few times before it counts as stuck.
	for range 100 {
		n, err := d.r.Read(d.buf[d.tail:])
		d.tail += n
		if n > 0 {
			return nil // an error comes again at the next read
		}
		if err != nil {
			return err
		}
	}
	return io.ErrNoProgress
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
