// Package throttle speaks sluice's outbound throttle protocol: a sender
// asks for a send slot for a key and is told when the slot is its own, or
// to defer; it keeps the connection open while it sends, and closing it
// ends the send.
//
//	client: ACQUIRE <key>\n
//	server: OK <at> [<latest>]\n        (send at <at>, not before; if it
//	                                    cannot start by <latest>, give the
//	                                    slot up and ask again; both are
//	                                    Unix nanoseconds)
//	        DEFER <reason>\n            (do not send now; try later)
//	        ERR <reason>\n              (malformed request)
//	server: DEFER <reason>\n            (after OK, at any time until the
//	                                    result: the slot is taken back, the
//	                                    key was suspended; a sender that has
//	                                    not sent yet defers)
//	client: DONE\n                      (the send happened and ended)
//	        or REPORT <n>\n and n lines (the send happened; its result:
//	           <kind><text>\n           r h s K Z D as in qmail-remote's
//	                                    report, or x<status> <output's end>)
//	        or close                    (gave up: an unused slot is given back)
//	server: VERDICT <flags>\n           (after REPORT: one flag per line, "."
//	                                    keep, "T" report this permanent
//	                                    failure as temporary: a ban did it)
//
// One request per connection. Keys are 1 to 255 printable ASCII bytes
// without spaces (a host name, an address, a relay's name).
package throttle

import (
	"bufio"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"sluice/internal/netserve"
)

// MaxKey is the longest key accepted.
const MaxKey = 255

// maxLine caps a protocol line.
const maxLine = 512

// ErrProtocol is wrapped by every malformed-input error.
var ErrProtocol = errors.New("throttle: protocol error")

// CheckKey reports what is wrong with a key, if anything.
func CheckKey(key string) error {
	if key == "" || len(key) > MaxKey {
		return fmt.Errorf("%w: key must be 1 to %d bytes", ErrProtocol, MaxKey)
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c <= ' ' || c > '~' {
			return fmt.Errorf("%w: key has a space or non-printable byte at %d", ErrProtocol, i)
		}
	}
	return nil
}

// readLine reads one line of at most maxLine bytes, without "\n".
func readLine(r *bufio.Reader) (string, error) {
	line, err := r.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) || len(line) > maxLine {
		return "", fmt.Errorf("%w: line longer than %d bytes", ErrProtocol, maxLine)
	}
	if err != nil {
		if len(line) > 0 {
			return "", fmt.Errorf("%w: line without newline", ErrProtocol)
		}
		return "", err
	}
	return strings.TrimSuffix(string(line[:len(line)-1]), "\r"), nil
}

// ParseRequest parses an "ACQUIRE <key>" line.
func ParseRequest(line string) (string, error) {
	verb, key, ok := strings.Cut(line, " ")
	if !ok || verb != "ACQUIRE" {
		return "", fmt.Errorf("%w: want \"ACQUIRE <key>\", got %q", ErrProtocol, printable(line))
	}
	return key, CheckKey(key)
}

// Reply is a server's answer.
type Reply struct {
	// At is the slot time of an OK.
	At time.Time
	// Latest is when the slot goes stale; zero when the server set none
	// (a server before it was added, or a policy without margin).
	Latest time.Time
	// Defer is set (with the reason) when the sender must not send.
	Defer string
}

// ParseReply parses an OK, DEFER or ERR line.
func ParseReply(line string) (Reply, error) {
	verb, rest, _ := strings.Cut(line, " ")
	switch verb {
	case "OK":
		at, latest, two := strings.Cut(rest, " ")
		ns, err := strconv.ParseInt(at, 10, 64)
		if err != nil {
			return Reply{}, fmt.Errorf("%w: bad slot time %q", ErrProtocol, printable(rest))
		}
		r := Reply{At: time.Unix(0, ns)}
		if two {
			lns, err := strconv.ParseInt(latest, 10, 64)
			if err != nil || lns < ns {
				return Reply{}, fmt.Errorf("%w: bad latest time %q", ErrProtocol, printable(rest))
			}
			r.Latest = time.Unix(0, lns)
		}
		return r, nil
	case "DEFER":
		if rest == "" {
			rest = "deferred"
		}
		return Reply{Defer: rest}, nil
	case "ERR":
		return Reply{}, fmt.Errorf("throttle server: %s", rest)
	}
	return Reply{}, fmt.Errorf("%w: unexpected reply %q", ErrProtocol, printable(line))
}

// FormatOK is the OK line for a slot at at, stale after latest (zero:
// never, and the field is left out).
func FormatOK(at, latest time.Time) string {
	line := "OK " + strconv.FormatInt(at.UnixNano(), 10)
	if !latest.IsZero() {
		line += " " + strconv.FormatInt(latest.UnixNano(), 10)
	}
	return line + "\n"
}

func printable(s string) string { return netserve.Printable([]byte(s)) }
