package htmltemplate

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/testkit/goroottest"
)

// TestForkMatchesGoroot holds the fork to Go's html/template. Under the
// Go version goroot.sha256 records, the fork must be exactly what
// scripts/fork-templates.sh makes from GOROOT (no edit by hand, no file
// left behind). Under another version (CI may run another patch release)
// it holds as long as that release's html/template files are the ones
// the fork was made from.
func TestForkMatchesGoroot(t *testing.T) {
	goroot := goroottest.Sources(t, "src/html/template")
	version, files := goroottest.ReadRecord(t, "goroot.sha256")
	if version != runtime.Version() {
		if changed := goroottest.ChangedSince(goroot, files); len(changed) > 0 {
			t.Fatalf("%s changed %s since the fork was made from %s: run scripts/fork-templates.sh and review its diff, "+
				"and carry text/template's changes over to internal/texttemplate by hand (see its doc.go)",
				runtime.Version(), strings.Join(changed, ", "), version)
		}
		t.Logf("the fork was made from %s; %s's html/template files are the same", version, runtime.Version())
		return
	}
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash to run scripts/fork-templates.sh")
	}
	out := t.TempDir()
	cmd := exec.Command("bash", filepath.Join("..", "..", "scripts", "fork-templates.sh"), out)
	cmd.Env = append(os.Environ(), "GOROOT="+goroot)
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scripts/fork-templates.sh: %v\n%s", err, msg)
	}
	want := dirFiles(t, out)
	got := dirFiles(t, ".")
	for name, w := range want {
		g, ok := got[name]
		switch {
		case !ok:
			t.Errorf("%s is missing: run scripts/fork-templates.sh", name)
		case !bytes.Equal(g, w):
			t.Errorf("%s is not what scripts/fork-templates.sh makes from %s: run it (a change of the fork belongs in the script)", name, goroot)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok && name != "doc.go" && name != "LICENSE" && name != "staticcheck.conf" && !strings.HasSuffix(name, "_test.go") {
			t.Errorf("%s is not a file scripts/fork-templates.sh makes: remove it", name)
		}
	}
}

// dirFiles reads the files of a directory by name.
func dirFiles(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		files[e.Name()] = b
	}
	return files
}
