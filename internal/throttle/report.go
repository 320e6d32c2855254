package throttle

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// qmail-remote's report (qmail-remote(8)): some recipient reports, then
// one message report, each a letter, a human-readable text and a NUL:
//
//	r  recipient accepted
//	h  recipient rejected permanently (5xx)
//	s  recipient rejected temporarily (4xx)
//	K  message accepted     Z  temporary failure     D  permanent failure
//
// qmail-rspawn runs qmail-remote with one recipient and reads the report
// from its stdout (stderr is the same pipe): an h first makes the
// delivery a permanent failure, an s a temporary one, otherwise the
// message report decides.

// MaxReport caps the qmail-remote report sluice reads and rewrites; a
// longer one is passed on untouched. qmail-remote keeps at most 5,000
// bytes of the relay's text per report.
const MaxReport = 64 << 10

// maxReportLines caps the reports in one qmail-remote report (recipients
// plus the message report).
const maxReportLines = 1000

// QmailLine is one report of qmail-remote's output.
type QmailLine struct {
	Kind byte   // r, h, s (a recipient) or K, Z, D (the message)
	Text string // the text after the letter, without the NUL
	Off  int    // offset of the letter in the report
}

// ErrReport is wrapped by every error about a malformed qmail-remote report.
var ErrReport = errors.New("malformed qmail-remote report")

// ParseQmailReport splits qmail-remote's output into its reports. It must
// be recipient reports followed by exactly one message report, each
// NUL-terminated, nothing after, at most MaxReport bytes.
func ParseQmailReport(b []byte) ([]QmailLine, error) {
	if len(b) > MaxReport {
		return nil, fmt.Errorf("%w: longer than %d bytes", ErrReport, MaxReport)
	}
	if len(b) == 0 {
		return nil, fmt.Errorf("%w: empty", ErrReport)
	}
	if b[len(b)-1] != 0 {
		return nil, fmt.Errorf("%w: the last report has no NUL", ErrReport)
	}
	var out []QmailLine
	for off := 0; off < len(b); {
		end := off + bytes.IndexByte(b[off:], 0)
		if end == off {
			return nil, fmt.Errorf("%w: empty report at byte %d", ErrReport, off)
		}
		if len(out) > 0 && isMessageKind(out[len(out)-1].Kind) {
			return nil, fmt.Errorf("%w: a report after the message report at byte %d", ErrReport, off)
		}
		if len(out) == maxReportLines {
			return nil, fmt.Errorf("%w: more than %d reports", ErrReport, maxReportLines)
		}
		k := b[off]
		if !strings.ContainsRune("rhsKZD", rune(k)) {
			return nil, fmt.Errorf("%w: unknown report letter %q at byte %d", ErrReport, k, off)
		}
		out = append(out, QmailLine{Kind: k, Text: string(b[off+1 : end]), Off: off})
		off = end + 1
	}
	if !isMessageKind(out[len(out)-1].Kind) {
		return nil, fmt.Errorf("%w: no message report (K, Z or D)", ErrReport)
	}
	return out, nil
}

func isMessageKind(k byte) bool { return k == 'K' || k == 'Z' || k == 'D' }

// temporaryOf is the temporary letter for a permanent one.
var temporaryOf = map[byte]byte{'h': 's', 'D': 'Z'}

// RewriteQmailReport returns report with the permanent reports flagged T in
// verdict (one flag per line, as the server sent them) made temporary: h
// becomes s and D becomes Z. Nothing else changes, byte for byte.
func RewriteQmailReport(report []byte, lines []QmailLine, verdict string) []byte {
	out := bytes.Clone(report)
	for i, l := range lines {
		if i < len(verdict) && verdict[i] == VerdictTemporary {
			if t, ok := temporaryOf[l.Kind]; ok {
				out[l.Off] = t
			}
		}
	}
	return out
}

// ResultLine is one line of a sender's result as the server reads it: a
// qmail-remote report (Kind r, h, s, K, Z, D) or a command's exit (Kind x,
// Text the exit status, a space and the end of its output).
type ResultLine struct {
	Kind byte
	Text string
}

