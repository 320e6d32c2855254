// Package muxctl is the client side of mimedefang-multiplexor's control
// socket as MIMEDefang's md-mx-ctrl (3.3) speaks it: one request line per
// connection, the reply read until the server closes, md-mx-ctrl's
// percent-encoding of command-line words (package percent), and its formatted views of the
// status and load replies (docs/protocols/mimedefang-multiplexor.md, "Built-in commands" and "md-mx-ctrl").
//
// The reference client has no timeouts; this one bounds the connect and the
// whole exchange (Client.DialTimeout, Client.Timeout), so a silent server
// gives an error instead of a hang.
package muxctl

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"sluice/internal/percent"
	"syscall"
	"time"
)

// DefaultSocket is md-mx-ctrl's socket when -s is not given: the
// multiplexor's default in the Debian package's spool.
const DefaultSocket = "/var/spool/MIMEDefang/mimedefang-multiplexor.sock"

// MaxLine is md-mx-ctrl's buffer size: the longest request line it builds,
// the longest line it reads at a time with -i, and the most reply bytes it
// reads for a command it passes through.
const MaxLine = 262144

// maxFormatted is how much of a reply md-mx-ctrl reads for the commands it
// formats itself (status, barstatus, load*, load1, hload*).
const maxFormatted = 4096

// maxSunPath is how much of a socket path fits in sockaddr_un with its
// terminating NUL; md-mx-ctrl cuts longer paths there.
const maxSunPath = 107

// Defaults for Client's timeouts.
const (
	DefaultDialTimeout = 30 * time.Second
	DefaultTimeout     = 5 * time.Minute
)

// Client talks to one multiplexor socket. The zero timeouts mean the
// defaults. A Client is safe for concurrent use.
type Client struct {
	// Socket is the path of the multiplexor's UNIX-domain socket (-s).
	Socket string
	// DialTimeout bounds the connect, including waiting while the
	// listener's backlog is full.
	DialTimeout time.Duration
	// Timeout bounds the rest of an exchange: writing the request and
	// reading the whole reply. Commands forwarded to a worker can take
	// the multiplexor's busy timeout (-b, 120 s by default) and more while
	// queued, so the default is generous.
	Timeout time.Duration
}

// Error is a failed exchange: Op is the step that failed ("connect",
// "write" or "read"), Err the cause.
type Error struct {
	Op  string
	Err error
}

// Error names the step that failed and why.
func (e *Error) Error() string { return "muxctl: " + e.Op + ": " + e.Err.Error() }

// Unwrap returns the underlying error, for errors.Is and errors.As.
func (e *Error) Unwrap() error { return e.Err }

// Message is md-mx-ctrl's line (without the newline) for an error from
// Exchange, for example
// "ERROR MXCommand: connect: No such file or directory: Is multiplexor running?".
func Message(err error) string {
	var e *Error
	if !errors.As(err, &e) {
		return "ERROR MXCommand: " + err.Error()
	}
	msg := "ERROR MXCommand: " + e.Op + ": " + strerror(e.Err)
	if e.Op == "connect" && (errors.Is(e.Err, syscall.EPERM) || errors.Is(e.Err, syscall.EACCES)) {
		return msg
	}
	return msg + ": Is multiplexor running?"
}

// strerror is the C library's text for err's errno: Go's text with a
// capital letter. A deadline is reported as ETIMEDOUT.
func strerror(err error) string {
	var timeout interface{ Timeout() bool }
	if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) ||
		errors.As(err, &timeout) && timeout.Timeout() {
		err = syscall.ETIMEDOUT
	}
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return err.Error()
	}
	s := errno.Error()
	if s != "" && s[0] >= 'a' && s[0] <= 'z' {
		s = string(s[0]-'a'+'A') + s[1:]
	}
	return s
}

// Exchange sends req exactly as given (md-mx-ctrl's lines end with "\n")
// and returns the reply: everything the server sends before it closes,
// but at most max bytes; reading stops there.
func (c *Client) Exchange(ctx context.Context, req string, max int) ([]byte, error) {
	conn, err := c.dial(ctx)
	if err != nil {
		return nil, &Error{"connect", err}
	}
	defer conn.Close()
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	_ = conn.SetDeadline(time.Now().Add(timeout))
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	fail := func(op string, err error) ([]byte, error) {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return nil, &Error{op, err}
	}
	if _, err := io.WriteString(conn, req); err != nil {
		return fail("write", err)
	}
	buf := make([]byte, 0, min(max, 4096))
	for len(buf) < max {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := conn.Read(buf[len(buf):min(cap(buf), max)])
		buf = buf[:len(buf)+n]
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fail("read", err)
		}
	}
	return buf, nil
}

// dial connects as md-mx-ctrl does: the path is cut to what fits in
// sockaddr_un and is always a file name (Go would take "@name" as an
// abstract socket), and a full backlog is waited out, as a blocking
// connect waits.
func (c *Client) dial(ctx context.Context) (net.Conn, error) {
	path := c.Socket
	if len(path) > maxSunPath {
		path = path[:maxSunPath]
	}
	switch {
	case path == "":
		// The reference connects to the all-zero abstract name, where
		// nothing listens.
		return nil, &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}
	case path[0] == '@':
		path = "./" + path
	}
	timeout := c.DialTimeout
	if timeout <= 0 {
		timeout = DefaultDialTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var d net.Dialer
	for {
		conn, err := d.DialContext(ctx, "unix", path)
		if !errors.Is(err, syscall.EAGAIN) {
			return conn, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Line is the request md-mx-ctrl builds from its command-line words: each
// encoded, joined by single spaces, ending in a newline. Like the
// reference it stays under MaxLine: a word that would not fit is cut
// (never inside a %XX), and a line that reaches MaxLine-1 bytes is cut
// there and has no newline.
func Line(words []string) string {
	var b []byte
	for i, w := range words {
		// The reference's encoder gets the room left, stops before a %XX
		// that would leave no byte spare and after filling all but one.
		room := MaxLine - len(b)
		n := 0
		for j := 0; j < len(w) && room > 1; j++ {
			if c := w[j]; percent.NeedsEncoding(c) {
				if n >= room-3 {
					break
				}
				b = percent.AppendByte(b, c)
				n += 3
			} else {
				b = append(b, c)
				n++
			}
			if n >= room-1 {
				break
			}
		}
		if len(b) >= MaxLine-1 {
			return string(b)
		}
		if i < len(words)-1 {
			b = append(b, ' ')
		}
	}
	return string(append(b, '\n'))
}
