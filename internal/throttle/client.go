package throttle

import (
	"bufio"
	"fmt"
	"net"
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
