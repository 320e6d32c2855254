// Package limittable reads per-key limit tables: the file a rule's
// `table` names, one key and its limits per line, in the spirit of
// Postfix's texthash: source files.
//
//	# key                  limits (the rule's, replaced for this key)
//	customer@example.com   20/1h
//	bulk@example.net       500/1h exact, 5000/1d smooth burst=50
//	friend@example.org     exempt
//
// A key is the first field of a line, folded to lower case (as Postfix
// folds the keys of its tables); the value is the rest of the line:
// "exempt", or one or more limits in the syntax of a rule's limit,
// separated by commas. "#" starts a comment where a field may start;
// blank lines are skipped. The package decides nothing about mail: the
// governor looks the rule's key up and chooses the limit.
package limittable

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode"

	"sluice/internal/rules"
	"sluice/internal/safefs"
)

// Limits on what a table may hold, so that a wrong file (a log, a dump,
// /dev/zero behind a link) cannot exhaust memory or stall a reload.
const (
	MaxFileSize = 128 << 20 // bytes read, at most
	MaxLineLen  = 1024      // bytes per line, newline included
	MaxKeyLen   = 512       // bytes per key
	MaxEntries  = 2_000_000 // lines with an entry
	MaxLimits   = 8         // limits per entry
	// MaxErrors is how many bad lines are reported one by one; the rest
	// are counted in one last error.
	MaxErrors = 100
)

// Exempt is the value that lets a key through the rule uncounted.
const Exempt = "exempt"

// Entry is what a table says about one key.
type Entry struct {
	Line   int           // its line number in the file
	Exempt bool          // the key is let through, uncounted
	Limits []rules.Limit // otherwise its limits, replacing the rule's (shared: do not modify)
}

// Table is a parsed table. It is immutable once read, so lookups need no
// lock; a reload reads a new one.
type Table struct {
	name   string
	keys   map[string]slot
	values []value
}

// slot is one key's line and its value; the values of a table are kept
// once each however many keys share them (most tables hold a few
// distinct quotas for many customers).
type slot struct {
	line  uint32
	value uint32
}

type value struct {
	text   string // as written, normalized: "20/1h exact, 100/1d exact"
	exempt bool
	limits []rules.Limit
}

// Error is a problem on one line of a table.
type Error struct {
	File string // the name given to Parse
	Line int    // 1-based
	Msg  string // what is wrong
}

// Error is "file:line: message".
func (e *Error) Error() string { return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg) }

// Check, when given to Parse, vets each limit against the rule the table
// serves (a bytes rule takes no exact limit, say); a non-nil error makes
// the line bad.
type Check func(rules.Limit) error

// ReadFile reads the table at path through safefs: a symbolic link
// another user could plant, a FIFO, a device or a file over MaxFileSize
// is refused before anything is read; as root, so is a file another user
// owns or could write (safefs.OpenTrusted).
func ReadFile(path string, check Check) (*Table, []error) {
	f, err := safefs.OpenTrusted(path, MaxFileSize)
	if err != nil {
		return nil, []error{fmt.Errorf("open limit table: %w", err)}
	}
	defer f.Close()
	hint := 0
	if st, err := f.Stat(); err == nil {
		// Sized for lines of about 40 bytes: growing a map of a million
		// keys step by step costs more than the file's read.
		hint = int(min(st.Size()/40, MaxEntries))
	}
	return parse(io.LimitReader(f, MaxFileSize+1), path, check, hint)
}

// Parse reads a table from r; name is used in messages and by Name. It
// returns every bad line (up to MaxErrors, then a count), each with its
// line number. With any error the table is nil: a table is used whole or
// not at all.
func Parse(r io.Reader, name string, check Check) (*Table, []error) {
	return parse(r, name, check, 0)
}

// parse is Parse with room for hint entries made at once.
func parse(r io.Reader, name string, check Check, hint int) (*Table, []error) {
	p := parser{t: &Table{name: name, keys: make(map[string]slot, hint)}, check: check, byText: map[string]uint32{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 512), MaxLineLen)
	var size int64
	for sc.Scan() {
		p.line++
		size += int64(len(sc.Bytes())) + 1
		if size > MaxFileSize+1 {
			p.fail("the table is larger than %d bytes", MaxFileSize)
			break
		}
		if !p.parseLine(sc.Bytes()) {
			break
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			p.line++
			p.fail("line longer than %d bytes", MaxLineLen)
		} else {
			p.errs = append(p.errs, fmt.Errorf("read %s: %w", name, err))
		}
	}
	if p.dropped > 0 {
		p.errs = append(p.errs, fmt.Errorf("%s: %d more bad lines", name, p.dropped))
	}
	if len(p.errs) > 0 {
		return nil, p.errs
	}
	return p.t, nil
}

