package config

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// gone are names the pages still cite on purpose, to say that they are no
// longer there; each is allowed only on the page named.
var gone = map[string]string{
	"pool.PollWaiters":  "docs/mux.md",         // "... was measured again ... so it was removed"
	"FuzzPercentDecode": "docs/reliability.md", // the target's name before it moved to internal/percent
}

// goTree is what the repository's Go files define: for each directory
// (relative, slash-separated), its top-level names and methods
// ("Type.Method"); for each package name, the directories that use it.
type goTree struct {
	names map[string]map[string]bool // dir -> defined names
	files map[string]map[string]bool // file -> defined func names
	pkgs  map[string][]string        // package name -> dirs
}

func loadGoTree(t *testing.T, root string) goTree {
	t.Helper()
	tr := goTree{names: map[string]map[string]bool{}, files: map[string]map[string]bool{}, pkgs: map[string][]string{}}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		dir := path.Dir(rel)
		if tr.names[dir] == nil {
			tr.names[dir] = map[string]bool{}
			if pkg := strings.TrimSuffix(f.Name.Name, "_test"); pkg != "main" {
				tr.pkgs[pkg] = append(tr.pkgs[pkg], dir)
			}
		}
		tr.files[rel] = map[string]bool{}
		for _, decl := range f.Decls {
			switch decl := decl.(type) {
			case *ast.FuncDecl:
				name := decl.Name.Name
				if decl.Recv != nil {
					name = recvName(decl.Recv.List[0].Type) + "." + name
				}
				tr.names[dir][name] = true
				tr.files[rel][decl.Name.Name] = true
			case *ast.GenDecl:
				for _, spec := range decl.Specs {
					switch spec := spec.(type) {
					case *ast.TypeSpec:
						tr.names[dir][spec.Name.Name] = true
					case *ast.ValueSpec:
						for _, n := range spec.Names {
							tr.names[dir][n.Name] = true
						}
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// recvName is the type name of a method's receiver.
func recvName(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return recvName(e.X)
	case *ast.IndexExpr:
		return recvName(e.X)
	case *ast.IndexListExpr:
		return recvName(e.X)
	case *ast.Ident:
		return e.Name
	}
	return ""
}

// definedIn reports whether name is defined in the file or directory p.
func (tr goTree) definedIn(name, p string) bool {
	if fns, ok := tr.files[p]; ok {
		return fns[name]
	}
	return tr.names[p][name]
}

// headingAnchors are the anchors GitHub gives a page's headings.
func headingAnchors(page string) map[string]bool {
	anchors := map[string]bool{}
	inCode := false
	for _, line := range strings.Split(page, "\n") {
		if strings.HasPrefix(line, "```") {
			inCode = !inCode
		}
		if inCode || !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.ToLower(strings.TrimSpace(strings.TrimLeft(line, "#")))
		h = regexp.MustCompile(`[^\p{L}\p{N}_\- ]`).ReplaceAllString(h, "")
		anchors[strings.ReplaceAll(h, " ", "-")] = true
	}
	return anchors
}

var (
	docToken   = regexp.MustCompile("`([^`]+)`|\\b((?:Test|Fuzz|Benchmark)[A-Z]\\w*)")
	docLink    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	repoPath   = regexp.MustCompile(`^(internal|bench|cmd|docs|scripts|examples|\.ci)/`)
	goSymbol   = regexp.MustCompile(`^([a-z][a-z0-9]*)\.([A-Z]\w*(?:\.[A-Z]\w*)?)(?:\(\))?$`)
	outsideRef = regexp.MustCompile(`\.\./shared|§\s*\d`)
	urlScheme  = regexp.MustCompile(`^[a-z]+:`)
)

// TestDocsReferences: every file path, Go name (`pkg.Name`,
// `pkg.Type.Method`) and Test/Fuzz/Benchmark name that README.md and the
// pages under docs/ cite exists in the repository, a test named after a
// path is defined there, every relative link and its anchor resolve, and
// nothing points out of the repository (a URL, ../shared, a "§N" of a
// specification the repository does not hold).
func TestDocsReferences(t *testing.T) {
	const root = "../.."
	pages := docPages(t, root)
	c := refChecker{t: t, root: root, tr: loadGoTree(t, root), anchors: map[string]map[string]bool{}}
	for _, p := range pages {
		c.anchors[p] = headingAnchors(readDoc(t, p))
	}
	for _, page := range pages {
		for i, line := range strings.Split(readDoc(t, page), "\n") {
			at := page + ":" + strconv.Itoa(i+1)
			if outsideRef.MatchString(line) {
				t.Errorf("%s: points out of the repository: %s", at, line)
			}
			c.tokens(page, at, line)
			c.links(page, at, line)
		}
	}
	if c.checked < 200 {
		t.Fatalf("checked only %d references: is the layout as expected?", c.checked)
	}
}

// docPages lists README.md and the pages under docs/, relative to root.
func docPages(t *testing.T, root string) []string {
	t.Helper()
	pages := []string{"README.md"}
	for _, glob := range []string{"docs/*.md", "docs/protocols/*.md"} {
		m, err := filepath.Glob(filepath.Join(root, glob))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range m {
			rel, _ := filepath.Rel(root, p)
			pages = append(pages, filepath.ToSlash(rel))
		}
	}
	if len(pages) < 10 {
		t.Fatalf("found only %d pages: %v", len(pages), pages)
	}
	return pages
}

// refChecker checks the references of the pages' lines.
type refChecker struct {
	t       *testing.T
	root    string
	tr      goTree
	anchors map[string]map[string]bool // page -> its headings' anchors
	checked int
}

// exists reports whether p, relative to the root, exists.
func (c *refChecker) exists(p string) bool {
	_, err := os.Stat(filepath.Join(c.root, p))
	return err == nil
}

// tokens checks a line's backticked paths and Go names, and its test
// names against the path before them on the line, if any.
func (c *refChecker) tokens(page, at, line string) {
	t := c.t
	var ctx, base string // the path a test or file name on this line belongs to
	for _, m := range docToken.FindAllStringSubmatch(line, -1) {
		c.checked++
		if name := m[2]; name != "" {
			switch {
			case name == "TestName" || gone[name] == page:
			case ctx != "" && !c.tr.definedIn(name, ctx):
				t.Errorf("%s: %s is not defined in %s", at, name, ctx)
			case ctx == "" && !anyDefines(c.tr, name):
				t.Errorf("%s: %s is defined nowhere", at, name)
			}
			continue
		}
		tok := strings.TrimRight(m[1], ".,:;)")
		switch {
		case strings.Contains(tok, " "):
		case repoPath.MatchString(tok):
			p, _, _ := strings.Cut(tok, ":")
			p, _, _ = strings.Cut(p, "#")
			p = strings.TrimSuffix(strings.TrimSuffix(p, "/..."), "/")
			if !c.exists(p) {
				if g, _ := filepath.Glob(filepath.Join(c.root, p)); len(g) == 0 {
					t.Errorf("%s: no such path %s", at, tok)
				}
				continue
			}
			ctx, base = p, p
			if strings.Contains(path.Base(p), ".") {
				base = path.Dir(p)
			}
		case strings.HasSuffix(tok, ".go") && (base != "" || strings.Contains(tok, "/")) && !strings.Contains(tok, "*"):
			// A file named after a path: in its directory, or, as in
			// "app/rules.go", in a package under internal/.
			ctx = ""
			for _, p := range []string{path.Join(base, tok), path.Join("internal", tok)} {
				if ctx == "" && c.exists(p) {
					ctx = p
				}
			}
			if ctx == "" {
				t.Errorf("%s: %s is neither in %s nor under internal/", at, tok, base)
			}
		case goSymbol.MatchString(tok):
			sm := goSymbol.FindStringSubmatch(tok)
			if len(c.tr.pkgs[sm[1]]) > 0 && gone[tok] != page && !isGoName(c.tr, sm[1], sm[2]) {
				t.Errorf("%s: %s is defined in no package %s (%v)", at, tok, sm[1], c.tr.pkgs[sm[1]])
			}
		}
	}
}

// links checks a line's markdown links: relative, to a file that exists,
// and to a heading it has.
func (c *refChecker) links(page, at, line string) {
	for _, m := range docLink.FindAllStringSubmatch(line, -1) {
		c.checked++
		link := m[1]
		if urlScheme.MatchString(link) {
			c.t.Errorf("%s: a link out of the repository: %s", at, link)
			continue
		}
		p, anchor, _ := strings.Cut(link, "#")
		target := page
		if p != "" {
			target = path.Clean(path.Join(path.Dir(page), p))
		}
		if !c.exists(target) {
			c.t.Errorf("%s: link to %s: no such file", at, link)
		} else if a, ok := c.anchors[target]; ok && anchor != "" && !a[anchor] {
			c.t.Errorf("%s: link to %s: %s has no such heading", at, link, target)
		}
	}
}

// anyDefines reports whether some directory defines name.
func anyDefines(tr goTree, name string) bool {
	for _, names := range tr.names {
		if names[name] {
			return true
		}
	}
	return false
}

// modulePackages lists the module's packages (relative import paths) that
// start with one of prefixes.
func modulePackages(t *testing.T, prefixes ...string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "sluice/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []string
	for _, p := range strings.Fields(string(out)) {
		rel := strings.TrimPrefix(p, "sluice/")
		for _, pre := range prefixes {
			if strings.HasPrefix(rel, pre) {
				pkgs = append(pkgs, rel)
				break
			}
		}
	}
	if len(pkgs) < 20 {
		t.Fatalf("go list found only %d packages: %v", len(pkgs), pkgs)
	}
	return pkgs
}

// TestArchitectureListsEveryPackage: docs/architecture.md's package map
// has a row for every package under internal/ and bench/internal/, and
// README.md's layout names each of them.
func TestArchitectureListsEveryPackage(t *testing.T) {
	arch := readDoc(t, "docs/architecture.md")
	_, readmeLayout, _ := strings.Cut(readDoc(t, "README.md"), "## Layout")
	readmeLayout, _, _ = strings.Cut(readmeLayout, "\n## ")
	for _, p := range modulePackages(t, "internal/", "bench/internal/") {
		if !strings.Contains(arch, "\n| `"+p+"` |") {
			t.Errorf("docs/architecture.md has no row for %s", p)
		}
		if !regexp.MustCompile(`(^|[\s/,])` + regexp.QuoteMeta(path.Base(p)) + `\b`).MatchString(readmeLayout) {
			t.Errorf("README.md's layout does not name %s", p)
		}
	}
}

// TestReadmeNamesEveryDependency: README.md's Dependencies section names
// every module go.mod requires directly and every tool it pins, so a new
// dependency comes with its reason.
func TestReadmeNamesEveryDependency(t *testing.T) {
	gomod := readDoc(t, "go.mod")
	_, deps, _ := strings.Cut(readDoc(t, "README.md"), "## Dependencies")
	deps, _, _ = strings.Cut(deps, "\n## ")
	var mods []string
	block := ""
	for _, line := range strings.Split(gomod, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasSuffix(line, "("):
			block = strings.Fields(line)[0]
			continue
		case line == ")":
			block = ""
			continue
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		switch {
		case block == "require" && !strings.Contains(line, "// indirect"):
			mods = append(mods, f[0])
		case block == "tool":
			mods = append(mods, f[0])
		case block == "" && (f[0] == "require" || f[0] == "tool") && len(f) > 1 && !strings.Contains(line, "// indirect"):
			mods = append(mods, f[1])
		}
	}
	if len(mods) < 5 {
		t.Fatalf("found only %d direct dependencies in go.mod: %v", len(mods), mods)
	}
	for _, m := range mods {
		// A tool is named by its module (honnef.co/go/tools for
		// honnef.co/go/tools/cmd/staticcheck).
		name := m
		if i := strings.Index(name, "/cmd/"); i > 0 {
			name = name[:i]
		}
		if !strings.Contains(deps, "`"+name) {
			t.Errorf("README.md's Dependencies section does not name %s", m)
		}
	}
}

var (
	commentCont = regexp.MustCompile(`\n\s*//\s*`)
	docCite     = regexp.MustCompile(`(docs/[\w/.-]+\.md)((?:,? (?:and )?"[^"]+")*)`)
	quoted      = regexp.MustCompile(`"([^"]+)"`)
)

// TestCodeCitesDocHeadings: where Go code cites a page of docs/ (as
// `docs/protocols/milter.md, "Negotiation"`), the page exists and has
// every heading cited, so the code's references stay inside the
// repository and true; nor does any Go file cite a "§N".
func TestCodeCitesDocHeadings(t *testing.T) {
	const root = "../.."
	headings := map[string]map[string]bool{}
	heading := regexp.MustCompile(`(?m)^#+ (.*)$`)
	cited := 0
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == ".git" {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		flat := commentCont.ReplaceAllString(string(b), " ")
		if outsideRef.MatchString(flat) && !strings.HasSuffix(p, "docs_refs_test.go") {
			t.Errorf("%s points out of the repository (../shared or §N)", p)
		}
		for _, m := range docCite.FindAllStringSubmatch(flat, -1) {
			page := m[1]
			if headings[page] == nil {
				text, err := os.ReadFile(filepath.Join(root, page))
				if err != nil {
					t.Errorf("%s cites %s: %v", p, page, err)
					continue
				}
				headings[page] = map[string]bool{}
				for _, h := range heading.FindAllStringSubmatch(string(text), -1) {
					headings[page][strings.ReplaceAll(strings.TrimSpace(h[1]), "`", "")] = true
				}
			}
			for _, h := range quoted.FindAllStringSubmatch(m[2], -1) {
				cited++
				if !headings[page][h[1]] {
					t.Errorf("%s cites %s, %q: no such heading", p, page, h[1])
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if cited < 20 {
		t.Fatalf("found only %d cited headings: is the citation form as expected?", cited)
	}
}

// TestReadmeNamesEveryBenchmarkPackage: README.md's paragraph on the Go
// benchmarks names every package that has one.
func TestReadmeNamesEveryBenchmarkPackage(t *testing.T) {
	const root = "../.."
	_, para, _ := strings.Cut(readDoc(t, "README.md"), "Go benchmarks for the hot paths:")
	para, _, _ = strings.Cut(para, "\n\n")
	bench := regexp.MustCompile(`(?m)^func Benchmark\w*\(`)
	found := 0
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if !bench.Match(b) {
			return nil
		}
		found++
		rel, _ := filepath.Rel(root, filepath.Dir(p))
		if dir := "./" + filepath.ToSlash(rel) + "/"; !strings.Contains(para, dir) {
			t.Errorf("README.md's Go benchmarks paragraph does not name %s (%s has benchmarks)", dir, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found < 5 {
		t.Fatalf("found only %d files with benchmarks", found)
	}
}

// TestMuxOptionsTable: the options table of
// docs/protocols/mimedefang-multiplexor.md lists exactly the options
// `sluice mux` accepts (internal/cli/mux.go's getopt letters), each with
// an argument exactly when getopt expects one.
func TestMuxOptionsTable(t *testing.T) {
	code := readDoc(t, "internal/cli/mux.go")
	letters := func(name string) string {
		m := regexp.MustCompile(name + `\s*=\s*"(\w+)"`).FindStringSubmatch(code)
		if m == nil {
			t.Fatalf("internal/cli/mux.go: no %s", name)
		}
		return m[1]
	}
	withArg, without := letters("muxArgOpts"), letters("muxFlagOpts")
	doc := readDoc(t, "docs/protocols/mimedefang-multiplexor.md")
	_, table, ok := strings.Cut(doc, "| opt | default | notes |")
	if !ok {
		t.Fatal("docs/protocols/mimedefang-multiplexor.md: no options table")
	}
	table, _, _ = strings.Cut(table, "\n\n")
	documented := map[byte]bool{}
	opt := regexp.MustCompile("`-(\\w)( [^`]+)?`")
	for _, row := range strings.Split(table, "\n") {
		cells := strings.Split(row, "|")
		if len(cells) < 3 {
			continue
		}
		for _, m := range opt.FindAllStringSubmatch(cells[1], -1) {
			c := m[1][0]
			documented[c] = true
			switch {
			case strings.IndexByte(withArg, c) >= 0 && m[2] == "":
				t.Errorf("-%c takes an argument; the table shows none", c)
			case strings.IndexByte(without, c) >= 0 && m[2] != "":
				t.Errorf("-%c takes no argument; the table shows %q", c, m[2])
			case strings.IndexByte(withArg+without, c) < 0:
				t.Errorf("the table lists -%c, which sluice mux does not accept", c)
			}
		}
	}
	for _, c := range []byte(withArg + without) {
		if !documented[c] {
			t.Errorf("sluice mux accepts -%c; the options table does not list it", c)
		}
	}
}

// TestDocsCommandFlags: every flag the pages (and the example units) give
// to `sluice serve`, `check`, `status`, `throttle` or `version` is one
// that subcommand defines in internal/cli.
func TestDocsCommandFlags(t *testing.T) {
	const root = "../.."
	defined := map[string]map[string]bool{}
	newFlags := regexp.MustCompile(`newFlags\("(\w+)"|fs\.\w+\("([\w-]+)"`)
	files, _ := filepath.Glob(filepath.Join(root, "internal/cli/*.go"))
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		cmd := ""
		for _, m := range newFlags.FindAllStringSubmatch(string(b), -1) {
			if m[1] != "" {
				cmd = m[1]
				defined[cmd] = map[string]bool{}
			} else if cmd != "" {
				defined[cmd][m[2]] = true
			}
		}
	}
	if len(defined) < 5 || !defined["serve"]["grace"] {
		t.Fatalf("found the flags of only %v: is internal/cli laid out as expected?", defined)
	}
	pages := []string{"README.md"}
	for _, glob := range []string{"docs/*.md", "docs/protocols/*.md", "examples/systemd/*"} {
		m, _ := filepath.Glob(filepath.Join(root, glob))
		for _, p := range m {
			rel, _ := filepath.Rel(root, p)
			pages = append(pages, filepath.ToSlash(rel))
		}
	}
	use := regexp.MustCompile("sluice (serve|check|status|throttle|version)\\b([^`|;&]*)")
	seen := 0
	for _, page := range pages {
		for i, line := range strings.Split(readDoc(t, page), "\n") {
			for _, m := range use.FindAllStringSubmatch(line, -1) {
				for _, tok := range strings.Fields(m[2]) {
					if tok == "--" {
						break
					}
					if len(tok) < 2 || tok[0] != '-' || tok[1] == '-' {
						continue
					}
					seen++
					name, _, _ := strings.Cut(tok[1:], "=")
					if !defined[m[1]][name] {
						t.Errorf("%s:%d: sluice %s has no flag -%s", page, i+1, m[1], name)
					}
				}
			}
		}
	}
	if seen < 5 {
		t.Fatalf("found only %d flags in the pages", seen)
	}
}

// TestDocsConfigKeys: a configuration key the pages cite by its dotted
// path (`limiter.status_interval`, `store.redis.addrs`) is one the
// generated reference, docs/config.md, lists.
func TestDocsConfigKeys(t *testing.T) {
	known := map[string]bool{}
	section := ""
	sectionHead := regexp.MustCompile(`^## \[+([\w.]+)\]+`)
	keyRow := regexp.MustCompile("^\\| `(\\w+)` \\|")
	for _, line := range strings.Split(readDoc(t, "docs/config.md"), "\n") {
		if m := sectionHead.FindStringSubmatch(line); m != nil {
			section = m[1]
			known[section] = true
		} else if strings.HasPrefix(line, "## ") {
			section = ""
		} else if m := keyRow.FindStringSubmatch(line); m != nil && section != "" {
			known[section+"."+m[1]] = true
		}
	}
	if len(known) < 50 {
		t.Fatalf("docs/config.md: found only %d keys", len(known))
	}
	cited := regexp.MustCompile("`((?:log|limiter|store|anvil|policy|throttle|milter|web|class)(?:\\.[a-z_]+)+)`")
	pages := docPages(t, "../..")
	tr := loadGoTree(t, "../..")
	seen := 0
	for _, page := range pages {
		if page == "docs/config.md" {
			continue
		}
		for i, line := range strings.Split(readDoc(t, page), "\n") {
			for _, m := range cited.FindAllStringSubmatch(line, -1) {
				pkg, name, _ := strings.Cut(m[1], ".")
				if strings.HasSuffix(m[1], ".go") || isGoName(tr, pkg, name) {
					continue // a file (app/throttle.go) or a Go name (milter.conn)
				}
				seen++
				if !known[m[1]] {
					t.Errorf("%s:%d: `%s` is no key of docs/config.md", page, i+1, m[1])
				}
			}
		}
	}
	if seen < 10 {
		t.Fatalf("found only %d keys cited", seen)
	}
}

// isGoName reports whether name is defined in a package called pkg.
func isGoName(tr goTree, pkg, name string) bool {
	for _, d := range tr.pkgs[pkg] {
		if tr.names[d][name] {
			return true
		}
	}
	return false
}
