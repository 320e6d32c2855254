package wire

import (
	"bytes"
	"fmt"
	"iter"
	"strings"
)

// Macro is a macro packet ('D'): the values of Sendmail macros for the
// command that follows.
type Macro struct {
	// Cmd is the code of the command the macros belong to.
	Cmd Code
	// NameValues alternates names and values ("j", "mx.example",
	// "{daemon_name}", "smtpd"). Names are as the MTA sent them, braces
	// included.
	NameValues []string
}

// Code returns CmdMacro.
func (*Macro) Code() Code { return CmdMacro }

// AppendData appends the command code and the pairs.
func (m *Macro) AppendData(dst []byte) ([]byte, error) {
	if len(m.NameValues)%2 != 0 {
		return dst, fmt.Errorf("%w: odd number of macro strings (%d)", ErrInvalid, len(m.NameValues))
	}
	dst = append(dst, byte(m.Cmd))
	var err error
	for _, s := range m.NameValues {
		if dst, err = appendString(dst, s, "macro"); err != nil {
			return dst, err
		}
	}
	return dst, nil
}

// DecodeData reads the command code and the pairs; an odd number of
// strings is malformed (DecodeMacroList).
func (m *Macro) DecodeData(data []byte) error {
	cmd, l, err := DecodeMacroList(data)
	*m = Macro{Cmd: cmd}
	if err != nil || l == "" {
		return err
	}
	m.NameValues = make([]string, 0, strings.Count(string(l), "\x00"))
	for name, value := range l.All() {
		m.NameValues = append(m.NameValues, name, value)
	}
	return nil
}

// MacroList is a MACRO packet's names and values as the MTA sent them:
// each NUL-terminated, a name and its value after it. It is what a
// milter session keeps of a packet: one string, walked when a macro is
// asked for, which most sessions never do.
type MacroList string

// DecodeMacroList reads a MACRO packet's command code and its list,
// checked as DecodeData checks it (every string NUL-terminated, each name
// with a value), in one string.
func DecodeMacroList(data []byte) (Code, MacroList, error) {
	if len(data) == 0 {
		return 0, "", fmt.Errorf("%w: MACRO without a command code", ErrMalformed)
	}
	cmd, rest := Code(data[0]), data[1:]
	if len(rest) == 0 {
		return cmd, "", nil
	}
	if rest[len(rest)-1] != 0 {
		return cmd, "", fmt.Errorf("MACRO: %w: macro without its terminating NUL", ErrMalformed)
	}
	if bytes.Count(rest, []byte{0})%2 != 0 {
		name := rest[bytes.LastIndexByte(rest[:len(rest)-1], 0)+1 : len(rest)-1]
		return cmd, "", fmt.Errorf("%w: MACRO: name %q without a value", ErrMalformed, name)
	}
	return cmd, MacroList(rest), nil
}

// All yields the list's names and values in order. The list is one that
// DecodeMacroList returned (or empty).
func (l MacroList) All() iter.Seq2[string, string] {
	return func(yield func(string, string) bool) {
		s := string(l)
		for {
			i := strings.IndexByte(s, 0)
			if i < 0 {
				return
			}
			name := s[:i]
			s = s[i+1:]
			j := strings.IndexByte(s, 0)
			if j < 0 || !yield(name, s[:j]) {
				return
			}
			s = s[j+1:]
		}
	}
}
