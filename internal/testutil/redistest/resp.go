package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// Do sends one command to addr on a connection of its own and returns the
// reply: a string (simple or bulk; "" for nil), an int64, an error reply as
// a Go error, or a []any for an array. For setting up and inspecting test
// servers, not for speed.
func Do(addr string, args ...string) (any, error) {
	v, err := DoAll(addr, args)
	if err != nil {
		return nil, err
	}
	return v[0], nil
}

// DoAll sends commands in turn on one connection and returns their
// replies; it stops at the first error. ("READONLY" then a read lets a
// test read a Cluster replica.)
func DoAll(addr string, cmds ...[]string) ([]any, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	out := make([]any, 0, len(cmds))
	for _, args := range cmds {
		var b strings.Builder
		fmt.Fprintf(&b, "*%d\r\n", len(args))
		for _, a := range args {
			fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
		}
		if _, err := c.Write([]byte(b.String())); err != nil {
			return nil, err
		}
		v, err := readReply(br)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// DoString is Do for commands that answer a string (INFO, CLUSTER NODES).
func DoString(addr string, args ...string) (string, error) {
	v, err := Do(addr, args...)
	if err != nil {
		return "", err
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("%s: reply %v is not a string", args[0], v)
	}
	return s, nil
}

// maxReply bounds a bulk string's length and an array's size: a test's
// replies are small.
const maxReply = 1 << 24

// serverError is an error reply from Redis.
type serverError string

func (e serverError) Error() string { return string(e) }

func readReply(r *bufio.Reader) (any, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return nil, errors.New("empty reply line")
	}
	body := line[1:]
	switch line[0] {
	case '+':
		return body, nil
	case '-':
		return nil, serverError(body)
	case ':':
		return strconv.ParseInt(body, 10, 64)
	case '$':
		n, err := strconv.Atoi(body)
		if err != nil || n < 0 {
			return "", err
		}
		if n > maxReply {
			return nil, fmt.Errorf("bulk reply of %d bytes", n)
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(body)
		if err != nil || n < 0 {
			return []any(nil), err
		}
		if n > maxReply {
			return nil, fmt.Errorf("array reply of %d elements", n)
		}
		out := make([]any, n)
		for i := range out {
			if out[i], err = readReply(r); err != nil {
				var se serverError
				if !errors.As(err, &se) {
					return nil, err
				}
				out[i] = err
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("unexpected reply %q", line)
}

// InfoField returns field of the INFO section sec of addr ("role",
// "master_link_status"), or "" when absent.
func InfoField(addr, sec, field string) (string, error) {
	info, err := DoString(addr, "INFO", sec)
	if err != nil {
		return "", err
	}
	return fieldOf(info, field), nil
}

// WaitFor polls cond every 50ms until it returns nil or timeout passes,
// and returns its last error then.
func WaitFor(timeout time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %s: %w", timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
