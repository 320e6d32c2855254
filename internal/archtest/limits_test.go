package archtest

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The size limits of the style rule: no file over maxFileLines lines, no
// function over maxFuncLines. They hold for the code the module builds
// (cmd/, internal/, bench/), not for tests or test data.
const (
	maxFileLines = 700
	maxFuncLines = 100
)

// sourceFile is a non-test Go file of the module, parsed.
type sourceFile struct {
	rel  string // relative to the module root, slash-separated
	fset *token.FileSet
	file *ast.File
	src  []byte
}

// moduleSources parses every non-test .go file under root, skipping .git
// and testdata directories (which the module does not build).
func moduleSources(t *testing.T, root string) []sourceFile {
	t.Helper()
	var files []sourceFile
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, p, src, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		files = append(files, sourceFile{rel: filepath.ToSlash(rel), fset: fset, file: f, src: src})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// fileLines is the number of physical lines of src: its newlines, plus
// one for a last line without one.
func fileLines(src []byte) int {
	n := bytes.Count(src, []byte("\n"))
	if len(src) > 0 && src[len(src)-1] != '\n' {
		n++
	}
	return n
}

// funcLines is the number of lines a top-level function or method spans,
// from the line of its `func` keyword (after its doc comment) to the line
// of its closing brace. A declaration without a body (assembly, linkname)
// spans its one line.
func funcLines(fset *token.FileSet, fn *ast.FuncDecl) int {
	end := fn.End()
	if fn.Body != nil {
		end = fn.Body.Rbrace
	}
	return fset.Position(end).Line - fset.Position(fn.Type.Func).Line + 1
}

// funcName is a function's name as the failure names it: Name, or
// Type.Name for a method.
func funcName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	return recvType(fn.Recv.List[0].Type) + "." + fn.Name.Name
}

// TestFileAndFunctionLimits: no non-test Go file of the module (cmd/,
// internal/, bench/; testdata is not built) is over 700 physical lines,
// and no top-level function or method in one is over 100 lines from its
// `func` to its closing brace. A function literal counts toward the
// function it is written in. A file or function over the limit is split
// along an idea (a concern per file, a helper per step), never by
// raising the limit.
func TestFileAndFunctionLimits(t *testing.T) {
	files := moduleSources(t, "../..")
	if len(files) < 100 {
		t.Fatalf("found only %d files: is the layout as expected?", len(files))
	}
	for _, problem := range overLimits(files) {
		t.Error(problem)
	}
}

// overLimits lists, for each file and each function over its limit, a
// line naming it and its size.
func overLimits(files []sourceFile) []string {
	var problems []string
	for _, f := range files {
		if n := fileLines(f.src); n > maxFileLines {
			problems = append(problems, fmt.Sprintf("%s: %d lines, over the limit of %d: split it along its concerns", f.rel, n, maxFileLines))
		}
		for _, decl := range f.file.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok {
				continue
			}
			if n := funcLines(f.fset, fn); n > maxFuncLines {
				pos := f.fset.Position(fn.Type.Func)
				problems = append(problems, fmt.Sprintf("%s:%d: func %s is %d lines, over the limit of %d: split it into steps", f.rel, pos.Line, funcName(fn), n, maxFuncLines))
			}
		}
	}
	return problems
}

// TestLimitsCatchOversize: the limit check names a file and a function
// just over their limits and passes those at them, so that
// TestFileAndFunctionLimits's silence means something.
func TestLimitsCatchOversize(t *testing.T) {
	body := func(lines int) string { // a function of exactly lines lines
		return "func f() {\n" + strings.Repeat("\t_ = 0\n", lines-2) + "}\n"
	}
	pad := func(src string, lines int) string { // src grown to lines lines
		return src + strings.Repeat("\n", lines-strings.Count(src, "\n"))
	}
	for _, tc := range []struct {
		name, src string
		want      string // the problem expected, "" for none
	}{
		{"at.go", pad("package p\n\n"+body(maxFuncLines), maxFileLines), ""},
		{"longfunc.go", "package p\n\n// f is long.\n" + body(maxFuncLines+1), "longfunc.go:4: func f is 101 lines"},
		{"longfile.go", pad("package p\n", maxFileLines+1), "longfile.go: 701 lines"},
		{"method.go", "package p\n\ntype T struct{}\n\n" + strings.Replace(body(maxFuncLines+1), "func f", "func (*T) f", 1), "method.go:5: func T.f is 101 lines"},
	} {
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, tc.name, tc.src, 0)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		got := overLimits([]sourceFile{{rel: tc.name, fset: fset, file: f, src: []byte(tc.src)}})
		switch {
		case tc.want == "" && len(got) > 0:
			t.Errorf("%s: at the limits, got %q", tc.name, got)
		case tc.want != "" && (len(got) != 1 || !strings.HasPrefix(got[0], tc.want)):
			t.Errorf("%s: got %q, want one problem starting %q", tc.name, got, tc.want)
		}
	}
}
