package main

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// runAsToolgate, set to 1 in the environment, makes a copy of this test
// binary run as toolgate (see TestMain), so the tests below can put it next
// to a toolgate-kube of their choosing.
const runAsToolgate = "TOOLGATE_TEST_RUN_AS_TOOLGATE"

// fakeKubeTool is a toolgate-kube that shows what it was given: inject
// prints its arguments and its standard input and exits 3; webhook waits
// for SIGTERM and exits 42 on it.
const fakeKubeTool = `#!/bin/sh
PATH=/usr/bin:/bin
case "$1" in
inject)
  echo "args: $*"
  cat
  exit 3 ;;
webhook)
  trap 'echo "got TERM"; exit 42' TERM
  echo ready
  while :; do sleep 0.05; done ;;
esac
exit 9
`

// installToolgate copies this test binary into dir as toolgate, and returns
// a command that runs it with args and no toolgate-kube on PATH.
func installToolgate(t *testing.T, dir string) func(args ...string) *exec.Cmd {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "toolgate")
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	empty := t.TempDir()
	return func(args ...string) *exec.Cmd {
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), runAsToolgate+"=1", "PATH="+empty)
		return cmd
	}
}

func writeExecutable(t *testing.T, name, text string) {
	t.Helper()
	if err := os.WriteFile(name, []byte(text), 0o755); err != nil {
		t.Fatal(err)
	}
}

func TestFindKubeTool(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("executable bits")
	}
	onPath := func(string) (string, error) { return "/on/path/toolgate-kube", nil }
	notOnPath := func(string) (string, error) { return "", exec.ErrNotFound }
	for _, c := range []struct {
		name     string
		setup    func(t *testing.T, dir string) (self string)
		lookPath func(string) (string, error)
		want     string // "" for not found; "DIR/..." is under the test's dir
	}{
		{
			name: "it is found next to toolgate before PATH",
			setup: func(t *testing.T, dir string) string {
				writeExecutable(t, filepath.Join(dir, "toolgate-kube"), "#!/bin/sh\n")
				return filepath.Join(dir, "toolgate")
			},
			lookPath: onPath,
			want:     "DIR/toolgate-kube",
		},
		{
			name: "a file there that is not executable is passed over for PATH",
			setup: func(t *testing.T, dir string) string {
				if err := os.WriteFile(filepath.Join(dir, "toolgate-kube"), nil, 0o644); err != nil {
					t.Fatal(err)
				}
				return filepath.Join(dir, "toolgate")
			},
			lookPath: onPath,
			want:     "/on/path/toolgate-kube",
		},
		{
			name: "a symlinked toolgate looks next to its target",
			setup: func(t *testing.T, dir string) string {
				real := filepath.Join(dir, "real")
				if err := os.Mkdir(real, 0o755); err != nil {
					t.Fatal(err)
				}
				writeExecutable(t, filepath.Join(real, "toolgate"), "")
				writeExecutable(t, filepath.Join(real, "toolgate-kube"), "#!/bin/sh\n")
				link := filepath.Join(dir, "toolgate")
				if err := os.Symlink(filepath.Join(real, "toolgate"), link); err != nil {
					t.Fatal(err)
				}
				return link
			},
			lookPath: notOnPath,
			want:     "DIR/real/toolgate-kube",
		},
		{
			name:     "neither next to toolgate nor on PATH",
			setup:    func(t *testing.T, dir string) string { return filepath.Join(dir, "toolgate") },
			lookPath: notOnPath,
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir, err := filepath.EvalSymlinks(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			got, err := findKubeTool(c.setup(t, dir), c.lookPath)
			want := strings.Replace(c.want, "DIR", dir, 1)
			if want == "" {
				if err == nil {
					t.Errorf("found %s, want none", got)
				}
				return
			}
			if err != nil || got != want {
				t.Errorf("findKubeTool = %q, %v; want %s", got, err, want)
			}
		})
	}
}

