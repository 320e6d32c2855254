package config

import (
	"cmp"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/pelletier/go-toml/v2"
	"github.com/pelletier/go-toml/v2/unstable"

	"sluice/internal/safefs"
)

// MaxFileSize caps the config file read.
const MaxFileSize = 4 << 20

// Error is one problem in the configuration, with its place.
type Error struct {
	File string // the file; "" when the configuration came from none
	Line int    // 0 if unknown
	Path string // key path, e.g. "class[2].refuse"
	Msg  string // what is wrong
}

// Error is the message with its location, as sluice check prints it.
func (e *Error) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		if e.Line > 0 {
			fmt.Fprintf(&b, ":%d", e.Line)
		}
		b.WriteString(": ")
	}
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Load reads, decodes and validates the file at path, on top of the
// defaults. It returns every error found.
func Load(path string) (*Config, []error) {
	// A FIFO, device or symbolic link another user planted is refused,
	// not waited on or followed; as root, so is a file another user owns
	// or could write, or one in a directory they could (sluice may be
	// root here: docs/security.md, "Files root reads").
	data, err := safefs.ReadTrusted(path, MaxFileSize)
	if errors.Is(err, safefs.ErrTooLarge) {
		return nil, []error{&Error{File: path, Msg: fmt.Sprintf("file larger than %d bytes", MaxFileSize)}}
	}
	if err != nil {
		return nil, []error{fmt.Errorf("read config: %w", err)}
	}
	srcs := []Source{{Name: path, Data: data}}
	if dir, err := includeDir(data, path); err != nil {
		return nil, []error{err}
	} else if dir != "" {
		more, err := readIncludes(path, dir)
		if err != nil {
			return nil, []error{&Error{File: path, Line: keyLines(data)["include_dir"], Path: "include_dir", Msg: err.Error()}}
		}
		srcs = append(srcs, more...)
	}
	c, errs := ParseSources(srcs)
	if c == nil {
		return nil, errs
	}
	errs = append(errs, c.Validate()...)
	if len(errs) > 0 {
		names := make([]string, len(srcs))
		for i, s := range srcs {
			names[i] = s.Name
		}
		sortByLine(errs, names)
		return c, errs
	}
	return c, nil
}

// Parse decodes TOML data on top of the defaults; name is used in
// messages. A syntax error stops it (nil Config). Otherwise every unknown
// key and every value of the wrong type is reported, and the rest is
// decoded. It does not validate.
func Parse(data []byte, name string) (*Config, []error) {
	return ParseSources([]Source{{Name: name, Data: data}})
}

// parseDoc parses TOML data into generic values; a syntax error is an
// Error at its line.
func parseDoc(data []byte, name string) (map[string]any, error) {
	var doc map[string]any
	if err := toml.Unmarshal(data, &doc); err != nil {
		var de *toml.DecodeError
		if errors.As(err, &de) {
			row, _ := de.Position()
			return nil, &Error{File: name, Line: row, Path: strings.Join(de.Key(), "."), Msg: "syntax error: " + strings.TrimPrefix(de.Error(), "toml: ")}
		}
		return nil, &Error{File: name, Msg: "syntax error: " + strings.TrimPrefix(err.Error(), "toml: ")}
	}
	if doc == nil {
		doc = map[string]any{}
	}
	return doc, nil
}

func reflectConfig(c *Config) reflect.Value { return reflect.ValueOf(c).Elem() }

// keyLines maps every key path in the document to its line, with arrays of
// tables indexed from 1 as Validate names them: "class[2].anvil.x".
func keyLines(data []byte) map[string]int {
	lines := map[string]int{}
	p := unstable.Parser{}
	p.Reset(data)
	counts := map[string]int{}
	table := ""
	join := func(prefix string, it unstable.Iterator) string {
		var parts []string
		if prefix != "" {
			parts = append(parts, prefix)
		}
		for it.Next() {
			parts = append(parts, string(it.Node().Data))
		}
		return strings.Join(parts, ".")
	}
	for p.NextExpression() {
		e := p.Expression()
		line := p.Shape(e.Raw).Start.Line
		switch e.Kind {
		case unstable.Table:
			table = resolveArrays(join("", e.Key()), counts)
			lines[table] = keyLine(&p, e, line)
		case unstable.ArrayTable:
			base := resolveArrays(join("", e.Key()), counts)
			counts[base]++
			table = base + "[" + strconv.Itoa(counts[base]) + "]"
			lines[table] = keyLine(&p, e, line)
		case unstable.KeyValue:
			lines[join(table, e.Key())] = keyLine(&p, e, line)
		}
	}
	return lines
}

// keyLine returns the line of a node's first key, falling back to line.
func keyLine(p *unstable.Parser, e *unstable.Node, line int) int {
	it := e.Key()
	if it.Next() {
		if n := it.Node(); n.Raw.Length > 0 {
			return p.Shape(n.Raw).Start.Line
		}
	}
	return line
}

// resolveArrays rewrites "class.anvil" to "class[N].anvil" when "class" is
// an array of tables seen N times so far.
func resolveArrays(path string, counts map[string]int) string {
	parts := strings.Split(path, ".")
	out := ""
	for i, part := range parts {
		if i > 0 {
			out += "."
		}
		out += part
		if n := counts[out]; n > 0 && i < len(parts)-1 {
			out += "[" + strconv.Itoa(n) + "]"
		}
	}
	return out
}

// includeDir is the main file's include_dir, "" when it has none.
func includeDir(data []byte, name string) (string, error) {
	doc, err := parseDoc(data, name)
	if err != nil {
		return "", err
	}
	dir, ok := doc["include_dir"].(string)
	if _, set := doc["include_dir"]; set && (!ok || dir == "") {
		return "", &Error{File: name, Line: keyLines(data)["include_dir"], Path: "include_dir", Msg: "expected a directory path"}
	}
	return dir, nil
}

// errAt builds an Error for a key path, with its line if the file has it
// (or the line of the nearest enclosing table).
func (c *Config) errAt(path, format string, args ...any) error {
	line, file := c.lines[path+"[1]"], c.from[path+"[1]"] // a table given as an array of tables
	for p := path; p != "" && line == 0; {
		if l, ok := c.lines[p]; ok {
			line, file = l, c.from[p]
			break
		}
		i := strings.LastIndexAny(p, ".[")
		if i < 0 {
			break
		}
		p = p[:i]
	}
	if file == "" {
		file = c.File
	}
	return &Error{File: file, Line: line, Path: path, Msg: fmt.Sprintf(format, args...)}
}

// sortByLine puts the errors about files in the order of the files, then
// of their lines; the others (no line) keep their order, after them.
func sortByLine(errs []error, files []string) {
	const none = int(^uint(0) >> 1)
	place := func(err error) (int, int) {
		var e *Error
		if errors.As(err, &e) && e.Line > 0 {
			if f := slices.Index(files, e.File); f >= 0 {
				return f, e.Line
			}
		}
		// Errors made as "file:line: ..." (classes placed by ClassSpec.Where).
		for f, file := range files {
			if rest, ok := strings.CutPrefix(err.Error(), file+":"); ok {
				num, _, _ := strings.Cut(rest, ":")
				if n, err := strconv.Atoi(num); err == nil && n > 0 {
					return f, n
				}
			}
		}
		return none, none
	}
	slices.SortStableFunc(errs, func(a, b error) int {
		fa, la := place(a)
		fb, lb := place(b)
		return cmp.Or(cmp.Compare(fa, fb), cmp.Compare(la, lb))
	})
}
