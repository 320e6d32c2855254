package config

import (
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"sluice/internal/safefs"
)

// MaxIncludes caps the entries of the include directory.
const MaxIncludes = 256

// Source is one file of a configuration: the main file, then the files of
// its include_dir in name order.
type Source struct {
	Name string // the file's path, for messages
	Data []byte
}

// namedArrays are the arrays of tables whose entries a later file merges
// by name: an entry with a name already there changes that entry in its
// place; a new one is added (a class before the catch-all class, the
// first whose match holds "*", so that it stays last; others at the end).
var namedArrays = []string{"class", "policy.rule", "throttle.policy"}

// readIncludes reads the *.toml files of dir (relative to the main file's
// directory), in name order, through safefs: a symbolic link, FIFO or
// device planted there is refused, and as root so is the directory or a
// file another user owns or could write (safefs.OpenDirTrusted).
func readIncludes(main, dir string) ([]Source, error) {
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(filepath.Dir(main), dir)
	}
	d, err := safefs.OpenDirTrusted(dir)
	if err != nil {
		return nil, err // it names the directory, or the one on its path
	}
	defer d.Close()
	names, err := d.Names(MaxIncludes)
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	var out []Source
	for _, n := range names {
		if !strings.HasSuffix(n, ".toml") || strings.HasPrefix(n, ".") {
			continue
		}
		b, err := d.ReadFile(n, MaxFileSize)
		if err != nil {
			return nil, err // it names the file
		}
		out = append(out, Source{Name: filepath.Join(dir, n), Data: b})
	}
	return out, nil
}

// ParseSources decodes the main file and the files merged after it (see
// Source) on top of the defaults, as Parse decodes one: tables merge key
// by key, a later value replaces an earlier one, and the arrays of
// namedArrays merge by name. Every error names the file and line the key
// came from. include_dir in a later file is an error.
func ParseSources(srcs []Source) (*Config, []error) {
	var doc map[string]any
	lines, from := map[string]int{}, map[string]string{}
	var added map[string]string // nil for one file, as go-toml would leave it
	var errs []error
	for i, s := range srcs {
		d, err := parseDoc(s.Data, s.Name)
		if err != nil {
			return nil, []error{err}
		}
		l := keyLines(s.Data)
		if i == 0 {
			doc, lines = d, l
			continue
		}
		if _, ok := d["include_dir"]; ok {
			errs = append(errs, &Error{File: s.Name, Line: l["include_dir"], Path: "include_dir", Msg: "only the main file may name an include directory"})
			delete(d, "include_dir")
		}
		moves := mergeDoc(doc, d)
		lines, from = moves.apply(lines, from, "", nil)
		fl, _ := moves.apply(l, nil, s.Name, from)
		for p, n := range fl {
			lines[p] = n
		}
		added = moves.record(added, s.Name)
	}
	c := Default()
	c.File = srcs[0].Name
	for _, s := range srcs[1:] {
		c.Included = append(c.Included, s.Name)
	}
	c.lines, c.from, c.added = lines, from, added
	dec := decoder{c: c}
	dec.table("", doc, reflectConfig(c))
	return c, append(errs, dec.errs...)
}

// moves are how the entries of named arrays moved in a merge: the old
// main entries that a class inserted before the catch-all shifted, and
// where each entry of the merged file went.
type moves struct {
	shift map[string]string // "class[3]" -> "class[4]" in the document so far
	to    map[string]string // "class[1]" of the merged file -> its place
	added map[string]bool   // the places of the merged file's new entries
}

// record renames the entries of added (entry path -> the file that added
// it) by m.shift, and adds the merged file's new entries as file's.
func (m moves) record(added map[string]string, file string) map[string]string {
	out := make(map[string]string, len(added)+len(m.added))
	for p, f := range added {
		out[renameEntry(p, m.shift)] = f
	}
	for p := range m.added {
		out[p] = file
	}
	return out
}

