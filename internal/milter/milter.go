// Package milter is a milter server engine: it speaks the Sendmail/Postfix
// milter protocol (versions 2 to 6) to MTAs and hands each protocol event
// to a Handler written in milter terms.
//
// Sessions are data, and a worker works instead of waiting (the libmilter
// worker-pool design): an idle session is its protocol state and one
// parked goroutine with a small stack (about 6 KB in all), never a
// blocked thread. Work is bounded: a callback runs only while it holds
// one of Options.Workers tokens, at most Options.QueueLen callbacks wait
// for a token, and beyond that the MTA gets an immediate answer
// (Options.QueueFullResponse, tempfail by default) instead of the server
// growing without bound. The callback runs on the goroutine that read the
// packet, which spares two goroutine hand-offs per event (a third of the
// time of a full message, measured with BenchmarkMessage). A session's
// callbacks run one at a time and in protocol order.
//
// The wire format lives in the wire subpackage; miltest is an MTA-side
// client for tests.
package milter

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"sluice/internal/milter/wire"
)

// Family is the address family of a CONNECT.
type Family = wire.Family

// Address families of a CONNECT.
const (
	FamilyUnknown = wire.FamilyUnknown // no address (Sendmail -bs, pipes)
	FamilyUnix    = wire.FamilyUnix    // a Unix socket path
	FamilyInet    = wire.FamilyInet    // IPv4
	FamilyInet6   = wire.FamilyInet6   // IPv6
)

// Response is a callback's verdict. The zero Response is Continue.
type Response struct {
	code wire.Code
	text string // RespReplyCode only
}

// The verdicts without text.
var (
	// Continue goes on to the next event.
	Continue = Response{code: wire.RespContinue}
	// Accept accepts the connection (at CONNECT/HELO) or the message,
	// with no more events for it.
	Accept = Response{code: wire.RespAccept}
	// Reject answers 5xx: the connection, the message, or (at RCPT) this
	// recipient.
	Reject = Response{code: wire.RespReject}
	// Tempfail answers 4xx.
	Tempfail = Response{code: wire.RespTempfail}
	// Discard accepts the message and drops it (not at CONNECT/HELO).
	Discard = Response{code: wire.RespDiscard}
	// Skip asks for no more events of this type (body chunks). It is
	// sent only from Body and only when the MTA negotiated SMFIP_SKIP;
	// anywhere else it is sent as Continue.
	Skip = Response{code: wire.RespSkip}
)

// ErrReply is wrapped by Reply's errors.
var ErrReply = errors.New("milter: invalid SMTP reply")

// Reply returns a custom SMTP reply: code 4xx (treated as Tempfail) or
// 5xx (Reject); "421" makes the MTA drop the SMTP connection. xcode is
// an optional RFC 3463 enhanced status ("4.7.0") whose class must match
// code. Each line becomes one reply line ("550-5.7.1 a", "550 5.7.1 b");
// lines must not contain CR, LF or other control characters but tab. A
// '%' is doubled, as the MTA formats the text printf-style.
func Reply(code int, xcode string, lines ...string) (Response, error) {
	if code < 400 || code > 599 {
		return Continue, fmt.Errorf("%w: code %d is not 4xx or 5xx", ErrReply, code)
	}
	c := strconv.Itoa(code)
	if xcode != "" {
		if err := checkXcode(xcode, c[0]); err != nil {
			return Continue, err
		}
	}
	if len(lines) == 0 {
		lines = []string{""}
	}
	var b strings.Builder
	for i, line := range lines {
		for j := 0; j < len(line); j++ {
			if ch := line[j]; (ch < 0x20 && ch != '\t') || ch == 0x7f {
				return Continue, fmt.Errorf("%w: control character %#02x in line %d", ErrReply, ch, i+1)
			}
		}
		if i > 0 {
			b.WriteString("\r\n")
		}
		b.WriteString(c)
		if i < len(lines)-1 {
			b.WriteByte('-')
		} else {
			b.WriteByte(' ')
		}
		if xcode != "" {
			b.WriteString(xcode)
			if line != "" {
				b.WriteByte(' ')
			}
		}
		b.WriteString(strings.ReplaceAll(line, "%", "%%"))
	}
	text := strings.TrimRight(b.String(), " ")
	if err := wire.CheckReplyText(text); err != nil {
		return Continue, fmt.Errorf("%w: %w", ErrReply, err)
	}
	return Response{code: wire.RespReplyCode, text: text}, nil
}

