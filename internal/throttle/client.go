package throttle

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strings"
	"time"
)

// Client is one sender's conversation with the throttle server.
type Client struct {
	c net.Conn
	r *bufio.Reader
}

// Dial connects to the server at network/addr within timeout.
func Dial(network, addr string, timeout time.Duration) (*Client, error) {
	c, err := net.DialTimeout(network, addr, timeout)
	if err != nil {
		return nil, fmt.Errorf("connect to throttle server %s: %w", addr, err)
	}
	return &Client{c: c, r: bufio.NewReaderSize(c, maxLine+1)}, nil
}

// Acquire asks for a slot for key and blocks (without using the CPU)
// until the server answers. The caller sleeps until Reply.At, sends, then
// calls Close.
func (cl *Client) Acquire(key string) (Reply, error) {
	if err := CheckKey(key); err != nil {
		return Reply{}, err
	}
	if _, err := fmt.Fprintf(cl.c, "ACQUIRE %s\n", key); err != nil {
		return Reply{}, fmt.Errorf("send request: %w", err)
	}
	line, err := readLine(cl.r)
	if err != nil {
		return Reply{}, fmt.Errorf("throttle server went away before answering: %w", err)
	}
	return ParseReply(line)
}

// Done tells the server the send happened and has ended, and closes.
func (cl *Client) Done() error {
	cl.c.Write([]byte("DONE\n"))
	return cl.c.Close()
}

// Close gives up: the place in line, or a slot not used yet, goes back.
func (cl *Client) Close() error { return cl.c.Close() }

// Watch listens, while the sender waits for its slot, for the server
// taking the slot back (its key was suspended): the channel then gets the
// reason. stop ends the watch; call it before Report, Done or Close.
func (cl *Client) Watch() (revoked <-chan string, stop func()) {
	ch := make(chan string, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		line, err := readLine(cl.r)
		if err == nil && strings.HasPrefix(line, "DEFER") {
			ch <- strings.TrimSpace(strings.TrimPrefix(line, "DEFER"))
		}
	}()
	return ch, func() {
		cl.c.SetReadDeadline(time.Now())
		<-done
		cl.c.SetReadDeadline(time.Time{})
	}
}

// Report tells the server the send's result and returns its verdict: one
// flag per line, VerdictTemporary for a permanent failure to report as
// temporary. A revocation that came while the sender was sending is
// skipped.
func (cl *Client) Report(lines []ResultLine, timeout time.Duration) (string, error) {
	cl.c.SetDeadline(time.Now().Add(timeout))
	defer cl.c.SetDeadline(time.Time{})
	if _, err := io.WriteString(cl.c, FormatReport(lines)); err != nil {
		return "", fmt.Errorf("send result: %w", err)
	}
	for {
		line, err := readLine(cl.r)
		if err != nil {
			return "", fmt.Errorf("throttle server went away before its verdict: %w", err)
		}
		if strings.HasPrefix(line, "DEFER") {
			continue
		}
		if rest, ok := strings.CutPrefix(line, "ERR "); ok {
			return "", fmt.Errorf("throttle server: %s", rest)
		}
		return ParseVerdict(line, len(lines))
	}
}
