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

// TestCheckRefusesWhatExtprocRefuses: ambiguous tool routes are one rule
// in config. `toolgate check -extproc` refuses them with the very lines
// `toolgate extproc` prints before it exits; plain check, for a policy
// serve runs by tool name, warns with the same position and exits 0.
func TestCheckRefusesWhatExtprocRefuses(t *testing.T) {
	path := writePolicy(t, extprocPolicy+`  get_page:
    description: Get a page.
    upstream: legacy
    args: {type: object, required: [n], properties: {n: {type: string}}}
    request: {method: GET, path: "/docs/{n}"}
`)
	at := path + ":16:34: tools.get_page.request.path: route GET /docs/{n} is ambiguous with tool get_doc (GET /docs/{id})"
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stdout string // a prefix
		stderr string
	}{
		{"check -extproc refuses it with file:line:col", []string{"check", "-extproc", path}, 1, "",
			at + ": toolgate extproc identifies every call by its route\n"},
		{"extproc refuses it with the same line", []string{"extproc", "-config", path, "-listen", "127.0.0.1:0", "-admin", "127.0.0.1:0", "-watch=false"}, 1, "",
			at + ": toolgate extproc identifies every call by its route\n"},
		{"check alone passes it with a warning", []string{"check", path}, 0, "ok: " + path + ": 2 tools",
			"warning: " + at + ": toolgate extproc and transparent mode would refuse this policy\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(tc.args, &stdout, &stderr)
			if code != tc.code || stderr.String() != tc.stderr || !strings.HasPrefix(stdout.String(), tc.stdout) {
				t.Errorf("exit %d, stdout %q, stderr %q; want %d, %q…, %q", code, stdout.String(), stderr.String(), tc.code, tc.stdout, tc.stderr)
			}
		})
	}
}

// TestCheckAndTryReadEnvFiles: -env-file gives check and try the ${VAR}s
// of a dotenv-style file (examples/zoo.yaml's placeholders in
// examples/zoo.env), ahead of the environment; without it the zoo's
// variables are unset, and a broken file is a usage error naming its line.
func TestCheckAndTryReadEnvFiles(t *testing.T) {
	const zoo, env = "../../examples/zoo.yaml", "../../examples/zoo.env"
	t.Run("check without the file", func(t *testing.T) {
		var out, errOut bytes.Buffer
		if code := runCheck([]string{zoo}, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "is not set") {
			t.Errorf("exit %d, stderr %s", code, errOut.String())
		}
	})
	t.Run("check with it", func(t *testing.T) {
		var out, errOut bytes.Buffer
		if code := runCheck([]string{"-env-file", env, zoo}, &out, &errOut); code != 0 || !strings.HasPrefix(out.String(), "ok: "+zoo) {
			t.Errorf("exit %d, stdout %s, stderr %s", code, out.String(), errOut.String())
		}
	})
	t.Run("a later file and the file before the environment", func(t *testing.T) {
		t.Setenv("ES_URL", "http://127.0.0.1:1")
		more := filepath.Join(t.TempDir(), "more.env")
		if err := os.WriteFile(more, []byte("ES_URL=\"http://127.0.0.1:9999\" # a fake\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		stdout, stderr, code := runTryArgs([]string{"-config", zoo, "-env-file", env, "-env-file", more, "-tool", "search_articles", "-args", `{"q":"x"}`}, "")
		if code != 0 || !strings.Contains(stdout, "\nHost: 127.0.0.1:9999\n") {
			t.Errorf("exit %d, stdout %s, stderr %s", code, stdout, stderr)
		}
	})
	t.Run("a broken file", func(t *testing.T) {
		bad := filepath.Join(t.TempDir(), "bad.env")
		if err := os.WriteFile(bad, []byte("A=1\nnot a line\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		var out, errOut bytes.Buffer
		if code := runCheck([]string{"-env-file", bad, zoo}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "bad.env:2: want NAME=VALUE") {
			t.Errorf("exit %d, stderr %s", code, errOut.String())
		}
	})
}
