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
	"strings"
)

// MaxLen is the longest payload the reference accepts.
const MaxLen = 65536

// maxPrefix is how many bytes of the length prefix (before ':') the
// reference keeps; the rest up to ':' is read and thrown away.
const maxPrefix = 16

// ErrBadLength means the length prefix did not hold a number from 0 to
// MaxLen as the reference reads it (see ReadNetstring); the reference
// closes the connection without a reply.
var ErrBadLength = errors.New("socketmap: bad netstring length")

// ErrNoComma means the payload was not followed by ','; the reference
// answers "PERM Netstring missing terminating comma" and goes on.
var ErrNoComma = errors.New("socketmap: netstring missing terminating comma")

// ReadNetstring reads one netstring as the reference does (measured
// against mimedefang-multiplexor 3.3): bytes up to ':' of which the first
// 16 are kept and any further ones thrown away; in those, leading white space,
// an optional sign and at least one digit, anything after the digits
// ignored, the value taken modulo 2^32 as a C int; it must then lie in
// [0, MaxLen]. Then exactly len+1 bytes are read, the last of which must
// be ','. With ErrNoComma the payload is still returned and the stream
// stays in step (len+1 bytes were consumed).
func ReadNetstring(r *bufio.Reader) ([]byte, error) {
	var prefix []byte
	seen := false
	for {
		c, err := r.ReadByte()
		if err != nil {
			if !seen {
				return nil, err // a clean EOF between requests
			}
			return nil, fmt.Errorf("reading netstring length: %w", io.ErrUnexpectedEOF)
		}
		seen = true
		if c == ':' {
			break
		}
		if len(prefix) < maxPrefix {
			prefix = append(prefix, c)
		}
	}
	n, ok := parseLength(prefix)
	if !ok || n < 0 || n > MaxLen {
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

// parseLength reads the kept prefix bytes as the reference does: leading
// white space (as C's isspace), an optional sign, digits (at least one; at most 16 fit, so the
// sum cannot overflow), the rest ignored, and the result cut to 32 bits.
func parseLength(p []byte) (int, bool) {
	i := 0
	for i < len(p) && strings.IndexByte(" \t\n\v\f\r", p[i]) >= 0 {
		i++
	}
	neg := false
	if i < len(p) && (p[i] == '+' || p[i] == '-') {
		neg = p[i] == '-'
		i++
	}
	var v int64
	digits := 0
	for ; i < len(p) && p[i] >= '0' && p[i] <= '9'; i++ {
		v = v*10 + int64(p[i]-'0')
		digits++
	}
	if digits == 0 {
		return 0, false
	}
	if neg {
		v = -v
	}
	return int(int32(v)), true
}

// AppendNetstring appends s as a netstring to b.
func AppendNetstring(b []byte, s string) []byte {
	b = strconv.AppendInt(b, int64(len(s)), 10)
	b = append(b, ':')
	b = append(b, s...)
	return append(b, ',')
}
