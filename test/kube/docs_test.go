package kube

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	sigsyaml "sigs.k8s.io/yaml"
)

// repoRoot is the repository, from this package's directory.
const repoRoot = "../.."

// kubernetesDocs is the page whose commands the tests walk; operationsDocs
// holds a shorter way into Kubernetes, walked too.
var (
	kubernetesDocs = filepath.Join(repoRoot, "docs", "kubernetes.md")
	operationsDocs = filepath.Join(repoRoot, "docs", "operations.md")
)

// shellBlock is a ```sh block of a Markdown page: its commands, in order.
type shellBlock struct {
	file    string // the page, from the repository's root
	line    int    // where the block starts in the page
	section string // the heading above it
	script  string
	// cluster: a command of the block talks to the API server.
	cluster bool
}

// fence matches a fenced block, indented (inside a list item) or not.
var fence = regexp.MustCompile("(?ms)^([ \t]*)```([a-z]*)\n(.*?)^[ \t]*```[ \t]*$")

var heading = regexp.MustCompile(`(?m)^#+ (.+)$`)

// kubectlCommand finds a kubectl command: at a line's start, or after a
// pipe.
var kubectlCommand = regexp.MustCompile(`(?m)(^\s*|\|\s*)kubectl\s`)

// shellBlocks reads the ```sh blocks of a page.
func shellBlocks(t *testing.T, file string) []shellBlock {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	var out []shellBlock
	for _, m := range fence.FindAllStringSubmatchIndex(text, -1) {
		if text[m[4]:m[5]] != "sh" {
			continue
		}
		indent := text[m[2]:m[3]]
		var script strings.Builder
		for line := range strings.SplitSeq(text[m[6]:m[7]], "\n") {
			script.WriteString(strings.TrimPrefix(line, indent))
			script.WriteString("\n")
		}
		rel, _ := filepath.Rel(repoRoot, file)
		b := shellBlock{file: rel, line: strings.Count(text[:m[0]], "\n") + 1, script: script.String()}
		if hs := heading.FindAllStringSubmatch(text[:m[0]], -1); len(hs) > 0 {
			b.section = hs[len(hs)-1][1]
		}
		b.cluster = kubectlCommand.MatchString(b.script)
		out = append(out, b)
	}
	return out
}

// walker runs docs' blocks as a person would: bash, in a working
// directory of their own whose deploy/ is the repository's, with the
// built binaries first on PATH.
type walker struct {
	dir string
	env []string
}

// newWalker makes the working directory and puts bin first on PATH.
func newWalker(t *testing.T, bin string, env ...string) *walker {
	t.Helper()
	dir := t.TempDir()
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"deploy", "examples", "cmd"} {
		if err := os.Symlink(filepath.Join(root, name), filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	w := &walker{dir: dir, env: append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))}
	w.env = append(w.env, env...)
	return w
}

// run runs one block with bash -euo pipefail and returns its stdout; a
// command that fails fails the test, naming the block.
func (w *walker) run(t *testing.T, b shellBlock) string {
	t.Helper()
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", b.script)
	cmd.Dir = w.dir
	cmd.Env = w.env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s:%d (%s): %v\n%s\nstdout:\n%s\nstderr:\n%s", b.file, b.line, b.section, err, b.script, stdout.String(), stderr.String())
	}
	t.Logf("%s:%d (%s): ran in %v", b.file, b.line, b.section, time.Since(start).Round(time.Millisecond))
	return stdout.String()
}

// buildTools builds toolgate and toolgate-kube into a directory of the
// test, as make build does.
func buildTools(t *testing.T) string {
	t.Helper()
	bin := t.TempDir()
	cmd := exec.Command("go", "build", "-trimpath", "-tags", "grpcnotrace", "-o", bin+string(os.PathSeparator), "./cmd/toolgate", "./cmd/toolgate-kube")
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TestKubernetesDocsWithoutCluster runs the commands of docs/kubernetes.md
// that need no cluster (toolgate check, toolgate-kube inject on files),
// in the page's order, with the built binaries; the blocks that talk to
// the API server run in make e2e-kube (TestKubernetesEndToEnd).
func TestKubernetesDocsWithoutCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries")
	}
	blocks := shellBlocks(t, kubernetesDocs)
	w := newWalker(t, buildTools(t))
	local, cluster := 0, 0
	for _, b := range blocks {
		if b.cluster {
			cluster++
			continue
		}
		local++
		out := w.run(t, b)
		if strings.Contains(b.script, "-dry-run") && !regexp.MustCompile(`\n\+\s+- name: toolgate\n`).MatchString(out) {
			t.Errorf("docs/kubernetes.md:%d: the dry run shows no toolgate container:\n%s", b.line, out)
		}
	}
	if local == 0 || cluster < 3 {
		t.Fatalf("docs/kubernetes.md has %d blocks without a cluster and %d with one; the walk expects both", local, cluster)
	}
	// What the page says inject wrote: the sidecar, a moved Service, a
	// NetworkPolicy.
	data, err := os.ReadFile(filepath.Join(w.dir, "orders-injected.yaml"))
	if err != nil {
		t.Fatalf("the page's inject command wrote no orders-injected.yaml: %v", err)
	}
	for _, want := range []string{"- name: toolgate\n", "targetPort: 8080", "kind: NetworkPolicy", "name: orders-policy"} {
		if !bytes.Contains(data, []byte(want)) {
			t.Errorf("orders-injected.yaml lacks %q", want)
		}
	}
	for i, doc := range regexp.MustCompile(`(?m)^---.*$`).Split(string(data), -1) {
		if _, err := sigsyaml.YAMLToJSONStrict([]byte(doc)); err != nil {
			t.Errorf("orders-injected.yaml document %d: %v", i+1, err)
		}
	}
}
