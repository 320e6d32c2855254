package milter

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	"sluice/internal/milter/wire"
)

// Errors of Modifier's methods.
var (
	// ErrNotNegotiated is wrapped when a modification needs an action the
	// session did not negotiate (see Options.Actions).
	ErrNotNegotiated = errors.New("milter: action not negotiated")
	// ErrModifierDone is returned by a Modifier used after its EOM
	// callback returned.
	ErrModifierDone = errors.New("milter: modifier used after EOM returned")
	// ErrInvalid is wrapped for a name, value or address the MTA would
	// not accept.
	ErrInvalid = errors.New("milter: invalid modification")
)

// Modifier applies modifications to a message at EOM. The modifications
// are sent, in call order, just before EOM's verdict, all in one write;
// they take effect only if the verdict lets the message through. A
// Modifier is valid only during the EOM callback that received it.
type Modifier struct {
	c    *conn
	mu   sync.Mutex
	buf  []byte // encoded packets
	done bool
}

func (m *Modifier) add(need wire.Action, msg wire.Msg) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.done {
		return ErrModifierDone
	}
	if m.c.actions&need == 0 {
		return fmt.Errorf("%w: %v needs %v", ErrNotNegotiated, msg.Code(), need)
	}
	b, err := wire.Encode(m.buf, msg)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	m.buf = b
	return nil
}

// finish ends the Modifier's use; drop discards its modifications.
func (m *Modifier) finish(drop bool) {
	m.mu.Lock()
	m.done = true
	if drop {
		m.buf = nil
	}
	m.mu.Unlock()
}

// AddHeader appends a header to the message (needs wire.ActAddHeader).
func (m *Modifier) AddHeader(name, value string) error {
	if err := checkHeader(name, value); err != nil {
		return err
	}
	return m.add(wire.ActAddHeader, &wire.AddHeader{Name: name, Value: value})
}

// InsertHeader inserts a header at position index, 0 being the first
// (needs wire.ActAddHeader). The MTA does not count its own Received:
// header.
func (m *Modifier) InsertHeader(index int, name, value string) error {
	if err := checkHeader(name, value); err != nil {
		return err
	}
	if index < 0 || uint64(index) > 0xffffffff {
		return fmt.Errorf("%w: header index %d", ErrInvalid, index)
	}
	return m.add(wire.ActAddHeader, &wire.ChangeHeader{Insert: true, Index: uint32(index), Name: name, Value: value})
}

// ChangeHeader sets the index-th (1-based) header called name to value
// (needs wire.ActChangeHeader); an empty value deletes it.
func (m *Modifier) ChangeHeader(index int, name, value string) error {
	if err := checkHeader(name, value); err != nil {
		return err
	}
	if index < 1 || uint64(index) > 0xffffffff {
		return fmt.Errorf("%w: header index %d, want 1 or more", ErrInvalid, index)
	}
	return m.add(wire.ActChangeHeader, &wire.ChangeHeader{Index: uint32(index), Name: name, Value: value})
}

// DeleteHeader deletes the index-th (1-based) header called name (needs
// wire.ActChangeHeader).
func (m *Modifier) DeleteHeader(index int, name string) error {
	return m.ChangeHeader(index, name, "")
}

// AddRecipient adds an envelope recipient ("<addr>"). With esmtpArgs
// ("NOTIFY=NEVER", space-separated) it sends ADDRCPT_PAR (needs
// wire.ActAddRcptPar), without them ADDRCPT (needs wire.ActAddRcpt).
func (m *Modifier) AddRecipient(addr, esmtpArgs string) error {
	if err := checkAddr(addr, esmtpArgs); err != nil {
		return err
	}
	if esmtpArgs != "" {
		return m.add(wire.ActAddRcptPar, &wire.AddRcpt{Par: true, Addr: addr, Args: esmtpArgs})
	}
	return m.add(wire.ActAddRcpt, &wire.AddRcpt{Addr: addr})
}

// DeleteRecipient deletes an envelope recipient, given exactly as the MTA
// sent it in RCPT (needs wire.ActDelRcpt).
func (m *Modifier) DeleteRecipient(addr string) error {
	if err := checkAddr(addr, ""); err != nil {
		return err
	}
	return m.add(wire.ActDelRcpt, &wire.DelRcpt{Addr: addr})
}

// ChangeFrom replaces the envelope sender, with optional ESMTP arguments
// (needs wire.ActChangeFrom, protocol version 6).
func (m *Modifier) ChangeFrom(addr, esmtpArgs string) error {
	if err := checkAddr(addr, esmtpArgs); err != nil {
		return err
	}
	return m.add(wire.ActChangeFrom, &wire.ChangeFrom{Addr: addr, Args: esmtpArgs})
}

// ReplaceBody replaces the message body with body, CRLF line ends (needs
// wire.ActChangeBody). It is sent in chunks of at most wire.MaxChunk
// bytes; several calls append to the new body.
func (m *Modifier) ReplaceBody(body []byte) error {
	for first := true; first || len(body) > 0; first = false {
		n := min(len(body), wire.MaxChunk)
		if err := m.add(wire.ActChangeBody, &wire.ReplaceBody{Chunk: body[:n]}); err != nil {
			return err
		}
		body = body[n:]
	}
	return nil
}

// Quarantine puts the message on hold with a reason (needs
// wire.ActQuarantine).
func (m *Modifier) Quarantine(reason string) error {
	if reason == "" || strings.ContainsAny(reason, "\x00\r\n") {
		return fmt.Errorf("%w: quarantine reason must be one non-empty line", ErrInvalid)
	}
	return m.add(wire.ActQuarantine, &wire.Quarantine{Reason: reason})
}

// Progress tells the MTA that the milter is still working, which resets
// its timeout. It is sent at once. Call it from the EOM callback itself,
// not from another goroutine.
func (m *Modifier) Progress() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.done {
		return ErrModifierDone
	}
	m.c.sendProgress()
	return nil
}

// checkHeader accepts an RFC 5322 field name and a value without NUL
// whose line breaks are folds (followed by a space or tab).
func checkHeader(name, value string) error {
	if name == "" {
		return fmt.Errorf("%w: empty header name", ErrInvalid)
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c <= ' ' || c >= 0x7f || c == ':' {
			return fmt.Errorf("%w: header name %q: character %#02x", ErrInvalid, name, c)
		}
	}
	for i := 0; i < len(value); i++ {
		switch value[i] {
		case 0:
			return fmt.Errorf("%w: NUL in the value of header %s", ErrInvalid, name)
		case '\r', '\n':
			j := i + 1
			if value[i] == '\r' && j < len(value) && value[j] == '\n' {
				j++
			}
			if j >= len(value) || (value[j] != ' ' && value[j] != '\t') {
				return fmt.Errorf("%w: line break not followed by a space or tab in the value of header %s", ErrInvalid, name)
			}
			i = j - 1
		}
	}
	return nil
}

func checkAddr(addr, args string) error {
	if addr == "" || strings.ContainsAny(addr, "\x00\r\n") {
		return fmt.Errorf("%w: address %q", ErrInvalid, addr)
	}
	if strings.ContainsAny(args, "\x00\r\n") {
		return fmt.Errorf("%w: ESMTP arguments %q", ErrInvalid, args)
	}
	return nil
}
