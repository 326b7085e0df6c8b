// Package policytest writes policy files the ways real writers do (an
// editor saving in place or by rename, the kubelet updating a mounted
// ConfigMap) and waits for what follows, for the tests of the config
// package's loader and watcher and of the toolgate command's reloads.
package policytest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Eventually polls cond until it holds or a generous deadline passes. Tests
// never assert that something happened quickly, only that it happened.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// RealTempDir is t.TempDir() with symbolic links resolved, so that paths
// compare equal to the ones a file watcher reports.
func RealTempDir(t testing.TB) string {
	t.Helper()
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// WriteFile writes content to path in place.
func WriteFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// ReplaceFile writes content the way editors save: a temporary file renamed
// over the old one.
func ReplaceFile(t testing.TB, path, content string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	WriteFile(t, tmp, content)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// DataLink is the symlink through which the kubelet publishes a mounted
// ConfigMap's current files.
const DataLink = "..data"

// ConfigMap is a directory laid out the way the kubelet mounts a ConfigMap,
// and updated the way its atomic writer does it.
type ConfigMap struct {
	// Dir is the mount point: the -config path.
	Dir string
	n   int
}

// NewConfigMap mounts files in a new temporary directory.
func NewConfigMap(t testing.TB, files map[string]string) *ConfigMap {
	t.Helper()
	cm := &ConfigMap{Dir: RealTempDir(t)}
	cm.Update(t, files)
	return cm
}

// Update publishes a new version of the files: a new timestamped
// directory, a ..data_tmp symlink to it renamed over ..data, the visible
// symlinks for new names, then the old directory removed.
func (cm *ConfigMap) Update(t testing.TB, files map[string]string) {
	t.Helper()
	cm.n++
	ts := fmt.Sprintf("..2026_11_30_00_00_%02d.%09d", cm.n%60, cm.n)
	if err := os.Mkdir(filepath.Join(cm.Dir, ts), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		WriteFile(t, filepath.Join(cm.Dir, ts, name), content)
	}
	dataLink := filepath.Join(cm.Dir, DataLink)
	old, _ := os.Readlink(dataLink)
	tmp := filepath.Join(cm.Dir, "..data_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, dataLink); err != nil {
		t.Fatal(err)
	}
	for name := range files {
		link := filepath.Join(cm.Dir, name)
		if _, err := os.Lstat(link); errors.Is(err, os.ErrNotExist) {
			if err := os.Symlink(filepath.Join(DataLink, name), link); err != nil {
				t.Fatal(err)
			}
		}
	}
	if old != "" {
		if err := os.RemoveAll(filepath.Join(cm.Dir, old)); err != nil {
			t.Fatal(err)
		}
	}
}
