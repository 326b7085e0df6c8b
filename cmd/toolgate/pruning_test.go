package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// reflectMethodRE finds a function the linker marks <ReflectMethod> in
// its -dumpdep output ("from -> to", either side flagged).
var reflectMethodRE = regexp.MustCompile(`(\S+) (?:<UsedInIface>)?<ReflectMethod>`)

// TestSidecarKeepsMethodPruning builds the sidecar as make build does
// (the Makefile's GOTAGS) with the linker's -dumpdep and fails on any
// reachable function that looks a method up by reflection
// (reflect.Value.MethodByName with a name not known at compile time, as
// text/template's evalField does): one such function makes the linker
// keep every exported method of every type that reaches an interface,
// about 12 MB of the binary and 6 MiB of idle RSS (docs/performance.md).
// Templates run on internal/texttemplate and internal/htmltemplate, which
// call no method.
func TestSidecarKeepsMethodPruning(t *testing.T) {
	if testing.Short() {
		t.Skip("builds toolgate")
	}
	makefile, err := os.ReadFile(filepath.Join("..", "..", "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	tags := regexp.MustCompile(`(?m)^GOTAGS\s*:=\s*(.*)$`).FindSubmatch(makefile)
	if tags == nil {
		t.Fatal("the Makefile sets no GOTAGS")
	}
	build := exec.Command("go", "build", "-tags", strings.TrimSpace(string(tags[1])), "-ldflags=-dumpdep", "-o", filepath.Join(t.TempDir(), "toolgate"), ".")
	out, err := build.CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%.2000s", err, out)
	}
	var found []string
	for _, m := range reflectMethodRE.FindAllSubmatch(out, -1) {
		found = append(found, string(m[1]))
	}
	slices.Sort(found)
	if found = slices.Compact(found); len(found) > 0 {
		t.Errorf("the sidecar reaches functions that look methods up by reflection, so the linker keeps every exported method; "+
			"see `go build -tags %s -ldflags=-dumpdep ./cmd/toolgate 2>&1 | grep ReflectMethod`:\n%s", tags[1], strings.Join(found, "\n"))
	}
}
