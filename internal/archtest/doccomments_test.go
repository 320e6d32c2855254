package archtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// TestDocComments: in non-test code, every package has a package doc
// comment, and every exported function, method of an exported type, type,
// constant and variable has a doc comment (its own, its group's, or a
// comment on its line). Struct fields and interface methods are left to
// judgement: a type's comment often says what they are together.
func TestDocComments(t *testing.T) {
	const root = "../.."
	pkgDoc := map[string]bool{} // dir -> some file has a package comment
	checked := 0
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
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, p, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		dir := filepath.Dir(rel)
		pkgDoc[dir] = pkgDoc[dir] || f.Doc != nil
		if f.Name.Name == "main" {
			return nil // a command's names are its own
		}
		checked++
		missing := func(pos token.Pos, what string) {
			t.Errorf("%s: %s has no doc comment", fset.Position(pos), what)
		}
		for _, decl := range f.Decls {
			switch decl := decl.(type) {
			case *ast.FuncDecl:
				if !decl.Name.IsExported() || decl.Doc != nil {
					continue
				}
				if decl.Recv == nil {
					missing(decl.Pos(), "func "+decl.Name.Name)
				} else if recv := recvType(decl.Recv.List[0].Type); ast.IsExported(recv) {
					missing(decl.Pos(), "method "+recv+"."+decl.Name.Name)
				}
			case *ast.GenDecl:
				for _, spec := range decl.Specs {
					switch spec := spec.(type) {
					case *ast.TypeSpec:
						if spec.Name.IsExported() && spec.Doc == nil && decl.Doc == nil && spec.Comment == nil {
							missing(spec.Pos(), "type "+spec.Name.Name)
						}
					case *ast.ValueSpec:
						for _, n := range spec.Names {
							if n.IsExported() && spec.Doc == nil && decl.Doc == nil && spec.Comment == nil {
								missing(n.Pos(), n.Name)
							}
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
	if checked < 100 {
		t.Fatalf("checked only %d files: is the layout as expected?", checked)
	}
	for dir, ok := range pkgDoc {
		if !ok {
			t.Errorf("%s: no file has a package doc comment", dir)
		}
	}
}

// recvType is the type name of a method's receiver.
func recvType(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return recvType(e.X)
	case *ast.IndexExpr:
		return recvType(e.X)
	case *ast.IndexListExpr:
		return recvType(e.X)
	case *ast.Ident:
		return e.Name
	}
	return ""
}
