package wire

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strings"
)

// nextString splits the NUL-terminated string at the start of data from
// the rest. what names the field for the error.
func nextString(data []byte, what string) (string, []byte, error) {
	b, rest, err := nextField(data, what)
	return string(b), rest, err
}

// nextField is nextString without the copy: the string's bytes, aliasing
// data.
func nextField(data []byte, what string) ([]byte, []byte, error) {
	i := bytes.IndexByte(data, 0)
	if i < 0 {
		if len(data) == 0 {
			return nil, nil, fmt.Errorf("%w: missing %s", ErrMalformed, what)
		}
		return nil, nil, fmt.Errorf("%w: %s without its terminating NUL", ErrMalformed, what)
	}
	return data[:i], data[i+1:], nil
}

// lastString decodes data that must be exactly one NUL-terminated string.
func lastString(data []byte, code Code, what string) (string, error) {
	b, err := lastField(data, code, what)
	return string(b), err
}

// lastField is lastString without the copy.
func lastField(data []byte, code Code, what string) ([]byte, error) {
	b, rest, err := nextField(data, what)
	if err != nil {
		return nil, fmt.Errorf("%v: %w", code, err)
	}
	if err := noTrailing(rest, code); err != nil {
		return nil, err
	}
	return b, nil
}

func noTrailing(rest []byte, code Code) error {
	if len(rest) != 0 {
		return fmt.Errorf("%w: %v: %d unexpected bytes at the end", ErrMalformed, code, len(rest))
	}
	return nil
}

func appendString(dst []byte, s, what string) ([]byte, error) {
	if strings.IndexByte(s, 0) >= 0 {
		return dst, fmt.Errorf("%w: NUL byte inside %s", ErrInvalid, what)
	}
	dst = append(dst, s...)
	return append(dst, 0), nil
}

// MacroRequest asks the MTA for a stage's macros in the OPTNEG reply
// (needs ActSetSymList).
type MacroRequest struct {
	Stage Stage // the stage whose macros are asked for
	// Names are macro names separated by spaces ("{client_addr} j"); an
	// empty list asks for no macros at that stage.
	Names string
}

// OptNeg is option negotiation ('O'), in both directions: the MTA offers
// a version, actions and protocol flags; the milter answers with what it
// speaks and uses, and may append macro requests.
type OptNeg struct {
	Version  uint32         // the protocol version (2 to 6)
	Actions  Action         // the modifications offered, or used (SMFIF_*)
	Protocol Protocol       // the steps and replies offered, or left out (SMFIP_*)
	Macros   []MacroRequest // the milter's macro requests (reply only)
}

// Code returns CmdOptNeg.
func (*OptNeg) Code() Code { return CmdOptNeg }

// AppendData appends the three words and the macro requests.
func (o *OptNeg) AppendData(dst []byte) ([]byte, error) {
	dst = binary.BigEndian.AppendUint32(dst, o.Version)
	dst = binary.BigEndian.AppendUint32(dst, uint32(o.Actions))
	dst = binary.BigEndian.AppendUint32(dst, uint32(o.Protocol))
	for _, m := range o.Macros {
		if m.Stage >= NumStages {
			return dst, fmt.Errorf("%w: macro stage %d", ErrInvalid, m.Stage)
		}
		dst = binary.BigEndian.AppendUint32(dst, uint32(m.Stage))
		var err error
		if dst, err = appendString(dst, m.Names, "macro list"); err != nil {
			return dst, err
		}
	}
	return dst, nil
}

// DecodeData reads the three words and any macro requests.
func (o *OptNeg) DecodeData(data []byte) error {
	if len(data) < 12 {
		return fmt.Errorf("%w: OPTNEG payload of %d bytes, want at least 12", ErrMalformed, len(data))
	}
	*o = OptNeg{
		Version:  binary.BigEndian.Uint32(data),
		Actions:  Action(binary.BigEndian.Uint32(data[4:])),
		Protocol: Protocol(binary.BigEndian.Uint32(data[8:])),
	}
	rest := data[12:]
	for len(rest) > 0 {
		if len(rest) < 4 {
			return fmt.Errorf("%w: OPTNEG: %d stray bytes after the options", ErrMalformed, len(rest))
		}
		st := Stage(binary.BigEndian.Uint32(rest))
		if st >= NumStages {
			return fmt.Errorf("%w: OPTNEG: unknown macro stage %d", ErrMalformed, uint32(st))
		}
		names, r, err := nextString(rest[4:], "macro list")
		if err != nil {
			return fmt.Errorf("OPTNEG: %w", err)
		}
		o.Macros = append(o.Macros, MacroRequest{Stage: st, Names: names})
		rest = r
	}
	return nil
}

