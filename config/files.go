package config

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"github.com/toolgate/toolgate/internal/boundedio"
	"github.com/toolgate/toolgate/policy"
)

// This file reads a policy path: the files of a directory, each bounded in
// size and stat'ed after it is read, so that a reload can tell a settled
// read from one that raced a writer (Loader compares two reads), and the
// checksum that says whether a reload changed anything.

// maxPolicyBytes bounds one policy file, so a wrong path (a log file, a
// binary) fails fast instead of being parsed.
const maxPolicyBytes = 8 << 20

// Files is the content of a policy path's files as read at one moment, to
// be compiled later: a reload compares two reads before it trusts one.
type Files struct {
	sources []source
	// Checksum is the Checksum a snapshot compiled from these files gets.
	Checksum string
	// Stats describe what was read, each taken after its file was read: the
	// files, and for a directory the directory itself first (a file added
	// or removed changes it).
	Stats []fs.FileInfo
}

// ReadFiles reads the files of the policy at path without compiling them.
func ReadFiles(path string) (*Files, error) {
	names, dir, err := policyFiles(path)
	if err != nil {
		return nil, err
	}
	f := &Files{sources: make([]source, 0, len(names))}
	for _, name := range names {
		data, st, err := readLimited(name)
		if err != nil {
			return nil, err
		}
		f.sources = append(f.sources, source{name: name, data: data})
		f.Stats = append(f.Stats, st)
	}
	if dir != nil {
		f.Stats = append([]fs.FileInfo{dir}, f.Stats...)
	}
	f.Checksum = checksum(f.sources)
	return f, nil
}

// Compile compiles the files read.
func (f *Files) Compile(opts Options) (*policy.Snapshot, error) {
	return Compile(f.sources, opts)
}

// readLimited reads a policy file, and stats it after reading, so that a
// change during the read shows in the stat. A file whose stat already says
// it is too large is refused before it is read; one that grows past the
// limit while it is read is refused by boundedio.
func readLimited(name string) ([]byte, fs.FileInfo, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	if st.Size() > maxPolicyBytes {
		return nil, nil, fmt.Errorf("%s: policy file is larger than %d bytes", name, maxPolicyBytes)
	}
	buf, err := boundedio.ReadAll(f, maxPolicyBytes)
	if tooLarge := (*boundedio.TooLargeError)(nil); errors.As(err, &tooLarge) {
		return nil, nil, fmt.Errorf("%s: policy file is larger than %d bytes", name, maxPolicyBytes)
	}
	if err != nil {
		return nil, nil, err
	}
	if st, err = f.Stat(); err != nil {
		return nil, nil, err
	}
	return buf, st, nil
}

// policyFiles lists the files of a policy path. In a directory, names that
// start with "." are skipped: Kubernetes mounts a ConfigMap as symlinks to
// a hidden "..data" directory.
func policyFiles(path string) (files []string, dir fs.FileInfo, err error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, nil, err
	}
	if !st.IsDir() {
		return []string{path}, nil, nil
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return nil, nil, err
	}
	for _, e := range entries {
		name := e.Name()
		if !isPolicyFileName(name) {
			continue
		}
		full := filepath.Join(path, name)
		fst, err := os.Stat(full) // follows symlinks
		if err != nil {
			return nil, nil, err
		}
		if fst.Mode()&fs.ModeType != 0 {
			continue
		}
		files = append(files, full)
	}
	if len(files) == 0 {
		return nil, nil, fmt.Errorf("%s: no *.yaml policy files in directory", path)
	}
	sort.Strings(files)
	// Stat the directory again after listing it: a file added or removed
	// meanwhile shows in it.
	if st, err = os.Stat(path); err != nil {
		return nil, nil, err
	}
	return files, st, nil
}

// checksum is the SHA-256 of the sources' names (without directories) and
// contents: it changes exactly when what a policy is compiled from does.
func checksum(sources []source) string {
	sum := sha256.New()
	for _, src := range sources {
		addToChecksum(sum, src)
	}
	return hex.EncodeToString(sum.Sum(nil))
}

func addToChecksum(sum hash.Hash, src source) {
	fmt.Fprintf(sum, "%s\x00%d\x00", filepath.Base(src.name), len(src.data))
	sum.Write(src.data)
}

// readChecksum reads the files of the policy at path as ReadFiles does and
// returns only their checksum, holding one file's bytes at a time.
func readChecksum(path string) (string, error) {
	names, _, err := policyFiles(path)
	if err != nil {
		return "", err
	}
	sum := sha256.New()
	for _, name := range names {
		data, _, err := readLimited(name)
		if err != nil {
			return "", err
		}
		addToChecksum(sum, source{name: name, data: data})
	}
	return hex.EncodeToString(sum.Sum(nil)), nil
}
