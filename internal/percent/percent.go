// Package percent is mimedefang-multiplexor's percent-encoding, as the
// multiplexor, md-mx-ctrl and MIMEDefang's workers use it for the words
// of a request line and for status tags
// (docs/protocols/mimedefang-multiplexor.md, "Percent-encoding"): bytes up
// to space, from DEL up, and % \ ' " are written %XX (upper-case hex);
// decoding turns %XX in either case into its byte and leaves any other %
// alone. The pool (status tags, socket-map lookups) and muxctl (md-mx-ctrl)
// both use it.
package percent

import "strings"

// NeedsEncoding reports whether Encode writes c as %XX.
func NeedsEncoding(c byte) bool {
	return c <= ' ' || c >= 0x7f || c == '%' || c == '\\' || c == '\'' || c == '"'
}

// Encode writes every byte of s that NeedsEncoding as %XX.
func Encode(s string) string {
	i := 0
	for i < len(s) && !NeedsEncoding(s[i]) {
		i++
	}
	if i == len(s) {
		return s
	}
	b := make([]byte, 0, len(s)+16)
	b = append(b, s[:i]...)
	for ; i < len(s); i++ {
		b = AppendByte(b, s[i])
	}
	return string(b)
}

// AppendByte appends c to b, as %XX when it NeedsEncoding.
func AppendByte(b []byte, c byte) []byte {
	const hexdig = "0123456789ABCDEF"
	if NeedsEncoding(c) {
		return append(b, '%', hexdig[c>>4], hexdig[c&15])
	}
	return append(b, c)
}

// Decode turns each %XX (either case) of s into its byte; a % not
// followed by two hex digits stays as it is.
func Decode(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]) {
			b = append(b, unhex(s[i+1])<<4|unhex(s[i+2]))
			i += 2
			continue
		}
		b = append(b, s[i])
	}
	return string(b)
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c >= 'a':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}
