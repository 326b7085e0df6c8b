package policydoc

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDraftersShareThisPackageNotTheImporter: learning mode's drafter
// writes its policies through this package, not through the OpenAPI
// importer, so it (and the sidecar's /v1/learn) links no OpenAPI library,
// and this package links none either.
func TestDraftersShareThisPackageNotTheImporter(t *testing.T) {
	for _, pkg := range []string{"github.com/toolgate/toolgate/learn/draft", "github.com/toolgate/toolgate/config/policydoc"} {
		t.Run(pkg, func(t *testing.T) {
			out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", pkg).Output()
			if err != nil {
				t.Fatalf("go list: %v", err)
			}
			for _, dep := range strings.Fields(string(out)) {
				if dep == "github.com/toolgate/toolgate/config/openapi" || strings.HasPrefix(dep, "github.com/getkin/kin-openapi/") {
					t.Errorf("%s links %s", pkg, dep)
				}
			}
		})
	}
}