// Connect is the SMTP client's connection ('C').
type Connect struct {
	// Host is the client's host name as the MTA resolved it (or
	// "[addr]").
	Host string
	// Family is the address family: FamilyInet, FamilyInet6, FamilyUnix
	// or FamilyUnknown.
	Family Family
	// Port is the client's port (0 for FamilyUnix and FamilyUnknown).
	Port uint16
	// Addr is the IP address, or the socket path for FamilyUnix; empty
	// for FamilyUnknown.
	Addr string
}

// Code returns CmdConnect.
func (*Connect) Code() Code { return CmdConnect }

// AppendData appends host, family and, unless the family is unknown,
// port and address.
func (c *Connect) AppendData(dst []byte) ([]byte, error) {
	dst, err := appendString(dst, c.Host, "host name")
	if err != nil {
		return dst, err
	}
	switch c.Family {
	case FamilyUnknown:
		return append(dst, byte(c.Family)), nil
	case FamilyInet, FamilyInet6, FamilyUnix:
		dst = append(dst, byte(c.Family))
		dst = binary.BigEndian.AppendUint16(dst, c.Port)
		return appendString(dst, c.Addr, "address")
	}
	return dst, fmt.Errorf("%w: address family %v", ErrInvalid, c.Family)
}

// DecodeData reads a CONNECT payload.
func (c *Connect) DecodeData(data []byte) error {
	host, rest, err := nextField(data, "host name")
	if err != nil {
		return fmt.Errorf("CONNECT: %w", err)
	}
	*c = Connect{}
	if len(rest) == 0 {
		return fmt.Errorf("%w: CONNECT without an address family", ErrMalformed)
	}
	c.Family, rest = Family(rest[0]), rest[1:]
	switch c.Family {
	case FamilyUnknown:
		c.Host = string(host)
		return noTrailing(rest, CmdConnect)
	case FamilyInet, FamilyInet6, FamilyUnix:
	default:
		return fmt.Errorf("%w: CONNECT: unknown address family %v", ErrMalformed, c.Family)
	}
	if len(rest) < 2 {
		return fmt.Errorf("%w: CONNECT: truncated port", ErrMalformed)
	}
	c.Port = binary.BigEndian.Uint16(rest)
	addr, err := lastField(rest[2:], CmdConnect, "address")
	if err != nil {
		return err
	}
	// One string holds the host name and the address (the NUL, family
	// and port between them), one allocation instead of two.
	at := len(host) + 4
	all := string(data[:at+len(addr)])
	c.Host, c.Addr = all[:len(host)], all[at:]
	return nil
}

// Helo is the HELO or EHLO name ('H').
type Helo struct{ Name string }

// Code returns CmdHelo.
func (*Helo) Code() Code { return CmdHelo }

// AppendData appends the name.
func (h *Helo) AppendData(dst []byte) ([]byte, error) { return appendString(dst, h.Name, "HELO name") }

// DecodeData reads the name.
func (h *Helo) DecodeData(data []byte) (err error) {
	h.Name, err = lastString(data, CmdHelo, "HELO name")
	return err
}

// Mail is MAIL FROM ('M') or, with Rcpt set, RCPT TO ('R'): the address
// as the client gave it (with angle brackets) and the ESMTP arguments.
type Mail struct {
	Rcpt bool     // RCPT TO rather than MAIL FROM
	Addr string   // "<user@example.com>"
	Args []string // "SIZE=1000", ...
}

// Code returns CmdRcpt or CmdMail.
func (m *Mail) Code() Code {
	if m.Rcpt {
		return CmdRcpt
	}
	return CmdMail
}

// AppendData appends the address and the arguments.
func (m *Mail) AppendData(dst []byte) ([]byte, error) {
	dst, err := appendString(dst, m.Addr, "address")
	for _, a := range m.Args {
		if err != nil {
			break
		}
		dst, err = appendString(dst, a, "ESMTP argument")
	}
	return dst, err
}

// DecodeData reads the address and the arguments; Rcpt is kept.
func (m *Mail) DecodeData(data []byte) error {
	addr, rest, err := nextString(data, "address")
	if err != nil {
		return fmt.Errorf("%v: %w", m.Code(), err)
	}
	m.Addr, m.Args = addr, nil
	for len(rest) > 0 {
		var a string
		if a, rest, err = nextString(rest, "ESMTP argument"); err != nil {
			return fmt.Errorf("%v: %w", m.Code(), err)
		}
		m.Args = append(m.Args, a)
	}
	return nil
}

