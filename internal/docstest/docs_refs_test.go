package docstest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
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
