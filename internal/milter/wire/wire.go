// Package wire is the milter protocol's codec: packet framing (a 4-byte
// big-endian length, a code byte, a payload) and a typed form of every
// command the MTA sends and every response and modification a milter
// answers with, for protocol versions 2 to 6, with the option-negotiation
// flags (SMFIF_*, SMFIP_*) and macro stages (SMFIM_*).
//
// Decoding checks a packet's length against a cap before allocating
// anything and never indexes past a payload; every malformed input is an
// error wrapping ErrMalformed, or ErrTooLarge for a length over the cap.
// Names follow libmilter's mfdef.h (Sendmail 8.17) with Go spelling;
// mfdef.h defines no command 'J' and no responses '3' or '6' (SMFIA_INET6
// is a CONNECT family byte, not a code), so those decode as unknown
// codes, which the engine ignores.
package wire

import (
	"errors"
	"strconv"
	"strings"
)

// Code is a packet's code byte: a command (MTA to milter, SMFIC_*) or a
// response (milter to MTA, SMFIR_*).
type Code byte

// Commands, MTA to milter (SMFIC_*).
const (
	CmdAbort   Code = 'A' // end the current message; no reply
	CmdBody    Code = 'B' // a body chunk
	CmdConnect Code = 'C' // SMTP connection information
	CmdMacro   Code = 'D' // macros for the command that follows; no reply
	CmdEOM     Code = 'E' // end of message (SMFIC_BODYEOB)
	CmdHelo    Code = 'H' // HELO/EHLO name
	CmdQuitNC  Code = 'K' // quit, a new connection follows on this socket; no reply
	CmdHeader  Code = 'L' // one header
	CmdMail    Code = 'M' // MAIL FROM
	CmdEOH     Code = 'N' // end of headers
	CmdOptNeg  Code = 'O' // option negotiation
	CmdQuit    Code = 'Q' // quit; no reply
	CmdRcpt    Code = 'R' // RCPT TO
	CmdData    Code = 'T' // DATA (v4+)
	CmdUnknown Code = 'U' // an SMTP command the MTA did not recognise (v3+)
)

// Responses and modifications, milter to MTA (SMFIR_*). The OPTNEG reply
// uses CmdOptNeg's code.
const (
	RespAddRcpt    Code = '+' // add a recipient (modification)
	RespDelRcpt    Code = '-' // delete a recipient (modification)
	RespAddRcptPar Code = '2' // add a recipient with ESMTP args (modification, v6)
	RespShutdown   Code = '4' // 421 and close the SMTP session
	RespAccept     Code = 'a' // accept
	RespReplBody   Code = 'b' // replace the body, one chunk (modification)
	RespContinue   Code = 'c' // continue
	RespDiscard    Code = 'd' // accept and drop the message
	RespChgFrom    Code = 'e' // change the envelope sender (modification, v6)
	RespConnFail   Code = 'f' // cause a connection failure (ignored by MTAs)
	RespAddHeader  Code = 'h' // append a header (modification)
	RespInsHeader  Code = 'i' // insert a header at an index (modification)
	RespSetSymList Code = 'l' // reserved; macro lists travel in the OPTNEG reply
	RespChgHeader  Code = 'm' // change or delete a header (modification)
	RespProgress   Code = 'p' // keep-alive while working
	RespQuarantine Code = 'q' // quarantine the message (modification)
	RespReject     Code = 'r' // 5xx
	RespSkip       Code = 's' // skip further events of this type (v6, if negotiated)
	RespTempfail   Code = 't' // 4xx
	RespReplyCode  Code = 'y' // a custom SMTP reply
)