// Header is one message header ('L'), also the payload of ADDHEADER.
type Header struct{ Name, Value string }

// Code returns CmdHeader.
func (*Header) Code() Code { return CmdHeader }

// AppendData appends name and value.
func (h *Header) AppendData(dst []byte) ([]byte, error) { return appendNameValue(dst, h.Name, h.Value) }

// DecodeData reads name and value.
func (h *Header) DecodeData(data []byte) (err error) {
	h.Name, h.Value, err = decodeNameValue(data, CmdHeader)
	return err
}

func appendNameValue(dst []byte, name, value string) ([]byte, error) {
	dst, err := appendString(dst, name, "header name")
	if err != nil {
		return dst, err
	}
	return appendString(dst, value, "header value")
}

func decodeNameValue(data []byte, code Code) (string, string, error) {
	name, rest, err := nextString(data, "header name")
	if err != nil {
		return "", "", fmt.Errorf("%v: %w", code, err)
	}
	value, err := lastString(rest, code, "header value")
	return name, value, err
}

// Body is one body chunk ('B'): raw bytes, CRLF line ends, no NUL
// terminator.
type Body struct{ Chunk []byte }

// Code returns CmdBody.
func (*Body) Code() Code { return CmdBody }

// AppendData appends the chunk.
func (b *Body) AppendData(dst []byte) ([]byte, error) { return append(dst, b.Chunk...), nil }

// DecodeData sets Chunk to data (aliased).
func (b *Body) DecodeData(data []byte) error { b.Chunk = data; return nil }

// EOM is the end of a message ('E'); old MTAs may put a last body chunk
// in it.
type EOM struct{ Chunk []byte }

// Code returns CmdEOM.
func (*EOM) Code() Code { return CmdEOM }

// AppendData appends the chunk, if any.
func (e *EOM) AppendData(dst []byte) ([]byte, error) { return append(dst, e.Chunk...), nil }

// DecodeData sets Chunk to data (aliased; nil if empty).
func (e *EOM) DecodeData(data []byte) error {
	e.Chunk = nil
	if len(data) > 0 {
		e.Chunk = data
	}
	return nil
}

// Unknown is an SMTP command the MTA did not recognise ('U', v3+).
type Unknown struct{ Line string }

// Code returns CmdUnknown.
func (*Unknown) Code() Code { return CmdUnknown }

// AppendData appends the command line.
func (u *Unknown) AppendData(dst []byte) ([]byte, error) {
	return appendString(dst, u.Line, "command line")
}

// DecodeData reads the command line.
func (u *Unknown) DecodeData(data []byte) (err error) {
	u.Line, err = lastString(data, CmdUnknown, "command line")
	return err
}

// Empty is any packet without a payload: the commands ABORT, QUIT,
// QUIT_NC, DATA and EOH, and the responses CONTINUE, ACCEPT, REJECT,
// TEMPFAIL, DISCARD, SHUTDOWN, SKIP, PROGRESS, CONN_FAIL and SETSYMLIST.
type Empty struct{ C Code }

// Code returns C.
func (e *Empty) Code() Code { return e.C }

// AppendData appends nothing.
func (*Empty) AppendData(dst []byte) ([]byte, error) { return dst, nil }

// DecodeData accepts only an empty payload.
func (e *Empty) DecodeData(data []byte) error {
	if len(data) != 0 {
		return fmt.Errorf("%w: %v takes no payload, got %d bytes", ErrMalformed, e.C, len(data))
	}
	return nil
}

// ReplyCode is a custom SMTP reply ('y'): "ddd x.y.z text", possibly
// several lines joined by CRLF ("550-5.7.1 a\r\n550 5.7.1 b"). Both
// directions check it with CheckReplyText.
type ReplyCode struct{ Text string }

// Code returns RespReplyCode.
func (*ReplyCode) Code() Code { return RespReplyCode }

// AppendData checks and appends the reply text.
func (r *ReplyCode) AppendData(dst []byte) ([]byte, error) {
	if err := CheckReplyText(r.Text); err != nil {
		return dst, err
	}
	return appendString(dst, r.Text, "reply")
}

