package htmltemplate

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// TestForkMatchesGoroot holds the fork to Go's html/template. Under the
// Go version goroot.sha256 records, the fork must be exactly what
// scripts/fork-templates.sh makes from GOROOT (no edit by hand, no file
// left behind). Under another version (CI may run another patch release)
// it holds as long as that release's html/template files are the ones
// the fork was made from.
func TestForkMatchesGoroot(t *testing.T) {
	goroot := gorootSources(t, "src/html/template")
	version, files := readRecord(t, "goroot.sha256")
	if version != runtime.Version() {
		if changed := changedSince(t, goroot, files); len(changed) > 0 {
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

// gorootSources is the running toolchain's GOROOT; the test skips when
// its dir (the sources the fork was made from) is not there.
func gorootSources(t *testing.T, dir string) string {
	t.Helper()
	b, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		t.Skipf("go env GOROOT: %v", err)
	}
	goroot := strings.TrimSpace(string(b))
	if _, err := os.Stat(filepath.Join(goroot, dir)); err != nil {
		t.Skipf("the Go sources are not in GOROOT (%v): the fork is not checked", err)
	}
	return goroot
}

// readRecord reads a goroot.sha256: its Go version and, for each GOROOT
// file, its sha256.
func readRecord(t *testing.T, path string) (version string, files map[string]string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	files = map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "# "); ok {
			version, _, _ = strings.Cut(v, ":")
			continue
		}
		sum, name, ok := strings.Cut(line, "  ")
		if !ok {
			t.Fatalf("%s: %q is not a line of sha256sum", path, line)
		}
		files[name] = sum
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if version == "" || len(files) == 0 {
		t.Fatalf("%s names no Go version or no file", path)
	}
	return version, files
}

// changedSince lists the recorded files whose GOROOT copy differs from
// the record, or is gone.
func changedSince(t *testing.T, goroot string, files map[string]string) []string {
	t.Helper()
	var changed []string
	for name, sum := range files {
		b, err := os.ReadFile(filepath.Join(goroot, name))
		if h := sha256.Sum256(b); err != nil || hex.EncodeToString(h[:]) != sum {
			changed = append(changed, name)
		}
	}
	slices.Sort(changed)
	return changed
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