var codeNames = map[Code]string{
	CmdAbort: "ABORT", CmdBody: "BODY", CmdConnect: "CONNECT", CmdMacro: "MACRO",
	CmdEOM: "EOM", CmdHelo: "HELO", CmdQuitNC: "QUIT_NC", CmdHeader: "HEADER",
	CmdMail: "MAIL", CmdEOH: "EOH", CmdOptNeg: "OPTNEG", CmdQuit: "QUIT",
	CmdRcpt: "RCPT", CmdData: "DATA", CmdUnknown: "UNKNOWN",
	RespAddRcpt: "ADDRCPT", RespDelRcpt: "DELRCPT", RespAddRcptPar: "ADDRCPT_PAR",
	RespShutdown: "SHUTDOWN", RespAccept: "ACCEPT", RespReplBody: "REPLBODY",
	RespContinue: "CONTINUE", RespDiscard: "DISCARD", RespChgFrom: "CHGFROM",
	RespConnFail: "CONN_FAIL", RespAddHeader: "ADDHEADER", RespInsHeader: "INSHEADER",
	RespSetSymList: "SETSYMLIST", RespChgHeader: "CHGHEADER", RespProgress: "PROGRESS",
	RespQuarantine: "QUARANTINE", RespReject: "REJECT", RespSkip: "SKIP",
	RespTempfail: "TEMPFAIL", RespReplyCode: "REPLYCODE",
}

// String returns the libmilter name without its prefix ("CONNECT",
// "REPLYCODE"), or the byte quoted for an unknown code.
func (c Code) String() string {
	if n, ok := codeNames[c]; ok {
		return n
	}
	return strconv.QuoteRune(rune(c))
}

// Action is the set of modifications a milter may make (SMFIF_*),
// negotiated in OPTNEG.
type Action uint32

// Action flags.
const (
	ActAddHeader    Action = 0x001 // SMFIF_ADDHDRS: add and insert headers
	ActChangeBody   Action = 0x002 // SMFIF_CHGBODY: replace the body
	ActAddRcpt      Action = 0x004 // SMFIF_ADDRCPT: add recipients
	ActDelRcpt      Action = 0x008 // SMFIF_DELRCPT: delete recipients
	ActChangeHeader Action = 0x010 // SMFIF_CHGHDRS: change and delete headers
	ActQuarantine   Action = 0x020 // SMFIF_QUARANTINE: quarantine the message
	ActChangeFrom   Action = 0x040 // SMFIF_CHGFROM: change the sender (v6)
	ActAddRcptPar   Action = 0x080 // SMFIF_ADDRCPT_PAR: add recipients with args (v6)
	ActSetSymList   Action = 0x100 // SMFIF_SETSYMLIST: request macros in the OPTNEG reply (v6)

	// AllActions is every action of protocol version 6 (SMFI_CURR_ACTS).
	AllActions Action = 0x1ff
	// V1Actions is what libmilter assumes when an MTA offers 0 (SMFI_V1_ACTS).
	V1Actions Action = 0x0f
)

var actionNames = []string{"ADDHDRS", "CHGBODY", "ADDRCPT", "DELRCPT", "CHGHDRS", "QUARANTINE", "CHGFROM", "ADDRCPT_PAR", "SETSYMLIST"}

// String lists the flags' SMFIF_ names joined by "|".
func (a Action) String() string { return flagString(uint32(a), actionNames) }

// Protocol is the set of protocol step flags (SMFIP_*) negotiated in
// OPTNEG: NO* steps the MTA leaves out, NR_* steps the milter does not
// answer, and capabilities.
type Protocol uint32

