package escalate

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// The helper's protocol, over a unix stream socket: one request a line,
// one answer a line.
//
//	add 192.0.2.7 600\n     drop the address's connections for 600 seconds
//	ok\n                    done
//	error TEXT\n            not done, and why
//
// A line is at most MaxLine bytes with its newline; an address is an
// IPv4 or IPv6 address without zone, the seconds a decimal from 1 to
// MaxSeconds.

// MaxLine bounds a request or answer line, its newline included.
const MaxLine = 128

// MaxSeconds bounds a request's duration (a day); the helper caps it
// lower with its own maximum.
const MaxSeconds = 86400

// Request asks the helper to drop Addr's connections for For.
type Request struct {
	Addr netip.Addr
	For  time.Duration
}

// ErrLine is the error of a line that is not a request.
var ErrLine = errors.New("not a request")

// Format returns r as its line, newline included.
func (r Request) Format() string {
	return "add " + r.Addr.String() + " " + strconv.FormatInt(int64(r.For/time.Second), 10) + "\n"
}

// ParseRequest parses one request line (with or without its newline).
func ParseRequest(line string) (Request, error) {
	if len(line) > MaxLine {
		return Request{}, fmt.Errorf("%w: longer than %d bytes", ErrLine, MaxLine)
	}
	line = strings.TrimSuffix(line, "\n")
	f := strings.Split(line, " ")
	if len(f) != 3 || f[0] != "add" {
		return Request{}, fmt.Errorf("%w: want \"add ADDRESS SECONDS\"", ErrLine)
	}
	addr, err := netip.ParseAddr(f[1])
	if err != nil || addr.Zone() != "" {
		return Request{}, fmt.Errorf("%w: %q is not an IP address", ErrLine, f[1])
	}
	secs, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil || secs < 1 || secs > MaxSeconds || f[2][0] == '+' {
		return Request{}, fmt.Errorf("%w: %q is not a number of seconds from 1 to %d", ErrLine, f[2], MaxSeconds)
	}
	return Request{Addr: addr.Unmap(), For: time.Duration(secs) * time.Second}, nil
}

// Answer returns the answer line to a request: "ok" for a nil err, else
// "error" and err's text on one line, bounded to MaxLine.
func Answer(err error) string {
	if err == nil {
		return "ok\n"
	}
	text := strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return ' '
		}
		return r
	}, err.Error())
	line := "error " + text
	if len(line) > MaxLine-1 {
		line = line[:MaxLine-1]
	}
	return line + "\n"
}

// ParseAnswer reads an answer line: nil for "ok", the helper's error
// for "error TEXT", and an error for anything else.
func ParseAnswer(line string) error {
	line = strings.TrimSuffix(line, "\n")
	switch {
	case len(line) >= MaxLine:
		return fmt.Errorf("helper: an answer longer than %d bytes", MaxLine)
	case line == "ok":
		return nil
	case strings.HasPrefix(line, "error "):
		return fmt.Errorf("helper: %s", line[len("error "):])
	}
	return fmt.Errorf("helper: answered %q, neither ok nor error", line)
}
