// Package miltest is the MTA side of the milter protocol, for tests: it
// negotiates, sends commands one packet per write (as Postfix does), and
// reads replies, never waiting for one on a step the milter negotiated
// no-reply.
package miltest

import (
	"errors"
	"fmt"
	"net"
	"time"

	"sluice/internal/milter/wire"
)

// MTA is one milter connection seen from the MTA. Its methods are not
// safe for concurrent use.
type MTA struct {
	Conn net.Conn // the connection to the milter
	// MaxData caps a reply's payload (default wire.DefaultMaxData).
	MaxData int
	// Timeout bounds each wait for a reply (default 10s, like Sendmail).
	Timeout time.Duration
	// Neg is the milter's OPTNEG reply, set by Negotiate.
	Neg wire.OptNeg
	buf []byte
}

// Dial connects to a milter.
func Dial(network, addr string) (*MTA, error) {
	c, err := net.Dial(network, addr)
	if err != nil {
		return nil, err
	}
	return New(c), nil
}

// New returns an MTA speaking over c.
func New(c net.Conn) *MTA { return &MTA{Conn: c} }

// Close closes the connection.
func (m *MTA) Close() error { return m.Conn.Close() }

// Send writes one packet in one write.
func (m *MTA) Send(msg wire.Msg) error {
	b, err := wire.Encode(m.buf[:0], msg)
	if err != nil {
		return err
	}
	m.buf = b
	_, err = m.Conn.Write(b)
	return err
}

// Read reads one reply.
func (m *MTA) Read() (wire.Msg, error) {
	t := m.Timeout
	if t <= 0 {
		t = 10 * time.Second
	}
	m.Conn.SetReadDeadline(time.Now().Add(t))
	maxData := m.MaxData
	if maxData <= 0 {
		maxData = wire.DefaultMaxData
	}
	p, err := wire.ReadPacket(m.Conn, maxData, nil)
	if err != nil {
		return nil, err
	}
	return wire.DecodeResponse(p)
}

// Negotiate sends OPTNEG and reads the milter's answer into m.Neg.
func (m *MTA) Negotiate(version uint32, actions wire.Action, protocol wire.Protocol) error {
	if err := m.Send(&wire.OptNeg{Version: version, Actions: actions, Protocol: protocol}); err != nil {
		return err
	}
	r, err := m.Read()
	if err != nil {
		return err
	}
	o, ok := r.(*wire.OptNeg)
	if !ok {
		return fmt.Errorf("miltest: OPTNEG answered with %v", r.Code())
	}
	if actions == 0 {
		actions = wire.V1Actions
	}
	if protocol == 0 {
		protocol = wire.V1Protocol
	}
	if o.Version > version || o.Actions&^actions != 0 || o.Protocol&^protocol != 0 {
		return fmt.Errorf("miltest: milter answered more than offered: %+v", *o)
	}
	m.Neg = *o
	return nil
}

// Macro sends a MACRO packet for cmd.
func (m *MTA) Macro(cmd wire.Code, nameValues ...string) error {
	return m.Send(&wire.Macro{Cmd: cmd, NameValues: nameValues})
}

// Command sends msg and, unless the milter negotiated no reply for it,
// reads the verdict, skipping PROGRESS packets. The verdict is nil for a
// no-reply step.
func (m *MTA) Command(msg wire.Msg) (wire.Msg, error) {
	if err := m.Send(msg); err != nil {
		return nil, err
	}
	if m.Neg.Protocol&wire.NoReplyFor(msg.Code()) != 0 {
		return nil, nil
	}
	for {
		r, err := m.Read()
		if err != nil {
			return nil, err
		}
		if r.Code() != wire.RespProgress {
			return r, nil
		}
	}
}

// Verdict is Command returning only the reply code (0 for no reply).
func (m *MTA) Verdict(msg wire.Msg) (wire.Code, error) {
	r, err := m.Command(msg)
	if err != nil || r == nil {
		return 0, err
	}
	return r.Code(), nil
}

// EOM sends the end of the message and returns the modifications, the
// number of PROGRESS packets, and the final verdict.
func (m *MTA) EOM() (mods []wire.Msg, progress int, final wire.Msg, err error) {
	if err := m.Send(&wire.EOM{}); err != nil {
		return nil, 0, nil, err
	}
	for {
		r, err := m.Read()
		if err != nil {
			return mods, progress, nil, err
		}
		switch r.Code() {
		case wire.RespProgress:
			progress++
		case wire.RespAddHeader, wire.RespInsHeader, wire.RespChgHeader, wire.RespAddRcpt,
			wire.RespAddRcptPar, wire.RespDelRcpt, wire.RespChgFrom, wire.RespReplBody, wire.RespQuarantine:
			mods = append(mods, r)
		default:
			return mods, progress, r, nil
		}
	}
}

// Abort sends ABORT (no reply).
func (m *MTA) Abort() error { return m.Send(&wire.Empty{C: wire.CmdAbort}) }

// Quit sends QUIT (no reply) and waits for the milter to close.
func (m *MTA) Quit() error {
	if err := m.Send(&wire.Empty{C: wire.CmdQuit}); err != nil {
		return err
	}
	m.Conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	var b [1]byte
	if _, err := m.Conn.Read(b[:]); err == nil {
		return errors.New("miltest: data after QUIT")
	}
	return nil
}

// QuitNC sends QUIT_NC (no reply): a new connection follows.
func (m *MTA) QuitNC() error { return m.Send(&wire.Empty{C: wire.CmdQuitNC}) }

// Message runs one message with every step not negotiated away: MAIL,
// one RCPT, DATA, headers (name, value pairs), EOH, a body chunk, EOM.
// It stops at the first verdict other than CONTINUE (returned as final).
func (m *MTA) Message(from, rcpt string, headers []string, body string) (mods []wire.Msg, final wire.Msg, err error) {
	steps := []wire.Msg{&wire.Mail{Addr: from}, &wire.Mail{Rcpt: true, Addr: rcpt}, &wire.Empty{C: wire.CmdData}}
	for i := 0; i+1 < len(headers); i += 2 {
		steps = append(steps, &wire.Header{Name: headers[i], Value: headers[i+1]})
	}
	steps = append(steps, &wire.Empty{C: wire.CmdEOH})
	if body != "" {
		steps = append(steps, &wire.Body{Chunk: []byte(body)})
	}
	for _, s := range steps {
		if m.Neg.Protocol&wire.NoStepFor(s.Code()) != 0 || (s.Code() == wire.CmdData && m.Neg.Version < 4) {
			continue
		}
		r, err := m.Command(s)
		if err != nil {
			return nil, nil, err
		}
		if r != nil && r.Code() != wire.RespContinue {
			return nil, r, nil
		}
	}
	mods, _, final, err = m.EOM()
	return mods, final, err
}