// Protocol flags.
const (
	ProtoNoConnect          Protocol = 0x000001   // SMFIP_NOCONNECT: no CONNECT
	ProtoNoHelo             Protocol = 0x000002   // SMFIP_NOHELO: no HELO
	ProtoNoMail             Protocol = 0x000004   // SMFIP_NOMAIL: no MAIL
	ProtoNoRcpt             Protocol = 0x000008   // SMFIP_NORCPT: no RCPT
	ProtoNoBody             Protocol = 0x000010   // SMFIP_NOBODY: no BODY chunks
	ProtoNoHeaders          Protocol = 0x000020   // SMFIP_NOHDRS: no HEADER
	ProtoNoEOH              Protocol = 0x000040   // SMFIP_NOEOH: no EOH
	ProtoNRHeader           Protocol = 0x000080   // SMFIP_NR_HDR (NOHREPL): no reply to HEADER
	ProtoNoUnknown          Protocol = 0x000100   // SMFIP_NOUNKNOWN: no UNKNOWN
	ProtoNoData             Protocol = 0x000200   // SMFIP_NODATA: no DATA
	ProtoSkip               Protocol = 0x000400   // SMFIP_SKIP: the MTA understands SKIP
	ProtoRcptRej            Protocol = 0x000800   // SMFIP_RCPT_REJ: also send rejected RCPTs
	ProtoNRConnect          Protocol = 0x001000   // SMFIP_NR_CONN: no reply to CONNECT
	ProtoNRHelo             Protocol = 0x002000   // SMFIP_NR_HELO: no reply to HELO
	ProtoNRMail             Protocol = 0x004000   // SMFIP_NR_MAIL: no reply to MAIL
	ProtoNRRcpt             Protocol = 0x008000   // SMFIP_NR_RCPT: no reply to RCPT
	ProtoNRData             Protocol = 0x010000   // SMFIP_NR_DATA: no reply to DATA
	ProtoNRUnknown          Protocol = 0x020000   // SMFIP_NR_UNKN: no reply to UNKNOWN
	ProtoNREOH              Protocol = 0x040000   // SMFIP_NR_EOH: no reply to EOH
	ProtoNRBody             Protocol = 0x080000   // SMFIP_NR_BODY: no reply to BODY
	ProtoHeaderLeadingSpace Protocol = 0x100000   // SMFIP_HDR_LEADSPC: header values byte-exact
	ProtoMDS256K            Protocol = 0x10000000 // SMFIP_MDS_256K: libmilter-private
	ProtoMDS1M              Protocol = 0x20000000 // SMFIP_MDS_1M: libmilter-private

	// AllProtocol is every step flag of protocol version 6 (SMFI_CURR_PROT).
	AllProtocol Protocol = 0x1fffff
	// V1Protocol is what libmilter assumes when an MTA offers 0 (SMFI_V1_PROT).
	V1Protocol Protocol = 0x3f
	// NoReplyMask is every NR_* flag.
	NoReplyMask = ProtoNRHeader | ProtoNRConnect | ProtoNRHelo | ProtoNRMail | ProtoNRRcpt |
		ProtoNRData | ProtoNRUnknown | ProtoNREOH | ProtoNRBody
	// NoStepMask is every NO* flag.
	NoStepMask = ProtoNoConnect | ProtoNoHelo | ProtoNoMail | ProtoNoRcpt | ProtoNoBody |
		ProtoNoHeaders | ProtoNoEOH | ProtoNoUnknown | ProtoNoData
)

var protocolNames = []string{
	"NOCONNECT", "NOHELO", "NOMAIL", "NORCPT", "NOBODY", "NOHDRS", "NOEOH", "NR_HDR",
	"NOUNKNOWN", "NODATA", "SKIP", "RCPT_REJ", "NR_CONN", "NR_HELO", "NR_MAIL", "NR_RCPT",
	"NR_DATA", "NR_UNKN", "NR_EOH", "NR_BODY", "HDR_LEADSPC", "", "", "", "", "", "", "",
	"MDS_256K", "MDS_1M",
}

// String lists the flags' SMFIP_ names joined by "|".
func (p Protocol) String() string { return flagString(uint32(p), protocolNames) }

func flagString(v uint32, names []string) string {
	if v == 0 {
		return "0"
	}
	var b strings.Builder
	for i := 0; i < 32; i++ {
		bit := uint32(1) << i
		if v&bit == 0 {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('|')
		}
		if i < len(names) && names[i] != "" {
			b.WriteString(names[i])
		} else {
			b.WriteString("0x" + strconv.FormatUint(uint64(bit), 16))
		}
	}
	return b.String()
}

