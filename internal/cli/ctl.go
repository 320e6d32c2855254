package cli

// `sluice ctl`: MIMEDefang's md-mx-ctrl (3.3, with 3.7.1's jsonstatus and
// jsonload1), the control client of the
// multiplexor (docs/protocols/mimedefang-multiplexor.md, "md-mx-ctrl"): the same flags, parsed as GNU getopt parses
// them (options may follow the command unless POSIXLY_CORRECT is set), the
// same default socket, usage text, exit codes, commands and output
// (internal/muxctl holds the protocol and the formatting).
//
// Differences from the reference, on purpose:
//   - The connect (30 s) and the exchange (5 min) are bounded; the
//     reference waits forever. A timeout is reported as
//     "ERROR MXCommand: read: Connection timed out: Is multiplexor running?"
//     (or connect:, write:) with status 1.
//   - A server that closes before the request is written gives
//     "ERROR MXCommand: write: Broken pipe: ..." and status 1; the
//     reference is killed by SIGPIPE.
//   - Where the reference reads uninitialised memory (barstatus, load and
//     hload replies missing numbers) the missing numbers are 0.
//   - As `sluice ctl` the program is named so in getopt's messages and the
//     usage line; as md-mx-ctrl it is argv[0] and "md-mx-ctrl", as in the
//     reference.
//   - The commands md-mx-ctrl gained after 3.3 (jsonstatus, jsonload1 N)
//     print 3.7.1's JSON; 3.3 sends them on to the multiplexor as any
//     unknown command (internal/mux/differences.go).

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"sluice/internal/muxctl"
)

// ctlReferenceName is md-mx-ctrl's program name.
const ctlReferenceName = "md-mx-ctrl"

// ctlSetup is what ctlCmd takes from the process and tests set directly.
type ctlSetup struct {
	prog  string // argv[0] in getopt's messages
	name  string // the program in the usage line
	stdin io.Reader
	posix bool // POSIXLY_CORRECT is set: options end at the first operand
	// Timeouts for muxctl.Client (0: its defaults).
	dialTimeout, timeout time.Duration
}

func ctlCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	s := ctlSetup{prog: "sluice ctl", name: "sluice ctl", stdin: os.Stdin}
	if filepath.Base(os.Args[0]) == ctlReferenceName {
		s.prog, s.name = os.Args[0], ctlReferenceName
	}
	_, s.posix = os.LookupEnv("POSIXLY_CORRECT")
	return runCtl(ctx, s, args, stdout, stderr)
}

func runCtl(ctx context.Context, s ctlSetup, args []string, stdout, stderr io.Writer) int {
	client := &muxctl.Client{Socket: muxctl.DefaultSocket, DialTimeout: s.dialTimeout, Timeout: s.timeout}
	errw := stderr // with -i, errors go with the results
	readStdin := false
	// -h and errors show the usage, then ask the multiplexor (the socket
	// known so far) for its command list.
	usage := func() {
		fmt.Fprintf(stderr, "Usage: %s [options] command\n\n", s.name)
		fmt.Fprint(stderr, "Options:\n",
			"-h              -- Display help\n",
			"-s path         -- Specify path to multiplexor socket\n",
			"-i              -- Read commands from stdin\n")
		reply, err := client.Exchange(ctx, "help\n", muxctl.MaxLine)
		if err != nil {
			fmt.Fprintln(errw, muxctl.Message(err))
			return
		}
		if i := bytes.IndexByte(reply, 0); i >= 0 {
			reply = reply[:i]
		}
		fmt.Fprintf(stderr, "\nPossible commands:\n%s", reply)
	}
	help := false
	operands, err := getopt(args, "s", "ih", s.posix, func(c byte, val string) (bool, error) {
		switch c {
		case 'i':
			readStdin, errw = true, stdout
		case 'h':
			help = true
			return false, nil
		case 's':
			client.Socket = val
		}
		return true, nil
	})
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", s.prog, err)
		usage()
		return 1
	}
	if help {
		usage()
		return 0
	}
	if !readStdin {
		if len(operands) == 0 {
			usage()
			return 1
		}
		return client.Run(ctx, muxctl.Line(operands), stdout, errw)
	}
	// One request per line as it comes, newline included (it is what
	// tells "status\n" from "status"), at most MaxLine-1 bytes at a time,
	// cut at a NUL; the exit status is always 0.
	in := bufio.NewReaderSize(s.stdin, muxctl.MaxLine-1)
	for ctx.Err() == nil {
		line, err := in.ReadSlice('\n')
		if len(line) > 0 {
			if i := bytes.IndexByte(line, 0); i >= 0 {
				line = line[:i]
			}
			client.Run(ctx, string(line), stdout, errw)
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			break
		}
	}
	return 0
}
