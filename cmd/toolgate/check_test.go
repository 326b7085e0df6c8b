package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestCheckNamesEachPath: check prints one stable line per path it
// validated, naming it (and, for a directory, its files), keeps checking
// after a broken one, and exits 1 when any is broken.
func TestCheckNamesEachPath(t *testing.T) {
	dir := t.TempDir()
	split := filepath.Join(dir, "split")
	if err := os.Mkdir(split, 0o755); err != nil {
		t.Fatal(err)
	}
	policy, err := os.ReadFile("../../examples/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, content string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("split/a.yaml", string(policy))
	write("split/b.yaml", "version: 1\nupstreams:\n  extra: {url: \"http://127.0.0.1:7009\"}\n")
	broken := write("broken.yaml", "version: 1\nserver: {listen: 8080}\nsurprise: true\n")
	good := "../../examples/policy.yaml"

	line := regexp.MustCompile(`^ok: (.+): (\d+) tools, (\d+) upstreams \(checksum [0-9a-f]{12}(; files (.+))?\)$`)
	cases := []struct {
		name string
		args []string
		code int
		ok   []string // the lines' PATH, in order
		// files lists a directory's files, for its line.
		files  string
		stderr string
	}{
		{"a file given with -config", []string{"-config", good}, 0, []string{good}, "", ""},
		{"files after the flags", []string{good, "../../examples/faults.yaml"}, 0, []string{good, "../../examples/faults.yaml"}, "", ""},
		{"a directory names its files", []string{split}, 0, []string{split}, "a.yaml, b.yaml", ""},
		{"a broken file among good ones", []string{good, broken, split}, 1, []string{good, split}, "a.yaml, b.yaml", "broken.yaml:3:1: surprise: unknown key"},
		{"no path", nil, 2, nil, "", "-config is required"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(append([]string{"check"}, c.args...), &stdout, &stderr)
			if code != c.code {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, c.code, stderr.String())
			}
			if !strings.Contains(stderr.String(), c.stderr) {
				t.Errorf("stderr does not say %q:\n%s", c.stderr, stderr.String())
			}
			var got []string
			for _, l := range strings.Split(strings.TrimSuffix(stdout.String(), "\n"), "\n") {
				if l == "" {
					continue
				}
				m := line.FindStringSubmatch(l)
				if m == nil {
					t.Errorf("line %q is not ok: PATH: N tools, M upstreams (checksum HEX)", l)
					continue
				}
				got = append(got, m[1])
				if m[5] != "" && m[5] != c.files {
					t.Errorf("%s names files %q, want %q", m[1], m[5], c.files)
				}
			}
			if strings.Join(got, "|") != strings.Join(c.ok, "|") {
				t.Errorf("ok lines for %v, want %v", got, c.ok)
			}
		})
	}
}
