package config

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestReadFilesBoundsAndReportsItsReads: a policy file is read whole up to
// maxPolicyBytes and refused past it, and a read that fails is an error,
// never taken for the end of the file.
func TestReadFilesBoundsAndReportsItsReads(t *testing.T) {
	write := func(t *testing.T, size int) string {
		t.Helper()
		name := filepath.Join(t.TempDir(), "policy.yaml")
		if err := os.WriteFile(name, append([]byte("#"), bytes.Repeat([]byte(" "), size-1)...), 0o644); err != nil {
			t.Fatal(err)
		}
		return name
	}
	for _, c := range []struct {
		name    string
		path    func(t *testing.T) string
		wantErr string // "" for a read of the whole file
	}{
		{"a file at the limit is read whole", func(t *testing.T) string { return write(t, maxPolicyBytes) }, ""},
		{"a file over the limit is refused", func(t *testing.T) string { return write(t, maxPolicyBytes+1) }, "policy file is larger than 8388608 bytes"},
		{"a read error is an error", func(t *testing.T) string {
			// Reading a process's own memory at offset 0 fails with EIO:
			// nothing is mapped there. Its stat says size 0.
			if runtime.GOOS != "linux" {
				t.Skip("needs /proc/self/mem")
			}
			f, err := os.Open("/proc/self/mem")
			if err != nil {
				t.Skipf("cannot open /proc/self/mem: %v", err)
			}
			f.Close()
			return "/proc/self/mem"
		}, "input/output error"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := c.path(t)
			files, err := ReadFiles(path)
			if c.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if len(files.sources) != 1 || len(files.sources[0].data) != maxPolicyBytes || len(files.Stats) != 1 {
					t.Errorf("read %d files, the first of %d bytes; want one of %d", len(files.sources), len(files.sources[0].data), maxPolicyBytes)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("ReadFiles(%s) = %v, want an error saying %q", path, err, c.wantErr)
			}
		})
	}
}