// NoReplyFor returns the NR_* flag that switches off the reply to cmd, or
// 0 if there is none (OPTNEG, EOM: always answered; MACRO, ABORT, QUIT,
// QUIT_NC: never answered).
func NoReplyFor(cmd Code) Protocol {
	switch cmd {
	case CmdConnect:
		return ProtoNRConnect
	case CmdHelo:
		return ProtoNRHelo
	case CmdMail:
		return ProtoNRMail
	case CmdRcpt:
		return ProtoNRRcpt
	case CmdData:
		return ProtoNRData
	case CmdUnknown:
		return ProtoNRUnknown
	case CmdHeader:
		return ProtoNRHeader
	case CmdEOH:
		return ProtoNREOH
	case CmdBody:
		return ProtoNRBody
	}
	return 0
}

// NoStepFor returns the NO* flag that makes the MTA leave cmd out, or 0.
func NoStepFor(cmd Code) Protocol {
	switch cmd {
	case CmdConnect:
		return ProtoNoConnect
	case CmdHelo:
		return ProtoNoHelo
	case CmdMail:
		return ProtoNoMail
	case CmdRcpt:
		return ProtoNoRcpt
	case CmdData:
		return ProtoNoData
	case CmdUnknown:
		return ProtoNoUnknown
	case CmdHeader:
		return ProtoNoHeaders
	case CmdEOH:
		return ProtoNoEOH
	case CmdBody:
		return ProtoNoBody
	}
	return 0
}

// Stage names a protocol stage in a macro request of the OPTNEG reply
// (SMFIM_*).
type Stage uint32

// Macro stages.
const (
	StageConnect Stage = 0 // SMFIM_CONNECT
	StageHelo    Stage = 1 // SMFIM_HELO
	StageMail    Stage = 2 // SMFIM_ENVFROM
	StageRcpt    Stage = 3 // SMFIM_ENVRCPT
	StageData    Stage = 4 // SMFIM_DATA
	StageEOM     Stage = 5 // SMFIM_EOM
	StageEOH     Stage = 6 // SMFIM_EOH

	// NumStages is the number of macro stages.
	NumStages = 7
)

var stageNames = [NumStages]string{"connect", "helo", "mail", "rcpt", "data", "eom", "eoh"}

// String returns the stage's name ("connect", "eoh").
func (s Stage) String() string {
	if s < NumStages {
		return stageNames[s]
	}
	return "stage" + strconv.FormatUint(uint64(s), 10)
}

// Family is the address family byte of a CONNECT (SMFIA_*).
type Family byte

// Address families.
const (
	FamilyUnknown Family = 'U' // no address
	FamilyUnix    Family = 'L' // a Unix socket path
	FamilyInet    Family = '4' // IPv4
	FamilyInet6   Family = '6' // IPv6
)

// String returns "inet", "inet6", "unix" or "unknown".
func (f Family) String() string {
	switch f {
	case FamilyInet:
		return "inet"
	case FamilyInet6:
		return "inet6"
	case FamilyUnix:
		return "unix"
	case FamilyUnknown:
		return "unknown"
	}
	return strconv.QuoteRune(rune(f))
}

// Errors. Every decoding error wraps ErrMalformed or ErrTooLarge.
var (
	// ErrMalformed is wrapped by every error about a packet that breaks
	// the protocol's format.
	ErrMalformed = errors.New("milter/wire: malformed packet")
	// ErrTooLarge is wrapped by the error for a packet whose length field
	// exceeds the cap.
	ErrTooLarge = errors.New("milter/wire: packet too large")
	// ErrInvalid is wrapped by every error about a value that cannot be
	// encoded (a NUL inside a string, a bad reply code).
	ErrInvalid = errors.New("milter/wire: invalid value")
)
