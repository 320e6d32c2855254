package wire

import "fmt"

// DecodeCommand decodes a packet from the MTA, as DecodeResponse does a
// milter's (the engine decodes commands itself, into reused messages).
// An unknown code is ErrMalformed.
func DecodeCommand(p Packet) (Msg, error) {
	m := NewCommand(p.Code)
	if m == nil {
		return nil, fmt.Errorf("%w: unknown command code %v", ErrMalformed, p.Code)
	}
	if err := m.DecodeData(p.Data); err != nil {
		return nil, err
	}
	return m, nil
}

// NewCommand returns an empty message of the type that command code c
// decodes to, or nil for a code that is not a command.
func NewCommand(c Code) Msg {
	switch c {
	case CmdOptNeg:
		return new(OptNeg)
	case CmdMacro:
		return new(Macro)
	case CmdConnect:
		return new(Connect)
	case CmdHelo:
		return new(Helo)
	case CmdMail:
		return &Mail{}
	case CmdRcpt:
		return &Mail{Rcpt: true}
	case CmdHeader:
		return new(Header)
	case CmdBody:
		return new(Body)
	case CmdEOM:
		return new(EOM)
	case CmdUnknown:
		return new(Unknown)
	case CmdAbort, CmdQuit, CmdQuitNC, CmdData, CmdEOH:
		return &Empty{C: c}
	}
	return nil
}
