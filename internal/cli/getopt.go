package cli

import (
	"fmt"
	"strings"
)

// optError is getopt's complaint about one option character, worded as
// glibc's getopt(3) words it (the multiplexor and md-mx-ctrl print it).
type optError struct {
	c       byte
	missing bool // the option takes an argument and none followed
}

// Error is the complaint after "prog: ". The character is written as
// the byte it was, as glibc does.
func (e optError) Error() string {
	if e.missing {
		return fmt.Sprintf("option requires an argument -- '%s'", []byte{e.c})
	}
	return fmt.Sprintf("invalid option -- '%s'", []byte{e.c})
}

// getopt walks args as glibc's getopt(3) does for the short options
// withArg (each takes an argument) and flags: flags cluster ("-ih"), an
// argument is the rest of its word or the next word, "--" ends the
// options. Operands are collected and returned; with posix the first
// one ends the options (POSIXLY_CORRECT), otherwise the options after
// it are still read (GNU permutation). opt is called for each option in
// order with its argument ("" for a flag); it returns false to stop at
// once, as the reference tools do for -h and -v. An unknown option or a
// missing argument stops the walk with an optError.
func getopt(args []string, withArg, flags string, posix bool, opt func(c byte, val string) (more bool, err error)) ([]string, error) {
	var operands []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return append(operands, args[i+1:]...), nil
		}
		if len(a) < 2 || a[0] != '-' {
			if posix {
				return append(operands, args[i:]...), nil
			}
			operands = append(operands, a)
			continue
		}
		for j := 1; j < len(a); j++ {
			c, val := a[j], ""
			switch {
			case strings.IndexByte(withArg, c) >= 0:
				switch {
				case j+1 < len(a):
					val = a[j+1:]
				case i+1 < len(args):
					i++
					val = args[i]
				default:
					return operands, optError{c: c, missing: true}
				}
				j = len(a)
			case strings.IndexByte(flags, c) >= 0:
			default:
				return operands, optError{c: c}
			}
			more, err := opt(c, val)
			if err != nil || !more {
				return operands, err
			}
		}
	}
	return operands, nil
}
