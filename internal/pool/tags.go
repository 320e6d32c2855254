package pool

import (
	"bytes"
	"sluice/internal/percent"
	"strconv"
	"strings"
)

// commandTag is the status tag for a command (docs/protocols/mimedefang-multiplexor.md, "Status tags"), as the reference
// makes it: the command up to its second space, cut to 63 bytes,
// percent-decoded (up to a decoded NUL), with bytes outside 0x20..0x7E
// made spaces.
func commandTag(line string) string {
	raw := line
	if i := strings.IndexByte(raw, ' '); i >= 0 {
		if j := strings.IndexByte(raw[i+1:], ' '); j >= 0 {
			raw = raw[:i+1+j]
		}
	}
	if len(raw) > 63 {
		raw = raw[:63]
	}
	if plainTag(raw) {
		return raw // the common case, without a copy
	}
	t := []byte(percent.Decode(raw))
	if i := bytes.IndexByte(t, 0); i >= 0 {
		t = t[:i]
	}
	for i, c := range t {
		if c < 0x20 || c > 0x7e {
			t[i] = ' '
		}
	}
	return string(t)
}

// plainTag: s is its own tag (no '%', every byte in 0x20..0x7E).
func plainTag(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '%' {
			return false
		}
	}
	return true
}

// notifyTag sends "S <n> <tag>" (the tag cut to 200 bytes); an empty tag
// is not sent.
func (p *Pool) notifyTag(s *slot) {
	if s.cmd.tag != "" && p.cfg.Notify != nil {
		p.notify("S " + strconv.Itoa(s.n) + " " + truncate(s.cmd.tag, 200))
	}
}

// tagEvent is what a -Z status pipe delivered in one read.
type tagEvent struct {
	slot int
	side *procSide
	tag  string // the tag the reference would end up with if busy
}

// handleTag is docs/protocols/mimedefang-multiplexor.md, "Status tags" for a worker's own tag: it applies only while the
// worker is busy, and the (non-empty) result is notified.
func (p *Pool) handleTag(ev tagEvent) {
	s := p.slots[ev.slot]
	if s.proc == nil || s.proc.side != ev.side {
		return
	}
	if s.state == Busy {
		s.cmd.tag = ev.tag
	}
	p.notifyTag(s)
}

// readStatus reads a worker's -Z status pipe (docs/protocols/mimedefang-multiplexor.md, "Status tags"). Each chunk, less
// one trailing newline, yields the tag the reference would set: the text
// after its last newline (or, when that is empty, the piece before it),
// cut to 63 bytes and percent-decoded. One event per read reaches the
// owner, which applies the tag only while the worker is busy.
func (p *Pool) readStatus(n int, pr *procSide) {
	defer p.wg.Done()
	buf := make([]byte, 4096)
	for {
		m, err := pr.status.Read(buf)
		changed, tag := false, ""
		for off := 0; off < m; off += chunk {
			if t, ok := statusChunkTag(buf[off:min(off+chunk, m)]); ok {
				changed, tag = true, t
			}
		}
		if changed {
			select {
			case p.tags <- tagEvent{slot: n, side: pr, tag: tag}:
			case <-p.done:
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// statusChunkTag is the reference's update_worker_status for one chunk:
// ok is false when the chunk (less a trailing newline) is empty.
func statusChunkTag(b []byte) (tag string, ok bool) {
	b = bytes.TrimSuffix(b, []byte{'\n'})
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	if len(b) == 0 {
		return "", false
	}
	rest := b
	for {
		tag = percent.Decode(string(rest[:min(len(rest), chunk)]))
		if i := strings.IndexByte(tag, 0); i >= 0 {
			tag = tag[:i]
		}
		j := bytes.IndexByte(rest, '\n')
		if j < 0 || j+1 == len(rest) {
			return tag, true
		}
		rest = rest[j+1:]
	}
}