// Verdict flags, one per result line.
const (
	VerdictKeep      = '.'
	VerdictTemporary = 'T'
)

// MaxResultLines caps the lines of one REPORT; maxResultText the text of
// one line (longer text is cut).
const (
	MaxResultLines = 64
	maxResultText  = 400
)

// ResultFromQmail turns a parsed qmail-remote report into result lines
// (ok false when it has more than MaxResultLines reports).
func ResultFromQmail(lines []QmailLine) ([]ResultLine, bool) {
	if len(lines) > MaxResultLines {
		return nil, false
	}
	out := make([]ResultLine, len(lines))
	for i, l := range lines {
		out[i] = ResultLine{Kind: l.Kind, Text: l.Text}
	}
	return out, true
}

// ResultFromExit is the result line of a command that exited with status
// and printed output (its end is kept).
func ResultFromExit(status int, output []byte) ResultLine {
	if len(output) > maxResultText {
		output = output[len(output)-maxResultText:]
	}
	return ResultLine{Kind: 'x', Text: strconv.Itoa(status) + " " + string(output)}
}

// ExitStatus reads the status of an x line.
func (l ResultLine) ExitStatus() (int, string, bool) {
	s, text, _ := strings.Cut(l.Text, " ")
	n, err := strconv.Atoi(s)
	if l.Kind != 'x' || err != nil || n < 0 || n > 255 {
		return 0, "", false
	}
	return n, text, true
}

// FormatReport is the REPORT request for lines: "REPORT <n>\n", then each
// line's kind and text on a line of its own (non-printable bytes as ?,
// cut to 400 bytes).
func FormatReport(lines []ResultLine) string {
	var b strings.Builder
	fmt.Fprintf(&b, "REPORT %d\n", len(lines))
	for _, l := range lines {
		t := []byte(l.Text)
		if len(t) > maxResultText {
			t = t[:maxResultText]
		}
		for i, c := range t {
			if c < ' ' || c > '~' {
				t[i] = '?'
			}
		}
		b.WriteByte(l.Kind)
		b.Write(t)
		b.WriteByte('\n')
	}
	return b.String()
}

// ParseReportHeader reads a "REPORT <n>" line.
func ParseReportHeader(line string) (int, error) {
	n, err := strconv.Atoi(strings.TrimPrefix(line, "REPORT "))
	if !strings.HasPrefix(line, "REPORT ") || err != nil || n < 1 || n > MaxResultLines {
		return 0, fmt.Errorf("%w: want \"REPORT <1..%d>\", got %q", ErrProtocol, MaxResultLines, printable(line))
	}
	return n, nil
}

// ParseResultLine reads one line of a REPORT.
func ParseResultLine(line string) (ResultLine, error) {
	if line == "" || !strings.ContainsRune("rhsKZDx", rune(line[0])) {
		return ResultLine{}, fmt.Errorf("%w: bad result line %q", ErrProtocol, printable(line))
	}
	if len(line) > 1+maxResultText {
		return ResultLine{}, fmt.Errorf("%w: result line longer than %d bytes", ErrProtocol, 1+maxResultText)
	}
	for i := 1; i < len(line); i++ {
		if c := line[i]; c < ' ' || c > '~' {
			return ResultLine{}, fmt.Errorf("%w: non-printable byte in a result line at %d", ErrProtocol, i)
		}
	}
	r := ResultLine{Kind: line[0], Text: line[1:]}
	if r.Kind == 'x' {
		if _, _, ok := r.ExitStatus(); !ok {
			return ResultLine{}, fmt.Errorf("%w: bad exit line %q", ErrProtocol, printable(line))
		}
	}
	return r, nil
}

// ParseVerdict reads a "VERDICT <flags>" line for n result lines.
func ParseVerdict(line string, n int) (string, error) {
	flags, ok := strings.CutPrefix(line, "VERDICT ")
	if !ok || len(flags) != n || strings.Trim(flags, string([]byte{VerdictKeep, VerdictTemporary})) != "" {
		return "", fmt.Errorf("%w: want \"VERDICT\" and %d flags, got %q", ErrProtocol, n, printable(line))
	}
	return flags, nil
}
