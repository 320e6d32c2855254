package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
)

// HeaderSize is the size of a packet header: the 4-byte length and the
// code byte.
const HeaderSize = 5

// LengthSize is the size of a packet's length, the first part of its
// header. The length counts the code byte and the payload.
const LengthSize = 4

// MaxChunk is the largest body chunk an MTA sends and the size REPLBODY
// chunks are cut to (MILTER_CHUNK_SIZE).
const MaxChunk = 65535

// DefaultMaxData is a sensible cap on a payload: libmilter's largest
// negotiable size (MILTER_MDS_256K). libmilter's default, 65535, is too
// small for a long header: Postfix's header_size_limit is 100 KiB.
const DefaultMaxData = 256*1024 - 1

// Packet is one framed packet.
type Packet struct {
	Code Code // the command or response code byte
	// Data is the payload, without the length and the code.
	Data []byte
}

// ParseLength checks a packet's length, h[:LengthSize], and returns the
// payload length. A zero length (no room for the code byte) is
// ErrMalformed; a payload longer than maxData is ErrTooLarge. Both are
// known before the code byte arrives: a reader that has the length alone
// (the server's, which must not wait for a byte a broken peer may never
// send) calls it then; ParseHeader calls it for the whole header.
func ParseLength(h []byte, maxData int) (int, error) {
	if len(h) < LengthSize {
		return 0, fmt.Errorf("%w: length of %d bytes, want %d", ErrMalformed, len(h), LengthSize)
	}
	n := binary.BigEndian.Uint32(h)
	if n == 0 {
		return 0, fmt.Errorf("%w: zero length", ErrMalformed)
	}
	if uint64(n-1) > uint64(max(maxData, 0)) {
		return 0, fmt.Errorf("%w: payload of %d bytes, cap %d", ErrTooLarge, n-1, maxData)
	}
	return int(n - 1), nil
}

// ParseHeader checks a packet header, h[:HeaderSize], and returns the code
// and the payload length, the length checked by ParseLength. Nothing is
// allocated, so a caller can check the length before allocating the
// payload.
func ParseHeader(h []byte, maxData int) (Code, int, error) {
	if len(h) < HeaderSize {
		return 0, 0, fmt.Errorf("%w: header of %d bytes, want %d", ErrMalformed, len(h), HeaderSize)
	}
	n, err := ParseLength(h, maxData)
	if err != nil {
		return 0, 0, err
	}
	return Code(h[LengthSize]), n, nil
}

// ReadPacket reads one packet from r. The payload goes into buf when it
// fits (the result aliases buf), otherwise into a new slice; either way
// only after the length passed ParseHeader with maxData. At a clean end
// of stream before a packet it returns io.EOF; a stream that ends inside
// a packet is ErrMalformed wrapping io.ErrUnexpectedEOF.
func ReadPacket(r io.Reader, maxData int, buf []byte) (Packet, error) {
	var h [HeaderSize]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return Packet{}, truncated(err)
	}
	code, n, err := ParseHeader(h[:], maxData)
	if err != nil {
		return Packet{}, err
	}
	var data []byte
	if n <= cap(buf) {
		data = buf[:n]
	} else {
		data = make([]byte, n)
	}
	if _, err := io.ReadFull(r, data); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return Packet{}, truncated(err)
	}
	return Packet{Code: code, Data: data}, nil
}

func truncated(err error) error {
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: truncated packet: %w", ErrMalformed, err)
	}
	return err
}

// AppendPacket appends a packet with code and data to dst.
func AppendPacket(dst []byte, code Code, data []byte) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(data)+1))
	dst = append(dst, byte(code))
	return append(dst, data...)
}

// Msg is a decoded packet in either direction: a command, a response or
// a modification. Each type's DecodeData is strict: it rejects missing
// NULs, extra strings and trailing bytes.
type Msg interface {
	// Code is the packet's code.
	Code() Code
	// AppendData appends the payload to dst; ErrInvalid for a value the
	// protocol cannot carry (a NUL inside a string).
	AppendData(dst []byte) ([]byte, error)
	// DecodeData sets the message from a payload. Byte-slice fields alias
	// data; strings are copies.
	DecodeData(data []byte) error
}

// Encode appends m as a whole packet (length, code, payload) to dst. On
// error dst is returned unchanged.
func Encode(dst []byte, m Msg) ([]byte, error) {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0, byte(m.Code()))
	out, err := m.AppendData(dst)
	if err != nil {
		return dst[:start], err
	}
	n := len(out) - start - 4
	if uint64(n) > math.MaxUint32 {
		return dst[:start], fmt.Errorf("%w: payload of %d bytes does not fit a packet", ErrInvalid, n-1)
	}
	binary.BigEndian.PutUint32(out[start:], uint32(n))
	return out, nil
}

// NewResponse returns an empty message of the type that response code c
// decodes to, or nil for a code that is not a response.
func NewResponse(c Code) Msg {
	switch c {
	case CmdOptNeg:
		return new(OptNeg)
	case RespReplyCode:
		return new(ReplyCode)
	case RespAddHeader:
		return new(AddHeader)
	case RespInsHeader:
		return &ChangeHeader{Insert: true}
	case RespChgHeader:
		return new(ChangeHeader)
	case RespAddRcpt:
		return new(AddRcpt)
	case RespAddRcptPar:
		return &AddRcpt{Par: true}
	case RespDelRcpt:
		return new(DelRcpt)
	case RespChgFrom:
		return new(ChangeFrom)
	case RespReplBody:
		return new(ReplaceBody)
	case RespQuarantine:
		return new(Quarantine)
	case RespContinue, RespAccept, RespReject, RespTempfail, RespDiscard, RespShutdown,
		RespSkip, RespProgress, RespConnFail, RespSetSymList:
		return &Empty{C: c}
	}
	return nil
}

// DecodeResponse decodes a packet from a milter. An unknown code is
// ErrMalformed.
func DecodeResponse(p Packet) (Msg, error) {
	m := NewResponse(p.Code)
	if m == nil {
		return nil, fmt.Errorf("%w: unknown response code %v", ErrMalformed, p.Code)
	}
	if err := m.DecodeData(p.Data); err != nil {
		return nil, err
	}
	return m, nil
}
