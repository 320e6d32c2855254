// Package classfile reads class tables in the format of XLA for Sendmail:
// one class per line, "[L]mask queue refuse", with "#" comments.
//
//	# Lname            #queue #refuse
//	L*.insa-lyon.fr         8       3
//	L*                     15      16
//
// XLA's "L/path" line, which named its shared counter file, is accepted and
// reported as ignored: sluice keeps its counts in its own store.
package classfile

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"sluice/internal/hostmask"

	"sluice/internal/safefs"
)

// Limits on what a class file may hold, so a wrong file cannot exhaust
// memory.
const (
	MaxLineLen = 4096
	MaxEntries = 10000
	MaxCap     = 1 << 20 // largest queue or refuse figure
)

// Entry is one class line.
type Entry struct {
	Line   int           // its line number in the file
	Mask   hostmask.Mask // the peers it holds
	Queue  int           // cap on all sessions, incoming and outgoing
	Refuse int           // cap on incoming sessions
}

// Error is a problem on one line of a class file.
type Error struct {
	File string // the name given to Parse
	Line int    // 1-based
	Msg  string // what is wrong
}

// Error is "file:line: message".
func (e *Error) Error() string { return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg) }

// Result is what a class file holds.
type Result struct {
	Entries []Entry // the classes, in the file's order
	// Notes are non-fatal remarks (ignored XLA counter-file lines).
	Notes []string
}

// MaxFileSize caps a class file: far above any class table.
const MaxFileSize = 64 << 20

// ReadFile parses the class file at path.
func ReadFile(path string) (Result, []error) {
	// Refused unless a regular file (a FIFO would hang a reload), and
	// reached without following a link another user could plant; as
	// root, refused unless root's and writable by nobody else.
	f, err := safefs.OpenTrusted(path, MaxFileSize)
	if err != nil {
		return Result{}, []error{fmt.Errorf("open class file: %w", err)}
	}
	defer f.Close()
	return Parse(f, path)
}

// Parse reads a class table from r; name is used in messages. It returns
// every error found, each with its line number.
//
// A file is either in XLA's sendmail.cf form, where every line starts with
// "L", or in plain form, where none does; the form is decided by the whole
// file, so a plain file may name a host such as "localhost".
func Parse(r io.Reader, name string) (Result, []error) {
	var res Result
	var errs []error
	type line struct {
		no     int
		fields []string
	}
	var lines []line
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 512), MaxLineLen)
	lineNo := 0
	allL := true
	for sc.Scan() {
		lineNo++
		text := sc.Text()
		if i := strings.IndexByte(text, '#'); i >= 0 {
			text = text[:i]
		}
		fields := strings.Fields(text)
		if len(fields) == 0 {
			continue
		}
		if len(lines) >= MaxEntries {
			errs = append(errs, &Error{File: name, Line: lineNo, Msg: fmt.Sprintf("more than %d classes", MaxEntries)})
			return res, errs
		}
		if !strings.HasPrefix(fields[0], "L") || len(fields[0]) == 1 {
			allL = false
		}
		lines = append(lines, line{lineNo, fields})
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			errs = append(errs, &Error{File: name, Line: lineNo + 1, Msg: fmt.Sprintf("line longer than %d bytes", MaxLineLen)})
		} else {
			errs = append(errs, fmt.Errorf("read %s: %w", name, err))
		}
		return res, errs
	}
	for _, l := range lines {
		fail := func(format string, args ...any) {
			errs = append(errs, &Error{File: name, Line: l.no, Msg: fmt.Sprintf(format, args...)})
		}
		mask := l.fields[0]
		if allL {
			mask = mask[1:]
		}
		if strings.HasPrefix(mask, "/") && len(l.fields) == 1 {
			res.Notes = append(res.Notes, fmt.Sprintf("%s:%d: XLA counter file %q ignored: sluice keeps counts in its own store", name, l.no, mask))
			continue
		}
		if len(l.fields) != 3 {
			fail("want \"mask queue refuse\", got %d fields", len(l.fields))
			continue
		}
		m, err := hostmask.Parse(mask)
		if err != nil {
			fail("%v", err)
			continue
		}
		q, errQ := parseCap(l.fields[1])
		if errQ != nil {
			fail("queue: %v", errQ)
		}
		rf, errR := parseCap(l.fields[2])
		if errR != nil {
			fail("refuse: %v", errR)
		}
		if errQ != nil || errR != nil {
			continue
		}
		res.Entries = append(res.Entries, Entry{Line: l.no, Mask: m, Queue: q, Refuse: rf})
	}
	return res, errs
}

func parseCap(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q is not a non-negative integer", s)
	}
	if n > MaxCap {
		return 0, fmt.Errorf("%d is larger than %d", n, MaxCap)
	}
	return n, nil
}