// checkXcode checks an enhanced status code "c.sss.ddd" of class class.
func checkXcode(x string, class byte) error {
	parts := strings.Split(x, ".")
	ok := len(parts) == 3 && x[0] == class
	for i, p := range parts {
		if !ok {
			break
		}
		maxLen := 3
		if i == 0 {
			maxLen = 1
		}
		ok = len(p) >= 1 && len(p) <= maxLen && strings.Trim(p, "0123456789") == ""
	}
	if !ok {
		return fmt.Errorf("%w: enhanced status %q is not %c.x.y", ErrReply, x, class)
	}
	return nil
}

// Code returns the response's wire code (wire.RespContinue for the zero
// Response).
func (r Response) Code() wire.Code {
	if r.code == 0 {
		return wire.RespContinue
	}
	return r.code
}

// String returns the verdict's name, or the reply text.
func (r Response) String() string {
	if r.code == wire.RespReplyCode {
		return strconv.Quote(r.text)
	}
	return strings.ToLower(r.Code().String())
}

// append appends the response packet to dst.
func (r Response) append(dst []byte) []byte {
	if r.code == wire.RespReplyCode {
		// The text was checked by Reply.
		dst, _ = wire.Encode(dst, &wire.ReplyCode{Text: r.text})
		return dst
	}
	return wire.AppendPacket(dst, r.Code(), nil)
}

// Handler receives the events of milter sessions. Only Connect and Close
// are required; a handler also implementing HeloHandler, MailHandler,
// RcptHandler, DataHandler, HeaderHandler, EOHHandler, BodyHandler,
// EOMHandler, AbortHandler or UnknownHandler receives those events too,
// and the steps it does not implement are negotiated off (SMFIP_NO*) so
// that the MTA does not send them.
//
// The callbacks of one Session are called one at a time, in protocol
// order, so a Session's state needs no lock; callbacks of different
// Sessions run concurrently, at most Options.Workers at once. A callback
// should not block for long: it holds a worker token (Postfix waits 30 s for
// most replies, Sendmail 10 s). Strings are copies the handler may keep;
// byte slices are valid only during the call. On a step negotiated
// no-reply (Options.Protocol NR_* flags) the returned Response is
// ignored.
type Handler interface {
	// Connect is the SMTP client's connection: the host name the MTA
	// resolved, the family, the client's port and address (the socket
	// path for FamilyUnix; no port and address for FamilyUnknown).
	Connect(s *Session, host string, family Family, port uint16, addr string) Response
	// Close ends the session. It is called exactly once per Session,
	// whatever ended it: QUIT, QUIT_NC (a new Session follows on the same
	// connection), end of stream, a protocol or I/O error, the idle
	// deadline, or Shutdown/Close; also for a Session that ended before
	// its CONNECT. It runs after the session's last other callback has
	// returned; it is the place to release what the session holds.
	Close(s *Session)
}

// HeloHandler receives HELO/EHLO.
type HeloHandler interface {
	Helo(s *Session, name string) Response
}

// MailHandler receives MAIL FROM: the address as the client gave it
// (with angle brackets) and its ESMTP arguments ("SIZE=123").
type MailHandler interface {
	MailFrom(s *Session, from string, args []string) Response
}

// RcptHandler receives each RCPT TO. Reject or Tempfail refuse only that
// recipient.
type RcptHandler interface {
	RcptTo(s *Session, rcpt string, args []string) Response
}

// DataHandler receives DATA (protocol version 4 and later).
type DataHandler interface {
	Data(s *Session) Response
}

// HeaderHandler receives each header, name and value as the MTA sent
// them (see wire.ProtoHeaderLeadingSpace).
type HeaderHandler interface {
	Header(s *Session, name, value string) Response
}

// EOHHandler receives the end of the headers.
type EOHHandler interface {
	EOH(s *Session) Response
}

// BodyHandler receives the body in chunks of at most 65535 bytes, CRLF
// line ends; chunk is valid only during the call. It may return Skip.
type BodyHandler interface {
	Body(s *Session, chunk []byte) Response
}

// EOMHandler receives the end of a message and may modify it through m,
// which is valid only during the call. Its Response is the message's
// final verdict.
type EOMHandler interface {
	EOM(s *Session, m *Modifier) Response
}

// AbortHandler is told that the current message ended without EOM
// (RSET, a rejection, the client went away); connection-level state
// stays. It is called only when a message was in progress, and never
// dropped for a full queue.
type AbortHandler interface {
	Abort(s *Session)
}

// UnknownHandler receives an SMTP command the MTA did not recognise
// (protocol version 3 and later).
type UnknownHandler interface {
	Unknown(s *Session, line string) Response
}
