package contracts

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// declaredReasons lists the Reason constants of reasons.go.
func declaredReasons(t *testing.T) []Reason {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "reasons.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []Reason
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "Reason" {
				continue
			}
			for i, name := range vs.Names {
				lit := vs.Values[i].(*ast.BasicLit)
				_ = name
				out = append(out, Reason(strings.Trim(lit.Value, `"`)))
			}
		}
	}
	return out
}

// producedReasons finds the reasons some code outside the table produces:
// a reason constant used anywhere but in a comparison or a switch case, in
// the non-test files of contracts and proxy (the stages that build
// outcomes). A reason nothing produces is a dead row.
func producedReasons(t *testing.T) map[Reason]bool {
	t.Helper()
	names := map[string]Reason{}
	fset := token.NewFileSet()
	table, err := parser.ParseFile(fset, "reasons.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, obj := range table.Scope.Objects {
		if vs, ok := obj.Decl.(*ast.ValueSpec); ok && obj.Kind == ast.Con {
			if id, ok := vs.Type.(*ast.Ident); ok && id.Name == "Reason" {
				for i, n := range vs.Names {
					if n.Name == obj.Name {
						names[obj.Name] = Reason(strings.Trim(vs.Values[i].(*ast.BasicLit).Value, `"`))
					}
				}
			}
		}
	}
	produced := map[Reason]bool{}
	var files []string
	for _, dir := range []string{".", "../policy", "../proxy", "../proxy/extproc"} {
		m, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") || filepath.Base(path) == "reasons.go" && filepath.Dir(path) == "." {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		compared := map[*ast.Ident]bool{}
		markAll := func(n ast.Node) {
			ast.Inspect(n, func(n ast.Node) bool {
				if id, ok := n.(*ast.Ident); ok {
					compared[id] = true
				}
				return true
			})
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.BinaryExpr:
				if n.Op == token.EQL || n.Op == token.NEQ {
					markAll(n.X)
					markAll(n.Y)
				}
			case *ast.CaseClause:
				for _, e := range n.List {
					markAll(e)
				}
			}
			return true
		})
		ast.Inspect(f, func(n ast.Node) bool {
			if id, ok := n.(*ast.Ident); ok && !compared[id] {
				if r, ok := names[id.Name]; ok {
					produced[r] = true
				}
			}
			return true
		})
	}
	return produced
}
