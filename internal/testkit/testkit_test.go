package testkit

import (
	"encoding/json"
	"io"
	"os/exec"
	"strings"
	"testing"
)

// TestOnlyTestsImportTheKits: no package outside internal/testkit imports a
// kit from its non-test files, so no binary links one and the package order
// of docs/design.md holds for shipped code.
func TestOnlyTestsImportTheKits(t *testing.T) {
	cmd := exec.Command("go", "list", "-json=ImportPath,Imports", "github.com/toolgate/toolgate/...")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const kits = "github.com/toolgate/toolgate/internal/testkit"
	dec := json.NewDecoder(strings.NewReader(string(out)))
	n := 0
	for {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		n++
		if strings.HasPrefix(p.ImportPath, kits) {
			continue
		}
		for _, imp := range p.Imports {
			if strings.HasPrefix(imp, kits) {
				t.Errorf("%s imports the test kit %s outside its tests", p.ImportPath, imp)
			}
		}
	}
	if n < 20 {
		t.Fatalf("go list found only %d packages", n)
	}
}
