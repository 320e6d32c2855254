package cli

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"time"

	"sluice/internal/throttle"
)

// verdictTimeout bounds the wait for the server's verdict on a result.
const verdictTimeout = 5 * time.Second

// runQmailRemote runs qmail-remote with its report captured, tells the
// server the report (cl nil: sent unthrottled, nobody to tell), and
// prints it with the permanent failures the server blames on a ban made
// temporary. A report that is malformed or too large is passed on
// untouched.
func runQmailRemote(cl *throttle.Client, argv []string, stdout, stderr io.Writer) int {
	out := &capWriter{max: throttle.MaxReport, w: stdout}
	status := runCommand(argv, out, os.Stderr, stderr)
	if cl == nil {
		out.flush()
		return status
	}
	report := out.buf.Bytes()
	lines, err := throttle.ParseQmailReport(report)
	result, ok := throttle.ResultFromQmail(lines)
	if status != 0 || out.over || err != nil || !ok {
		cl.Done() // sent: the slot stays used; nothing to judge
		out.flush()
		return status
	}
	defer cl.Close() // a REPORT says the slot was used
	verdict, err := cl.Report(result, verdictTimeout)
	if err != nil {
		out.flush() // the server is gone: the report as it was
		return status
	}
	stdout.Write(throttle.RewriteQmailReport(report, lines, verdict))
	return status
}

// runReported runs a command with its stderr also kept (its end), tells
// the server the exit status and that text, and exits with the status,
// or with EX_TEMPFAIL when the server blames the failure on a ban.
func runReported(cl *throttle.Client, argv []string, stdout, stderr io.Writer) int {
	tail := &tailWriter{max: 400}
	status := runCommand(argv, os.Stdout, io.MultiWriter(os.Stderr, tail), stderr)
	if cl == nil {
		return status
	}
	if status > 255 || status < 0 {
		cl.Done() // sent: the slot stays used; nothing to judge
		return status
	}
	defer cl.Close() // a REPORT says the slot was used
	verdict, err := cl.Report([]throttle.ResultLine{throttle.ResultFromExit(status, tail.b)}, verdictTimeout)
	if err != nil {
		fmt.Fprintf(stderr, "sluice throttle: %v\n", err)
		return status
	}
	if verdict == string(rune(throttle.VerdictTemporary)) {
		fmt.Fprintf(stderr, "sluice throttle: exit status %d is the relay's ban: exiting %d (try again later)\n", status, exTempFail)
		return exTempFail
	}
	return status
}

// capWriter keeps up to max bytes; beyond that it writes what it holds,
// and everything after, to w.
type capWriter struct {
	max  int
	w    io.Writer
	buf  bytes.Buffer
	over bool
}

func (c *capWriter) Write(p []byte) (int, error) {
	if !c.over && c.buf.Len()+len(p) <= c.max {
		return c.buf.Write(p)
	}
	if !c.over {
		c.over = true
		c.flush()
	}
	return c.w.Write(p)
}

// flush writes what is held.
func (c *capWriter) flush() {
	c.w.Write(c.buf.Bytes())
	c.buf.Reset()
}

// tailWriter keeps the last max bytes written.
type tailWriter struct {
	max int
	b   []byte
}

func (t *tailWriter) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}
