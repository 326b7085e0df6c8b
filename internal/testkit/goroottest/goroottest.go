// Package goroottest checks copies of standard-library packages
// (internal/texttemplate, internal/htmltemplate) against the sources they
// were made from: a goroot.sha256 beside each copy records the Go version
// and the sha256 of every GOROOT file it came from (scripts/fork-templates.sh
// writes it).
package goroottest

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Sources returns the running toolchain's GOROOT. The test skips when dir
// under it (the sources a copy was made from) is not there.
func Sources(t *testing.T, dir string) string {
	t.Helper()
	b, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		t.Skipf("go env GOROOT: %v", err)
	}
	goroot := strings.TrimSpace(string(b))
	if _, err := os.Stat(filepath.Join(goroot, dir)); err != nil {
		t.Skipf("the Go sources are not in GOROOT (%v): the copy is not checked", err)
	}
	return goroot
}

// ReadRecord reads a goroot.sha256: its Go version and, for each GOROOT
// file, its sha256.
func ReadRecord(t *testing.T, path string) (version string, files map[string]string) {
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

// ChangedSince lists, sorted, the recorded files whose GOROOT copy
// differs from the record, or is gone.
func ChangedSince(goroot string, files map[string]string) []string {
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
