package postfixtest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"sluice/internal/testutil/smtptest"
)

// defaultSMTPTimeout bounds each SMTP exchange when the dial context has no
// deadline.
const defaultSMTPTimeout = 30 * time.Second

// Reply is one SMTP reply, possibly multi-line.
type Reply = smtptest.Reply

// SMTPConn is a minimal SMTP client connection for tests: one command at a
// time, no pipelining, no TLS. It is not safe for concurrent use.
type SMTPConn struct {
	conn     net.Conn
	r        *bufio.Reader
	deadline time.Time // zero: defaultSMTPTimeout per exchange
}

// DialSMTP connects to 127.0.0.1:port and reads the greeting (the full,
// possibly multi-line reply). It returns the connection and the greeting
// whatever its code: a 421 "too many connections" greeting is a successful
// dial. If ctx has a deadline, it also bounds every later exchange on the
// connection.
func DialSMTP(ctx context.Context, port int) (*SMTPConn, Reply, error) {
	return DialSMTPFrom(ctx, port, "")
}

// DialSMTPFrom is DialSMTP from the local address from (a loopback
// address such as "127.0.0.9", so that one test has many clients; ""
// lets the kernel choose).
func DialSMTPFrom(ctx context.Context, port int, from string) (*SMTPConn, Reply, error) {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	var d net.Dialer
	if from != "" {
		ip := net.ParseIP(from)
		if ip == nil {
			return nil, Reply{}, fmt.Errorf("dial smtp from %q: not an address", from)
		}
		d.LocalAddr = &net.TCPAddr{IP: ip}
	}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, Reply{}, fmt.Errorf("dial smtp %s: %w", addr, err)
	}
	c := &SMTPConn{conn: conn, r: bufio.NewReader(conn)}
	if dl, ok := ctx.Deadline(); ok {
		c.deadline = dl
	}
	c.setDeadline()
	greeting, err := smtptest.ReadReply(c.r)
	if err != nil {
		_ = conn.Close()
		return nil, Reply{}, fmt.Errorf("read smtp greeting from %s: %w", addr, err)
	}
	return c, greeting, nil
}

func (c *SMTPConn) setDeadline() {
	dl := c.deadline
	if dl.IsZero() {
		dl = time.Now().Add(defaultSMTPTimeout)
	}
	_ = c.conn.SetDeadline(dl)
}

// Cmd sends one command line (without CRLF) and reads the full reply.
func (c *SMTPConn) Cmd(line string) (Reply, error) {
	if strings.ContainsAny(line, "\r\n") {
		return Reply{}, fmt.Errorf("smtp command %q contains a line break", line)
	}
	c.setDeadline()
	if _, err := c.conn.Write([]byte(line + "\r\n")); err != nil {
		return Reply{}, fmt.Errorf("send smtp %q: %w", verb(line), err)
	}
	r, err := smtptest.ReadReply(c.r)
	if err != nil {
		return Reply{}, fmt.Errorf("read reply to smtp %q: %w", verb(line), err)
	}
	return r, nil
}

// verb returns the command word of line, for error messages.
func verb(line string) string {
	if v, _, ok := strings.Cut(line, " "); ok {
		return v
	}
	return line
}

// SendMessage sends one small message in the current session: MAIL FROM,
// RCPT TO, DATA with a tiny body. Any reply that is not 2xx or 3xx is an
// error. The session stays open for further messages.
func (c *SMTPConn) SendMessage(from, to string) error {
	steps := []struct {
		line string
		want int // expected reply class
	}{
		{"MAIL FROM:<" + from + ">", 2},
		{"RCPT TO:<" + to + ">", 2},
		{"DATA", 3},
	}
	for _, s := range steps {
		r, err := c.Cmd(s.line)
		if err != nil {
			return err
		}
		if err := checkReply(s.line, r, s.want); err != nil {
			return err
		}
	}
	body := strings.Join([]string{
		"From: <" + from + ">",
		"To: <" + to + ">",
		"Subject: postfixtest",
		"Date: " + time.Now().UTC().Format(time.RFC1123Z),
		"Message-ID: <" + strconv.FormatInt(time.Now().UnixNano(), 36) + "@postfixtest.invalid>",
		"",
		"Test message from sluice postfixtest.",
		"..A line that starts with a (stuffed) dot.",
		".",
		"",
	}, "\r\n")
	c.setDeadline()
	if _, err := c.conn.Write([]byte(body)); err != nil {
		return fmt.Errorf("send smtp message body: %w", err)
	}
	r, err := smtptest.ReadReply(c.r)
	if err != nil {
		return fmt.Errorf("read reply to end of data: %w", err)
	}
	return checkReply("end of DATA", r, 2)
}

func checkReply(what string, r Reply, class int) error {
	if r.Code/100 == 2 || r.Code/100 == 3 {
		if r.Code/100 != class {
			return fmt.Errorf("smtp %s: unexpected reply %s", verb(what), r)
		}
		return nil
	}
	return fmt.Errorf("smtp %s: server replied %s", verb(what), r)
}

// Close sends QUIT (best effort, without waiting long for the reply) and
// closes the connection.
func (c *SMTPConn) Close() error {
	_ = c.conn.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.conn.Write([]byte("QUIT\r\n")); err == nil {
		_, _ = smtptest.ReadReply(c.r)
	}
	if err := c.conn.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("close smtp connection: %w", err)
	}
	return nil
}
