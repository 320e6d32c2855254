// Package socketmap is Sendmail's SOCKETMAP protocol as
// mimedefang-multiplexor's -N socket speaks it: netstring requests
// "<len>:<mapname> <key>," on a persistent connection, netstring replies.
package socketmap

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// MaxLen is the longest payload the reference accepts.
const MaxLen = 65536

// maxPrefix is how many bytes the length prefix (digits and ':') may take.
const maxPrefix = 16

// ErrBadLength means the length prefix was not a decimal number from 0 to
// MaxLen followed by ':' within 16 bytes; the reference closes the
// connection without a reply.
var ErrBadLength = errors.New("socketmap: bad netstring length")

// ErrNoComma means the payload was not followed by ','; the reference
// answers "PERM Netstring missing terminating comma" and goes on.
var ErrNoComma = errors.New("socketmap: netstring missing terminating comma")

// ReadNetstring reads one netstring as the reference does: the length up
// to ':' over at most 16 bytes, then exactly len+1 bytes, the last of
// which must be ','. With ErrNoComma the payload is still returned and the
// stream stays in step (len+1 bytes were consumed).
func ReadNetstring(r *bufio.Reader) ([]byte, error) {
	var prefix []byte
	for {
		c, err := r.ReadByte()
		if err != nil {
			if len(prefix) == 0 {
				return nil, err // a clean EOF between requests
			}
			return nil, fmt.Errorf("reading netstring length: %w", io.ErrUnexpectedEOF)
		}
		if c == ':' {
			break
		}
		prefix = append(prefix, c)
		if len(prefix) >= maxPrefix {
			return nil, ErrBadLength
		}
	}
	if len(prefix) == 0 {
		return nil, ErrBadLength
	}
	for _, c := range prefix {
		if c < '0' || c > '9' {
			return nil, ErrBadLength
		}
	}
	n, err := strconv.Atoi(string(prefix))
	if err != nil || n > MaxLen {
		return nil, ErrBadLength
	}
	buf := make([]byte, n+1)
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, fmt.Errorf("reading netstring payload: %w", io.ErrUnexpectedEOF)
	}
	if buf[n] != ',' {
		return buf[:n], ErrNoComma
	}
	return buf[:n], nil
}

// AppendNetstring appends s as a netstring to b.
func AppendNetstring(b []byte, s string) []byte {
	b = strconv.AppendInt(b, int64(len(s)), 10)
	b = append(b, ':')
	b = append(b, s...)
	return append(b, ',')
}