type parser struct {
	t       *Table
	check   Check
	byText  map[string]uint32 // value text -> index in t.values
	line    int
	errs    []error
	dropped int
}

func (p *parser) fail(format string, args ...any) {
	if len(p.errs) >= MaxErrors {
		p.dropped++
		return
	}
	p.errs = append(p.errs, &Error{File: p.t.name, Line: p.line, Msg: fmt.Sprintf(format, args...)})
}

// parseLine adds the entry of one line, or reports it; false stops the
// parse (the table has too many entries).
func (p *parser) parseLine(text []byte) bool {
	trimmed := bytes.TrimSpace(text)
	if len(trimmed) == 0 || trimmed[0] == '#' {
		return true
	}
	if text[0] == ' ' || text[0] == '\t' {
		p.fail("a line starts with its key; continuation lines are not supported")
		return true
	}
	key, rest := trimmed, []byte(nil)
	if i := bytes.IndexAny(trimmed, " \t"); i >= 0 {
		key, rest = trimmed[:i], trimmed[i+1:]
	}
	if i := bytes.IndexByte(rest, '#'); i >= 0 {
		rest = rest[:i]
	}
	rest = bytes.TrimSpace(rest)
	switch {
	case bytes.IndexFunc(trimmed, badRune) >= 0:
		p.fail("control characters are not allowed")
		return true
	case len(key) > MaxKeyLen:
		p.fail("key longer than %d bytes", MaxKeyLen)
		return true
	case len(rest) == 0:
		p.fail("%q has no value: want limits such as \"20/1h\", or %q", key, Exempt)
		return true
	}
	if bytes.IndexFunc(key, unicode.IsUpper) >= 0 {
		key = bytes.ToLower(key)
	}
	if prev, dup := p.t.keys[string(key)]; dup {
		p.fail("%q already has an entry at line %d", key, prev.line)
		return true
	}
	v, ok := p.value(rest)
	if !ok {
		return true
	}
	if len(p.t.keys) >= MaxEntries {
		p.fail("more than %d entries", MaxEntries)
		return false
	}
	// The key is copied out of the scanner's buffer: the only allocation
	// of a line whose value was seen before.
	p.t.keys[string(key)] = slot{line: uint32(p.line), value: v}
	return true
}

func badRune(r rune) bool { return r < ' ' && r != '\t' || r == 0x7f }

// value returns the index of the value text, parsing it the first time
// it is seen.
func (p *parser) value(b []byte) (uint32, bool) {
	if i, ok := p.byText[string(b)]; ok {
		return i, true
	}
	text := string(b)
	var v value
	if strings.EqualFold(text, Exempt) {
		v = value{text: Exempt, exempt: true}
	} else {
		parts := strings.Split(text, ",")
		if len(parts) > MaxLimits {
			p.fail("more than %d limits", MaxLimits)
			return 0, false
		}
		norm := make([]string, len(parts))
		for i, s := range parts {
			l, err := rules.ParseLimit(s)
			if err == nil && p.check != nil {
				err = p.check(l)
			}
			if err != nil {
				p.fail("%v", err)
				return 0, false
			}
			v.limits = append(v.limits, l)
			norm[i] = l.String()
		}
		v.text = strings.Join(norm, ", ")
	}
	i := uint32(len(p.t.values))
	p.t.values = append(p.t.values, v)
	p.byText[text] = i
	return i, true
}

// Name is the file the table was read from.
func (t *Table) Name() string { return t.name }

// Len is the number of entries.
func (t *Table) Len() int { return len(t.keys) }

// Lookup returns the entry of key (folded to lower case), if any.
func (t *Table) Lookup(key string) (Entry, bool) {
	s, ok := t.keys[key]
	if !ok {
		if s, ok = t.keys[strings.ToLower(key)]; !ok {
			return Entry{}, false
		}
	}
	v := &t.values[s.value]
	return Entry{Line: int(s.line), Exempt: v.exempt, Limits: v.limits}, true
}

// Changes counts the entries added, removed and changed (another value)
// from old to cur; a nil table has no entries. Moving a line changes
// nothing.
func Changes(old, cur *Table) (added, removed, changed int) {
	text := func(t *Table, s slot) string { return t.values[s.value].text }
	if old != nil {
		for k, os := range old.keys {
			if cur == nil {
				removed++
				continue
			}
			cs, ok := cur.keys[k]
			switch {
			case !ok:
				removed++
			case text(old, os) != text(cur, cs):
				changed++
			}
		}
	}
	if cur != nil {
		for k := range cur.keys {
			if old == nil {
				added++
			} else if _, ok := old.keys[k]; !ok {
				added++
			}
		}
	}
	return added, removed, changed
}
