package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/pelletier/go-toml/v2"
	"github.com/pelletier/go-toml/v2/unstable"
)

// MaxFileSize caps the config file read.
const MaxFileSize = 4 << 20

// Error is one problem in the configuration, with its place.
type Error struct {
	File string
	Line int    // 0 if unknown
	Path string // key path, e.g. "class[2].refuse"
	Msg  string
}

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
	f, err := os.Open(path)
	if err != nil {
		return nil, []error{fmt.Errorf("open config: %w", err)}
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, []error{fmt.Errorf("read config %s: %w", path, err)}
	}
	if len(data) > MaxFileSize {
		return nil, []error{&Error{File: path, Msg: fmt.Sprintf("file larger than %d bytes", MaxFileSize)}}
	}
	c, errs := Parse(data, path)
	if len(errs) > 0 {
		return nil, errs
	}
	if errs := c.Validate(); len(errs) > 0 {
		return c, errs
	}
	return c, nil
}

// Parse decodes TOML data strictly on top of the defaults; name is used in
// messages. It does not validate.
func Parse(data []byte, name string) (*Config, []error) {
	c := Default()
	c.File = name
	dec := toml.NewDecoder(bytes.NewReader(data)).DisallowUnknownFields()
	if err := dec.Decode(c); err != nil {
		var strict *toml.StrictMissingError
		var de *toml.DecodeError
		switch {
		case errors.As(err, &strict):
			var errs []error
			for _, e := range strict.Errors {
				row, _ := e.Position()
				errs = append(errs, &Error{File: name, Line: row, Path: strings.Join(e.Key(), "."), Msg: "unknown key"})
			}
			return nil, errs
		case errors.As(err, &de):
			row, _ := de.Position()
			return nil, []error{&Error{File: name, Line: row, Path: strings.Join(de.Key(), "."), Msg: de.Error()}}
		default:
			return nil, []error{&Error{File: name, Msg: err.Error()}}
		}
	}
	c.lines = keyLines(data)
	return c, nil
}

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

// errAt builds an Error for a key path, with its line if the file has it
// (or the line of the nearest enclosing table).
func (c *Config) errAt(path, format string, args ...any) error {
	line := 0
	for p := path; p != ""; {
		if l, ok := c.lines[p]; ok {
			line = l
			break
		}
		i := strings.LastIndexAny(p, ".[")
		if i < 0 {
			break
		}
		p = p[:i]
	}
	return &Error{File: c.File, Line: line, Path: path, Msg: fmt.Sprintf(format, args...)}
}
