package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"time"
)

// tally counts actions by their first word. A handful of distinct words is
// expected, so a slice searched linearly beats a map and never allocates
// once every word has been seen.
type tally struct {
	words [][]byte
	n     []uint64
}

func (t *tally) add(word []byte) {
	for i, w := range t.words {
		if bytes.Equal(w, word) {
			t.n[i]++
			return
		}
	}
	t.words = append(t.words, bytes.Clone(word))
	t.n = append(t.n, 1)
}

func (t *tally) mergeInto(m map[string]uint64) {
	for i, w := range t.words {
		m[string(w)] += t.n[i]
	}
}

// conn is one persistent policy connection with its reply parser.
type conn struct {
	c   net.Conn
	r   *bufio.Reader
	act []byte // the current reply's action value, copied out of r
}

// dialTimeout bounds connection set-up; a dropped SYN is sent again after
// 1 s, then 2 s, then 4 s.
const dialTimeout = 10 * time.Second

func dial(addr string) (*conn, error) {
	c, err := net.DialTimeout("tcp", addr, dialTimeout)
	if err != nil {
		return nil, fmt.Errorf("dial: %w", err)
	}
	return &conn{c: c, r: bufio.NewReaderSize(c, 4096), act: make([]byte, 0, 256)}, nil
}

func (c *conn) close() { _ = c.c.Close() }

// roundTrip writes req with one write and reads the reply; it returns the
// action value, valid until the next call.
func (c *conn) roundTrip(req []byte) ([]byte, error) {
	if _, err := c.c.Write(req); err != nil {
		return nil, fmt.Errorf("write: %w", err)
	}
	return c.readReply()
}

// readReply reads one reply up to its empty line and returns the value of
// its (first) action attribute.
func (c *conn) readReply() ([]byte, error) {
	c.act = c.act[:0]
	seen := false
	for {
		line, err := c.r.ReadSlice('\n')
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			return nil, fmt.Errorf("reply line longer than %d bytes", c.r.Size())
		case err != nil:
			return nil, fmt.Errorf("reading reply: %w", err)
		}
		if len(line) == 1 {
			break
		}
		eq := bytes.IndexByte(line, '=')
		if eq <= 0 {
			return nil, fmt.Errorf("malformed reply line %q", line)
		}
		if !seen && string(line[:eq]) == "action" {
			seen = true
			c.act = append(c.act, line[eq+1:len(line)-1]...)
		}
	}
	if !seen {
		return nil, errors.New("reply without action")
	}
	if len(bytes.TrimSpace(c.act)) == 0 {
		return nil, errors.New("reply with an empty action")
	}
	return c.act, nil
}

// firstWord returns the action's first word in upper case, written into
// buf.
func firstWord(buf, action []byte) []byte {
	action = bytes.TrimLeft(action, " \t")
	if i := bytes.IndexAny(action, " \t"); i >= 0 {
		action = action[:i]
	}
	buf = buf[:0]
	for _, ch := range action {
		if 'a' <= ch && ch <= 'z' {
			ch -= 'a' - 'A'
		}
		buf = append(buf, ch)
	}
	return buf
}

// isRefusal tells whether an action's first word (upper case) refuses or
// defers the request.
func isRefusal(word []byte) bool {
	switch string(word) {
	case "REJECT", "DEFER", "DEFER_IF_PERMIT", "DEFER_IF_REJECT":
		return true
	}
	return len(word) == 3 && (word[0] == '4' || word[0] == '5') &&
		'0' <= word[1] && word[1] <= '9' && '0' <= word[2] && word[2] <= '9'
}
