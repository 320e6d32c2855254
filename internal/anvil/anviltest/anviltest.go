// Package anviltest is the smtpd side of Postfix's anvil protocol, for
// tests: a minimal client, as smtpd's anvil_clnt, one request at a time
// over one stream. It imports nothing of internal/anvil, so anvil's own
// tests use it too.
package anviltest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"

	"sluice/internal/netserve"
)

// ErrProtocol wraps a reply that breaks the protocol.
var ErrProtocol = errors.New("anvil protocol error")

// Client is one stream to an anvil server. Its methods are not safe for
// concurrent use.
type Client struct {
	c       net.Conn
	r       *bufio.Reader
	timeout time.Duration
}

// Dial connects to an anvil server on network/addr ("unix", path) and,
// unless noAnnounce, checks its "protocol=anvil_protocol" greeting.
func Dial(network, addr string, noAnnounce bool) (*Client, error) {
	c, err := net.DialTimeout(network, addr, 10*time.Second)
	if err != nil {
		return nil, fmt.Errorf("dial anvil %s: %w", addr, err)
	}
	cl := &Client{c: c, r: bufio.NewReader(c), timeout: 10 * time.Second}
	if !noAnnounce {
		attrs, err := cl.readAttrs()
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("read anvil announcement: %w", err)
		}
		if len(attrs) != 1 || attrs[0][0] != "protocol" || attrs[0][1] != "anvil_protocol" {
			c.Close()
			return nil, fmt.Errorf("%w: unexpected announcement %q", ErrProtocol, attrs)
		}
	}
	return cl, nil
}

// Close closes the stream.
func (cl *Client) Close() error { return cl.c.Close() }

// Do sends one request and returns the reply attributes by name. It
// fails unless the reply has status=0.
func (cl *Client) Do(request, ident string) (map[string]int64, error) {
	cl.c.SetDeadline(time.Now().Add(cl.timeout))
	if _, err := fmt.Fprintf(cl.c, "request=%s\nident=%s\n\n", request, ident); err != nil {
		return nil, fmt.Errorf("send %s: %w", request, err)
	}
	attrs, err := cl.readAttrs()
	if err != nil {
		return nil, fmt.Errorf("read %s reply: %w", request, err)
	}
	out := map[string]int64{}
	for _, a := range attrs {
		v, err := strconv.ParseInt(a[1], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%w: %s=%q is not a number", ErrProtocol, a[0], a[1])
		}
		out[a[0]] = v
	}
	if st, ok := out["status"]; !ok || st != 0 {
		return out, fmt.Errorf("anvil %s %s: status %d", request, ident, st)
	}
	return out, nil
}

// readAttrs reads one reply: name=value lines up to an empty line.
func (cl *Client) readAttrs() ([][2]string, error) {
	var out [][2]string
	for {
		line, err := cl.r.ReadSlice('\n')
		if err != nil {
			if err == io.EOF && len(out) > 0 {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
		line = line[:len(line)-1]
		if len(line) == 0 {
			return out, nil
		}
		name, value, ok := bytes.Cut(line, []byte("="))
		if !ok {
			return nil, fmt.Errorf("%w: reply line without \"=\": %q", ErrProtocol, netserve.Printable(line))
		}
		out = append(out, [2]string{string(name), string(value)})
	}
}
