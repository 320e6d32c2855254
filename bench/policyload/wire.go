package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
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

// replyMax is the longest reply a connection takes.
const replyMax = 4096

// replyBuf holds what a connection has read and not yet parsed.
type replyBuf struct {
	b    [replyMax]byte
	r, n int // b[r:n] is unparsed
}

// space compacts the buffer and returns where the next read goes; it is
// empty when the buffer holds replyMax bytes of an unfinished reply.
func (rb *replyBuf) space() []byte {
	if rb.r > 0 {
		rb.n = copy(rb.b[:], rb.b[rb.r:rb.n])
		rb.r = 0
	}
	return rb.b[rb.n:]
}

// next returns the action of the whole reply at the start of the buffer
// and moves past it; ok is false if no whole reply has come yet. The
// action is valid until the next call of space.
func (rb *replyBuf) next() (act []byte, ok bool, err error) {
	act, n, err := parseReply(rb.b[rb.r:rb.n])
	if err != nil || n == 0 {
		if err == nil && rb.r == 0 && rb.n == replyMax {
			err = fmt.Errorf("reply longer than %d bytes", replyMax)
		}
		return nil, false, err
	}
	rb.r += n
	return act, true, nil
}

// reset empties the buffer, for a new connection.
func (rb *replyBuf) reset() { rb.r, rb.n = 0, 0 }

// parseReply parses the reply at the start of b: "name=value" lines up to
// an empty line. It returns the value of the first action attribute and
// the reply's length, or n == 0 if b holds no whole reply yet. A line
// without a name and "=", a reply without an action or with an empty one
// is an error.
func parseReply(b []byte) (act []byte, n int, err error) {
	seen := false
	for {
		nl := bytes.IndexByte(b[n:], '\n')
		if nl < 0 {
			return nil, 0, nil
		}
		line := b[n : n+nl]
		n += nl + 1
		if len(line) == 0 {
			break
		}
		eq := bytes.IndexByte(line, '=')
		if eq <= 0 {
			return nil, 0, fmt.Errorf("malformed reply line %q", line)
		}
		if !seen && string(line[:eq]) == "action" {
			seen, act = true, line[eq+1:]
		}
	}
	if !seen {
		return nil, 0, errors.New("reply without action")
	}
	if len(bytes.TrimSpace(act)) == 0 {
		return nil, 0, errors.New("reply with an empty action")
	}
	return act, n, nil
}

// conn is one blocking policy connection, as -probe uses.
type conn struct {
	c  net.Conn
	rd io.Reader // c, or a test's reader
	rb replyBuf
}

// dialTimeout bounds connection set-up; a dropped SYN is sent again after
// 1 s, then 2 s, then 4 s.
const dialTimeout = 10 * time.Second

func dial(addr string) (*conn, error) {
	c, err := net.DialTimeout("tcp", addr, dialTimeout)
	if err != nil {
		return nil, fmt.Errorf("dial: %w", err)
	}
	return &conn{c: c, rd: c}, nil
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
	for {
		act, ok, err := c.rb.next()
		switch {
		case err != nil:
			return nil, err
		case ok:
			return act, nil
		}
		n, err := c.rd.Read(c.rb.space())
		c.rb.n += n
		if n == 0 && err != nil {
			return nil, fmt.Errorf("reading reply: %w", err)
		}
	}
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