// TestKubeCommandsRunToolgateKube: toolgate inject and toolgate webhook run
// the toolgate-kube next to toolgate with their arguments and standard
// input, pass on its exit code and SIGTERM, and without one print the
// command to run instead.
func TestKubeCommandsRunToolgateKube(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("a shell script stands in for toolgate-kube")
	}
	dir := t.TempDir()
	toolgate := installToolgate(t, dir)

	t.Run("without toolgate-kube it prints what to run", func(t *testing.T) {
		var stdout, stderr bytes.Buffer
		cmd := toolgate("inject", "-image", "registry.example.com/toolgate:1", "deploy dir/app.yaml")
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != exitNotFound {
			t.Fatalf("exit %v, want %d", err, exitNotFound)
		}
		for _, want := range []string{
			"toolgate-kube inject -image registry.example.com/toolgate:1 'deploy dir/app.yaml'\n",
			"go install github.com/toolgate/toolgate/cmd/toolgate-kube@latest",
			"in " + dir + " nor on PATH",
		} {
			if !strings.Contains(stderr.String(), want) {
				t.Errorf("stderr does not say %q:\n%s", want, stderr.String())
			}
		}
		if stdout.Len() != 0 {
			t.Errorf("stdout %q, want nothing", stdout.String())
		}
	})

	writeExecutable(t, filepath.Join(dir, "toolgate-kube"), fakeKubeTool)

	t.Run("inject gets the arguments and standard input, and its exit code is kept", func(t *testing.T) {
		var stdout bytes.Buffer
		cmd := toolgate("inject", "-image", "x", "-")
		cmd.Stdin, cmd.Stdout = strings.NewReader("kind: Pod\n"), &stdout
		err := cmd.Run()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 3 {
			t.Errorf("exit %v, want toolgate-kube's 3", err)
		}
		if want := "args: inject -image x -\nkind: Pod\n"; stdout.String() != want {
			t.Errorf("stdout %q, want %q", stdout.String(), want)
		}
	})

	t.Run("webhook stops on SIGTERM as toolgate-kube does", func(t *testing.T) {
		cmd := toolgate("webhook", "-image", "x")
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := bufio.NewScanner(out)
		if !lines.Scan() || lines.Text() != "ready" {
			t.Fatalf("toolgate-kube did not start: %q", lines.Text())
		}
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		type result struct {
			rest []byte
			err  error
		}
		done := make(chan result, 1)
		go func() {
			rest, _ := io.ReadAll(out)
			done <- result{rest, cmd.Wait()}
		}()
		select {
		case r := <-done:
			var exit *exec.ExitError
			if !errors.As(r.err, &exit) || exit.ExitCode() != 42 || string(r.rest) != "got TERM\n" {
				t.Errorf("exit %v, output %q; want toolgate-kube's 42 after \"got TERM\"", r.err, r.rest)
			}
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			t.Fatal("toolgate webhook did not stop on SIGTERM")
		}
	})

	t.Run("help is answered without toolgate-kube", func(t *testing.T) {
		out, err := toolgate("inject", "-h").Output()
		if err != nil || !strings.HasPrefix(string(out), "Usage of toolgate inject:\n") {
			t.Errorf("toolgate inject -h: %v, %q", err, out)
		}
	})
}

// TestKubeCommandsMatchToolgateKube runs toolgate inject through a real
// toolgate-kube, built next to toolgate: the output is toolgate-kube's own.
func TestKubeCommandsMatchToolgateKube(t *testing.T) {
	if testing.Short() {
		t.Skip("builds toolgate-kube")
	}
	dir := t.TempDir()
	toolgate := installToolgate(t, dir)
	kube := filepath.Join(dir, "toolgate-kube")
	build := exec.Command("go", "build", "-o", kube, "../toolgate-kube")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	manifest := filepath.Join("..", "toolgate-kube", "testdata", "inject", "mixed.yaml")
	args := []string{"inject", "-image", "registry.example.com/toolgate:1", "-service", manifest}
	want, err := exec.Command(kube, args...).Output()
	if err != nil {
		t.Fatalf("toolgate-kube %s: %v", strings.Join(args, " "), err)
	}
	got, err := toolgate(args...).Output()
	if err != nil {
		t.Fatalf("toolgate %s: %v", strings.Join(args, " "), err)
	}
	if !bytes.Equal(got, want) || !bytes.Contains(got, []byte("name: toolgate")) {
		t.Errorf("toolgate inject printed\n%s\nwant toolgate-kube inject's\n%s", got, want)
	}
}

// TestSidecarLinksNoKubernetesOrTestCode holds the sidecar's dependencies,
// built as make build and the Dockerfile build it, to what it runs: no
// Kubernetes module (that is toolgate-kube), no test kit or testing
// library, and no gRPC request tracing (the grpcnotrace tag).
func TestSidecarLinksNoKubernetesOrTestCode(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-tags", "grpcnotrace", "-f", "{{.ImportPath}}", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 100 {
		t.Fatalf("go list found only %d packages", len(deps))
	}
	forbidden := []struct{ prefix, why string }{
		{"k8s.io/", "Kubernetes belongs to toolgate-kube"},
		{"sigs.k8s.io/", "Kubernetes belongs to toolgate-kube"},
		{"github.com/toolgate/toolgate/deploy", "the sidecar manifest belongs to toolgate-kube"},
		{"github.com/toolgate/toolgate/internal/testkit/", "test kits are for tests"},
		{"testing", "the testing package is for tests"},
		{"net/http/httptest", "httptest is for tests"},
		{"go.uber.org/goleak", "goleak is for tests"},
		{"golang.org/x/net/trace", "gRPC's request tracing is left out (-tags grpcnotrace)"},
	}
	for _, dep := range deps {
		for _, f := range forbidden {
			if dep == strings.TrimSuffix(f.prefix, "/") || strings.HasPrefix(dep, f.prefix) && strings.HasSuffix(f.prefix, "/") {
				t.Errorf("the sidecar links %s: %s", dep, f.why)
			}
		}
	}
}