// apply renames the key paths of lines by m.shift (file == "") or m.to
// (the merged file: their new owner is recorded in into as file).
func (m moves) apply(lines map[string]int, from map[string]string, file string, into map[string]string) (map[string]int, map[string]string) {
	table := m.shift
	if file != "" {
		table = m.to
	}
	outL := make(map[string]int, len(lines))
	outF := map[string]string{}
	for p, n := range lines {
		q := renameEntry(p, table)
		outL[q] = n
		if file != "" {
			into[q] = file
		} else if f, ok := from[p]; ok {
			outF[q] = f
		}
	}
	if file == "" {
		for p, f := range from {
			if _, ok := lines[p]; !ok {
				outF[renameEntry(p, table)] = f
			}
		}
	}
	return outL, outF
}

// renameEntry renames the entry prefix of path ("class[2]" of
// "class[2].anvil.x") by table.
func renameEntry(path string, table map[string]string) string {
	i := strings.IndexByte(path, ']')
	if i < 0 || len(table) == 0 {
		return path
	}
	if to, ok := table[path[:i+1]]; ok {
		return to + path[i+1:]
	}
	return path
}

// mergeDoc merges the document src into dst and reports how the named
// arrays' entries moved.
func mergeDoc(dst, src map[string]any) moves {
	m := moves{shift: map[string]string{}, to: map[string]string{}, added: map[string]bool{}}
	for _, name := range namedArrays {
		parent, key := dst, name
		sparent := src
		if p, k, ok := strings.Cut(name, "."); ok {
			st, _ := src[p].(map[string]any)
			if st == nil {
				continue
			}
			dt, _ := dst[p].(map[string]any)
			if dt == nil {
				dt = map[string]any{}
				dst[p] = dt
			}
			parent, sparent, key = dt, st, k
		}
		entries, ok := sparent[key].([]any)
		if !ok {
			continue
		}
		delete(sparent, key)
		have, _ := parent[key].([]any)
		parent[key] = mergeEntries(name, have, entries, m)
	}
	mergeTables(dst, src)
	return m
}

// mergeEntries merges the entries of a named array, recording in m where
// the entries already there and the merged file's went.
func mergeEntries(name string, have, add []any, m moves) []any {
	path := func(i int) string { return name + "[" + strconv.Itoa(i+1) + "]" }
	label := make([]string, len(have)) // each entry's path before the merge: "d:" so far, "s:" the merged file
	for j := range have {
		label[j] = "d:" + path(j)
	}
	alias := map[string]string{} // a merged file's entry -> the label of the entry it changed
	for i, e := range add {
		em, _ := e.(map[string]any)
		n, named := em["name"].(string)
		j := slices.IndexFunc(have, func(h any) bool { hm, _ := h.(map[string]any); return named && hm != nil && hm["name"] == n })
		if em != nil && j >= 0 {
			mergeTables(have[j].(map[string]any), em)
			alias[path(i)] = label[j]
			continue
		}
		at := len(have)
		if name == "class" {
			if k := slices.IndexFunc(have, catchAll); k >= 0 {
				at = k
			}
		}
		have = slices.Insert(have, at, e)
		label = slices.Insert(label, at, "s:"+path(i))
	}
	final := map[string]string{}
	for j, l := range label {
		final[l] = path(j)
		if strings.HasPrefix(l, "d:") && l[2:] != path(j) {
			m.shift[l[2:]] = path(j)
		} else if strings.HasPrefix(l, "s:") {
			m.to[l[2:]] = path(j)
			m.added[path(j)] = true
		}
	}
	for src, l := range alias {
		m.to[src] = final[l]
	}
	return have
}

// catchAll reports whether a class entry matches every peer.
func catchAll(e any) bool {
	em, _ := e.(map[string]any)
	match, _ := em["match"].([]any)
	return slices.Contains(match, any("*"))
}

// mergeTables merges src into dst: tables key by key, any other value
// replaced.
func mergeTables(dst, src map[string]any) {
	for k, v := range src {
		if sv, ok := v.(map[string]any); ok {
			if dv, ok := dst[k].(map[string]any); ok {
				mergeTables(dv, sv)
				continue
			}
		}
		dst[k] = v
	}
}
