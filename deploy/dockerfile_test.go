package deploy

import (
	"debug/elf"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
)

// instruction is one Dockerfile instruction with its continuation lines
// joined.
type instruction struct {
	cmd  string // upper case
	args string
}

func parseDockerfile(t *testing.T, path string) []instruction {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []instruction
	var cur strings.Builder
	for line := range strings.SplitSeq(string(data), "\n") {
		trimmed := strings.TrimSpace(line)
		if cur.Len() == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if cont, ok := strings.CutSuffix(trimmed, `\`); ok {
			cur.WriteString(cont + " ")
			continue
		}
		cur.WriteString(trimmed)
		cmd, args, _ := strings.Cut(cur.String(), " ")
		out = append(out, instruction{cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args)})
		cur.Reset()
	}
	return out
}

func TestDockerfileBuildsAStaticNonRootImage(t *testing.T) {
	ins := parseDockerfile(t, "Dockerfile")
	var froms []string
	var final []instruction // the instructions of the last stage
	for _, in := range ins {
		if in.cmd == "FROM" {
			froms = append(froms, in.args)
			final = nil
		}
		final = append(final, in)
	}
	if len(froms) < 2 {
		t.Fatalf("%d stages, want a multi-stage build", len(froms))
	}
	base := strings.Fields(froms[len(froms)-1])[0]
	if !strings.HasPrefix(base, "gcr.io/distroless/static") && base != "scratch" {
		t.Errorf("final stage is FROM %s, want distroless static or scratch", base)
	}

	var user, binary, entrypoint string
	cgoOff := false
	for _, in := range ins {
		if in.cmd == "RUN" && strings.Contains(in.args, "go build") && strings.Contains(in.args, "CGO_ENABLED=0") {
			cgoOff = true
		}
	}
	for _, in := range final {
		switch in.cmd {
		case "USER":
			user = in.args
		case "COPY":
			if f := strings.Fields(in.args); strings.HasPrefix(f[0], "--from=") {
				binary = f[len(f)-1]
			}
		case "ENTRYPOINT":
			var argv []string
			if err := json.Unmarshal([]byte(in.args), &argv); err != nil || len(argv) == 0 {
				t.Fatalf("ENTRYPOINT %s is not the exec form", in.args)
			}
			entrypoint = argv[0]
		}
	}
	if !cgoOff {
		t.Error("no RUN go build with CGO_ENABLED=0: the binary would need a libc the final image lacks")
	}
	if binary == "" || entrypoint != binary {
		t.Errorf("ENTRYPOINT %q does not run the copied binary %q", entrypoint, binary)
	}
	uid, _, _ := strings.Cut(user, ":")
	n, err := strconv.Atoi(uid)
	if err != nil || n == 0 {
		t.Fatalf("USER %q is not a numeric non-root user: Kubernetes cannot verify runAsNonRoot", user)
	}

	// The Deployment runs toolgate as the image's user.
	data, err := os.ReadFile("base/deployment.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var d appsv1.Deployment
	if err := unmarshalStrict(data, &d); err != nil {
		t.Fatal(err)
	}
	sc := d.Spec.Template.Spec.SecurityContext
	if sc == nil || sc.RunAsUser == nil || *sc.RunAsUser != int64(n) {
		t.Errorf("the pod's runAsUser is not the image's USER %d", n)
	}
}

// TestToolgateBuildsAsAStaticBinary builds cmd/toolgate the way the
// Dockerfile does and checks that the result needs no dynamic loader, so it
// runs on distroless/static or scratch.
func TestToolgateBuildsAsAStaticBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	if runtime.GOOS != "linux" {
		t.Skip("checks an ELF binary")
	}
	out := filepath.Join(t.TempDir(), "toolgate")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", out, "./cmd/toolgate")
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	f, err := elf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("the binary has a %v program header: it is dynamically linked", p.Type)
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("the binary needs shared libraries %v", libs)
	}
}

// dockerignore reads Dockerfile.dockerignore into its patterns, in order.
func dockerignore(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile("Dockerfile.dockerignore")
	if err != nil {
		t.Fatal(err)
	}
	var patterns []string
	for line := range strings.SplitSeq(string(data), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			patterns = append(patterns, line)
		}
	}
	return patterns
}

// ignorePattern compiles a .dockerignore pattern as BuildKit reads it: *
// and ? within a path segment, ** across segments; a pattern that matches
// a directory excludes (or, with !, includes) what is under it.
func ignorePattern(t *testing.T, p string) *regexp.Regexp {
	t.Helper()
	var b strings.Builder
	b.WriteString("^")
	for i := 0; i < len(p); i++ {
		switch {
		case strings.HasPrefix(p[i:], "**/"):
			b.WriteString("(.*/)?")
			i += 2
		case strings.HasPrefix(p[i:], "**"):
			b.WriteString(".*")
			i++
		case p[i] == '*':
			b.WriteString("[^/]*")
		case p[i] == '?':
			b.WriteString("[^/]")
		default:
			b.WriteString(regexp.QuoteMeta(p[i : i+1]))
		}
	}
	b.WriteString("(/.*)?$")
	re, err := regexp.Compile(b.String())
	if err != nil {
		t.Fatalf("pattern %q: %v", p, err)
	}
	return re
}

// TestDockerContextHoldsWhatTheBuildNeeds lists every file `go build
// ./cmd/toolgate` reads from this module (Go files and embedded files) and
// checks that Dockerfile.dockerignore keeps each in the build context.
func TestDockerContextHoldsWhatTheBuildNeeds(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", `{{if .Module}}{{if .Module.Main}}{{$d := .Dir}}{{range .GoFiles}}{{$d}}/{{.}}
{{end}}{{range .EmbedFiles}}{{$d}}/{{.}}
{{end}}{{end}}{{end}}`, "../cmd/toolgate").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	type rule struct {
		re      *regexp.Regexp
		include bool
	}
	var rules []rule
	for _, p := range dockerignore(t) {
		include := strings.HasPrefix(p, "!")
		rules = append(rules, rule{ignorePattern(t, strings.TrimPrefix(p, "!")), include})
	}
	files := strings.Fields(string(out))
	if len(files) < 20 {
		t.Fatalf("go list found only %d files", len(files))
	}
	for _, f := range files {
		rel, err := filepath.Rel(root, f)
		if err != nil {
			t.Fatal(err)
		}
		rel = filepath.ToSlash(rel)
		excluded := false
		for _, r := range rules {
			if r.re.MatchString(rel) {
				excluded = !r.include
			}
		}
		if excluded {
			t.Errorf("the build needs %s, which Dockerfile.dockerignore leaves out of the context", rel)
		}
	}
}
