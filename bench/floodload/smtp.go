package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
)

// conn is one SMTP client connection from a chosen loopback address.
type conn struct {
	c net.Conn
	r *bufio.Reader
}

// dial connects to addr from the local address src (any port): Linux
// routes all of 127.0.0.0/8 to lo, so a client may bind any of it.
func dial(ctx context.Context, src net.IP, addr string) (*conn, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: src}}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return &conn{c: c, r: bufio.NewReaderSize(c, 1024)}, nil
}

// errReply is a reply other than the one a step wants.
var errReply = errors.New("unexpected reply")

// reply reads one (possibly multi-line) reply and returns its code.
func (c *conn) reply() (int, error) {
	for {
		line, err := c.r.ReadString('\n')
		if err != nil {
			return 0, err
		}
		if len(line) < 4 {
			return 0, fmt.Errorf("%w: short line %q", errReply, line)
		}
		code, err := strconv.Atoi(line[:3])
		if err != nil {
			return 0, fmt.Errorf("%w: %q", errReply, strings.TrimSpace(line))
		}
		if line[3] != '-' {
			return code, nil
		}
	}
}

// cmd sends line and reads the reply's code.
func (c *conn) cmd(line string) (int, error) {
	if _, err := c.c.Write([]byte(line + "\r\n")); err != nil {
		return 0, err
	}
	return c.reply()
}

// expect is cmd (or, for line "", the greeting) that fails unless the
// reply's code is want.
func (c *conn) expect(line string, want int) error {
	var code int
	var err error
	if line == "" {
		code, err = c.reply()
	} else {
		code, err = c.cmd(line)
	}
	if err != nil {
		return err
	}
	if code != want {
		what := line
		if what == "" {
			what = "greeting"
		}
		return fmt.Errorf("%w: %d to %s", errReply, code, strings.Fields(what + " ")[0])
	}
	return nil
}

func (c *conn) Close() error { return c.c.Close() }

// message is the body every message carries (about 1 KB).
var message = "Subject: flood\r\nFrom: <peer@known.example>\r\nTo: <x@example.com>\r\n\r\n" +
	strings.Repeat("The quick brown fox jumps over the lazy dog; 0123456789.\r\n", 16) + ".\r\n"

// send delivers one message in a session of its own from src, within
// timeout, and returns how long it took from the dial to the 250 after
// the message's final dot (the QUIT after it is not timed).
func send(ctx context.Context, src net.IP, addr string, timeout time.Duration) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t0 := time.Now()
	c, err := dial(ctx, src, addr)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { _ = c.c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	for _, step := range []struct {
		line string
		want int
	}{
		{"", 220}, {"EHLO " + heloName(src), 250}, {"MAIL FROM:<peer@known.example>", 250},
		{"RCPT TO:<x@example.com>", 250}, {"DATA", 354},
	} {
		if err := c.expect(step.line, step.want); err != nil {
			return 0, err
		}
	}
	if _, err := c.c.Write([]byte(message)); err != nil {
		return 0, err
	}
	if err := c.expect("", 250); err != nil {
		return 0, err
	}
	d := time.Since(t0)
	_, _ = c.cmd("QUIT")
	return d, nil
}

// heloName is the EHLO name of a client at src.
func heloName(src net.IP) string {
	return "h" + strings.ReplaceAll(src.String(), ".", "-") + ".example"
}
