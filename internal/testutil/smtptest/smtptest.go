// Package smtptest holds what the MTA test harnesses (postfixtest,
// sendmailtest) share: the SMTP reply reader of their clients, the
// bounded buffer that keeps their daemons' output, the making of their
// instance directories and the polling of their maillogs.
package smtptest

import (
	"bufio"
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"sync"
)

// Reply is one SMTP reply, possibly multi-line.
type Reply struct {
	// Code is the three-digit reply code, e.g. 220 or 421.
	Code int
	// Text is the text of all reply lines, without codes and separators,
	// joined with "\n".
	Text string
}

// String returns the reply as "<code> <text>" (multi-line text is kept).
func (r Reply) String() string { return strconv.Itoa(r.Code) + " " + r.Text }

// ReadReply reads one reply: lines "ddd-text" up to a final "ddd text".
// A malformed line, a code that changes within the reply or a stream
// that ends inside it is an error.
func ReadReply(r *bufio.Reader) (Reply, error) {
	var (
		code  int
		texts []string
	)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			if line != "" {
				return Reply{}, fmt.Errorf("partial reply line %q: %w", line, err)
			}
			return Reply{}, err
		}
		line = strings.TrimRight(line, "\r\n")
		if len(line) < 3 {
			return Reply{}, fmt.Errorf("malformed reply line %q", line)
		}
		n, err := strconv.Atoi(line[:3])
		if err != nil || n < 100 || n > 599 {
			return Reply{}, fmt.Errorf("malformed reply code in %q", line)
		}
		if code != 0 && n != code {
			return Reply{}, fmt.Errorf("reply code changed from %d to %d in %q", code, n, line)
		}
		code = n
		sep, text := byte(' '), ""
		if len(line) > 3 {
			sep, text = line[3], line[4:]
		}
		if sep != ' ' && sep != '-' {
			return Reply{}, fmt.Errorf("malformed reply line %q", line)
		}
		texts = append(texts, text)
		if sep == ' ' {
			return Reply{Code: code, Text: strings.Join(texts, "\n")}, nil
		}
	}
}

// Buffer is a size-limited, mutex-protected buffer for a daemon's output,
// which os/exec writes from its own goroutine. Bytes beyond Limit are
// dropped; writes never fail.
type Buffer struct {
	// Limit is the most bytes kept.
	Limit int

	mu  sync.Mutex
	buf bytes.Buffer
}

// Write keeps what fits under Limit and reports all of p written.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := b.Limit - b.buf.Len(); room > 0 {
		b.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// String returns what was kept.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
