package texttemplate

import (
	"bufio"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// TestSourcesAsRecorded fails when the running toolchain's text/template
// (or internal/fmtsort) is not what this copy was made from, as
// goroot.sha256 records it: a Go release changed it, and its change is to
// be carried over by hand (the copy has a change of its own, so no script
// can). A patch release that left the files alone passes.
func TestSourcesAsRecorded(t *testing.T) {
	goroot := gorootSources(t, "src/text/template")
	version, files := readRecord(t, "goroot.sha256")
	if changed := changedSince(t, goroot, files); len(changed) > 0 {
		t.Fatalf("%s changed %s since this copy was made from %s: carry the change over to internal/texttemplate by hand, "+
			"then run scripts/fork-templates.sh --record-texttemplate, and scripts/fork-templates.sh for internal/htmltemplate",
			runtime.Version(), strings.Join(changed, ", "), version)
	}
	t.Logf("made from %s; %s's files are the same", version, runtime.Version())
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
		if h := sha256.Sum256(b); err != nil || fmt.Sprintf("%x", h) != sum {
			changed = append(changed, name)
		}
	}
	slices.Sort(changed)
	return changed
}