// DecodeData reads and checks the reply text.
func (r *ReplyCode) DecodeData(data []byte) error {
	s, err := lastString(data, RespReplyCode, "reply text")
	if err != nil {
		return err
	}
	if err := CheckReplyText(s); err != nil {
		return fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	r.Text = s
	return nil
}

// MaxReplyLine is the longest reply line CheckReplyText accepts, CRLF
// excluded (RFC 5321 4.5.3.1.5: 512 octets with CRLF).
const MaxReplyLine = 510

// CheckReplyText checks an SMTP reply for REPLYCODE: one or more lines
// joined by CRLF, each starting with the same 4xx or 5xx code, followed
// by '-' on every line but the last and by ' ' (or nothing) on the last;
// printable ASCII or UTF-8 text, no control characters but tab, lines at
// most MaxReplyLine bytes. The error wraps ErrInvalid.
func CheckReplyText(s string) error {
	if s == "" {
		return fmt.Errorf("%w: empty reply", ErrInvalid)
	}
	var code string
	for n := 0; ; n++ {
		line, rest, more := strings.Cut(s, "\r\n")
		if len(line) > MaxReplyLine {
			return fmt.Errorf("%w: reply line %d is %d bytes long, limit %d", ErrInvalid, n+1, len(line), MaxReplyLine)
		}
		if len(line) < 3 || (line[0] != '4' && line[0] != '5') || !isDigit(line[1]) || !isDigit(line[2]) {
			return fmt.Errorf("%w: reply line %d does not start with a 4xx or 5xx code: %q", ErrInvalid, n+1, clip(line))
		}
		if code == "" {
			code = line[:3]
		} else if line[:3] != code {
			return fmt.Errorf("%w: reply line %d has code %s, line 1 has %s", ErrInvalid, n+1, line[:3], code)
		}
		switch {
		case len(line) == 3 && !more:
		case len(line) > 3 && line[3] == '-' && more, len(line) > 3 && line[3] == ' ' && !more:
		case more:
			return fmt.Errorf("%w: reply line %d: want '-' after the code of a line that is not the last", ErrInvalid, n+1)
		default:
			return fmt.Errorf("%w: reply line %d: want ' ' after the code of the last line", ErrInvalid, n+1)
		}
		for i := 0; i < len(line); i++ {
			if c := line[i]; (c < 0x20 && c != '\t') || c == 0x7f {
				return fmt.Errorf("%w: control character %#02x in reply line %d", ErrInvalid, c, n+1)
			}
		}
		if !more {
			return nil
		}
		s = rest
	}
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func clip(s string) string {
	if len(s) > 32 {
		return s[:32] + "..."
	}
	return s
}

// AddHeader appends a header at the end of the message's header
// ('h', needs ActAddHeader).
type AddHeader struct{ Name, Value string }

// Code returns RespAddHeader.
func (*AddHeader) Code() Code { return RespAddHeader }

// AppendData appends name and value.
func (h *AddHeader) AppendData(dst []byte) ([]byte, error) {
	return appendNameValue(dst, h.Name, h.Value)
}

// DecodeData reads name and value.
func (h *AddHeader) DecodeData(data []byte) (err error) {
	h.Name, h.Value, err = decodeNameValue(data, RespAddHeader)
	return err
}

// ChangeHeader is CHGHEADER ('m', needs ActChangeHeader): set the
// Index-th (1-based) header called Name to Value, deleting it if Value is
// empty; or, with Insert, INSHEADER ('i', needs ActAddHeader): insert a
// header at position Index (0 = first).
type ChangeHeader struct {
	Insert      bool
	Index       uint32
	Name, Value string
}

// Code returns RespInsHeader or RespChgHeader.
func (h *ChangeHeader) Code() Code {
	if h.Insert {
		return RespInsHeader
	}
	return RespChgHeader
}

// AppendData appends index, name and value.
func (h *ChangeHeader) AppendData(dst []byte) ([]byte, error) {
	dst = binary.BigEndian.AppendUint32(dst, h.Index)
	return appendNameValue(dst, h.Name, h.Value)
}

// DecodeData reads index, name and value; Insert is kept.
func (h *ChangeHeader) DecodeData(data []byte) (err error) {
	if len(data) < 4 {
		return fmt.Errorf("%w: %v: truncated index", ErrMalformed, h.Code())
	}
	h.Index = binary.BigEndian.Uint32(data)
	h.Name, h.Value, err = decodeNameValue(data[4:], h.Code())
	return err
}

// AddRcpt adds a recipient ('+', needs ActAddRcpt) or, with Par, a
// recipient with ESMTP arguments ('2', ADDRCPT_PAR, needs ActAddRcptPar).
type AddRcpt struct {
	Par  bool   // send ADDRCPT_PAR, with Args
	Addr string // the recipient's address
	// Args are the ESMTP arguments, space-separated, for ADDRCPT_PAR only.
	Args string
}

// Code returns RespAddRcptPar or RespAddRcpt.
func (a *AddRcpt) Code() Code {
	if a.Par {
		return RespAddRcptPar
	}
	return RespAddRcpt
}

// AppendData appends the address and, for ADDRCPT_PAR with arguments,
// the arguments.
func (a *AddRcpt) AppendData(dst []byte) ([]byte, error) {
	if !a.Par && a.Args != "" {
		return dst, fmt.Errorf("%w: ESMTP arguments need ADDRCPT_PAR", ErrInvalid)
	}
	return appendAddrArgs(dst, a.Addr, a.Args)
}

// DecodeData reads the address and the optional arguments; Par is kept.
func (a *AddRcpt) DecodeData(data []byte) (err error) {
	if !a.Par {
		a.Args = ""
		a.Addr, err = lastString(data, RespAddRcpt, "address")
		return err
	}
	a.Addr, a.Args, err = decodeAddrArgs(data, RespAddRcptPar)
	return err
}

func appendAddrArgs(dst []byte, addr, args string) ([]byte, error) {
	dst, err := appendString(dst, addr, "address")
	if err != nil || args == "" {
		return dst, err
	}
	return appendString(dst, args, "ESMTP arguments")
}

func decodeAddrArgs(data []byte, code Code) (string, string, error) {
	addr, rest, err := nextString(data, "address")
	if err != nil {
		return "", "", fmt.Errorf("%v: %w", code, err)
	}
	if len(rest) == 0 {
		return addr, "", nil
	}
	args, err := lastString(rest, code, "ESMTP arguments")
	return addr, args, err
}

// DelRcpt deletes a recipient ('-', needs ActDelRcpt); Addr must be the
// RCPT address as the MTA sent it.
type DelRcpt struct{ Addr string }

// Code returns RespDelRcpt.
func (*DelRcpt) Code() Code { return RespDelRcpt }

// AppendData appends the address.
func (d *DelRcpt) AppendData(dst []byte) ([]byte, error) { return appendString(dst, d.Addr, "address") }

// DecodeData reads the address.
func (d *DelRcpt) DecodeData(data []byte) (err error) {
	d.Addr, err = lastString(data, RespDelRcpt, "address")
	return err
}

// ChangeFrom replaces the envelope sender ('e', CHGFROM, needs
// ActChangeFrom), with optional ESMTP arguments.
type ChangeFrom struct{ Addr, Args string }

// Code returns RespChgFrom.
func (*ChangeFrom) Code() Code { return RespChgFrom }

// AppendData appends the address and the arguments, if any.
func (c *ChangeFrom) AppendData(dst []byte) ([]byte, error) {
	return appendAddrArgs(dst, c.Addr, c.Args)
}

// DecodeData reads the address and the optional arguments.
func (c *ChangeFrom) DecodeData(data []byte) (err error) {
	c.Addr, c.Args, err = decodeAddrArgs(data, RespChgFrom)
	return err
}

// ReplaceBody is one chunk of a new body ('b', REPLBODY, needs
// ActChangeBody); a new body is sent as consecutive chunks of at most
// MaxChunk bytes.
type ReplaceBody struct{ Chunk []byte }

// Code returns RespReplBody.
func (*ReplaceBody) Code() Code { return RespReplBody }

// AppendData appends the chunk.
func (r *ReplaceBody) AppendData(dst []byte) ([]byte, error) { return append(dst, r.Chunk...), nil }

// DecodeData sets Chunk to data (aliased).
func (r *ReplaceBody) DecodeData(data []byte) error { r.Chunk = data; return nil }

// Quarantine puts the message on hold with a reason ('q', needs
// ActQuarantine).
type Quarantine struct{ Reason string }

// Code returns RespQuarantine.
func (*Quarantine) Code() Code { return RespQuarantine }

// AppendData appends the reason.
func (q *Quarantine) AppendData(dst []byte) ([]byte, error) {
	return appendString(dst, q.Reason, "quarantine reason")
}

// DecodeData reads the reason.
func (q *Quarantine) DecodeData(data []byte) (err error) {
	q.Reason, err = lastString(data, RespQuarantine, "quarantine reason")
	return err
}
