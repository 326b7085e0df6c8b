package deploy

import (
	"debug/elf"
	"encoding/json"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
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

// image is what the Dockerfile puts in its final stage: each copied
// binary's path with the package it is built from, the entry point, and
// the user.
type image struct {
	binaries   map[string]string // path in the image -> Go package
	entrypoint string
	user       string
	base       string
	cgoOff     bool
}

// goBuild matches a go build that writes into a directory: the packages
// after -o DIR/ each become DIR/<last element>, as go build names them.
var goBuild = regexp.MustCompile(`go build .*-o (\S+/) ((?:\./cmd/\S+\s*)+)$`)

// readImage reads the Dockerfile's build and final stages.
func readImage(t *testing.T) image {
	t.Helper()
	ins := parseDockerfile(t, "Dockerfile")
	var froms int
	built := map[string]string{} // path in the build stage -> package
	img := image{binaries: map[string]string{}}
	for _, in := range ins {
		switch in.cmd {
		case "FROM":
			froms++
			img.base = strings.Fields(in.args)[0]
			img.binaries, img.entrypoint, img.user = map[string]string{}, "", ""
		case "RUN":
			m := goBuild.FindStringSubmatch(in.args)
			if m == nil {
				continue
			}
			img.cgoOff = img.cgoOff || strings.Contains(in.args, "CGO_ENABLED=0")
			for _, pkg := range strings.Fields(m[2]) {
				built[m[1]+path.Base(pkg)] = pkg
			}
		case "USER":
			img.user = in.args
		case "COPY":
			if f := strings.Fields(in.args); strings.HasPrefix(f[0], "--from=") {
				img.binaries[f[len(f)-1]] = built[f[len(f)-2]]
			}
		case "ENTRYPOINT":
			var argv []string
			if err := json.Unmarshal([]byte(in.args), &argv); err != nil || len(argv) == 0 {
				t.Fatalf("ENTRYPOINT %s is not the exec form", in.args)
			}
			img.entrypoint = argv[0]
		}
	}
	if froms < 2 {
		t.Fatalf("%d stages, want a multi-stage build", froms)
	}
	return img
}

func TestDockerfileBuildsAStaticNonRootImage(t *testing.T) {
	img := readImage(t)
	if !strings.HasPrefix(img.base, "gcr.io/distroless/static") && img.base != "scratch" {
		t.Errorf("final stage is FROM %s, want distroless static or scratch", img.base)
	}
	if !img.cgoOff {
		t.Error("no RUN go build with CGO_ENABLED=0: the binary would need a libc the final image lacks")
	}
	uid, _, _ := strings.Cut(img.user, ":")
	n, err := strconv.Atoi(uid)
	if err != nil || n == 0 {
		t.Fatalf("USER %q is not a numeric non-root user: Kubernetes cannot verify runAsNonRoot", img.user)
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

// TestImageHoldsWhatItsPodsRun: the sidecars (the base Deployment, the
// sidecar component) run the image's entry point, which must be the
// sidecar, ./cmd/toolgate; the webhook Deployment runs toolgate-kube, which
// must be in the image, built from ./cmd/toolgate-kube.
func TestImageHoldsWhatItsPodsRun(t *testing.T) {
	img := readImage(t)
	if pkg, ok := img.binaries[img.entrypoint]; !ok || pkg != "./cmd/toolgate" {
		t.Errorf("ENTRYPOINT %s is built from %q, want the copied ./cmd/toolgate (image binaries: %v)", img.entrypoint, pkg, img.binaries)
	}
	for _, dir := range []string{"base", "components/sidecar", "webhook"} {
		r := render(t, dir)
		for name, tmpl := range r.templates {
			for _, c := range slices.Concat(tmpl.Spec.InitContainers, tmpl.Spec.Containers) {
				if !strings.Contains(c.Image, "toolgate") {
					continue
				}
				want := "./cmd/toolgate"
				if c.Name == "webhook" {
					want = "./cmd/toolgate-kube"
				}
				bin := img.entrypoint
				if len(c.Command) > 0 {
					bin = c.Command[0]
				}
				if pkg, ok := img.binaries[bin]; !ok || pkg != want {
					t.Errorf("%s: %s container %s runs %s, which the image holds as %q; want %s", dir, name, c.Name, bin, pkg, want)
				}
			}
		}
	}
}

// TestBinariesBuildStatic builds cmd/toolgate and cmd/toolgate-kube the
// way the Dockerfile does and checks that each needs no dynamic loader, so
// it runs on distroless/static or scratch.
func TestBinariesBuildStatic(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries")
	}
	if runtime.GOOS != "linux" {
		t.Skip("checks ELF binaries")
	}
	out := t.TempDir()
	cmd := exec.Command("go", "build", "-trimpath", "-tags", "grpcnotrace", "-ldflags", "-s -w", "-o", out+"/", "./cmd/toolgate", "./cmd/toolgate-kube")
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	for _, name := range []string{"toolgate", "toolgate-kube"} {
		t.Run(name, func(t *testing.T) {
			f, err := elf.Open(filepath.Join(out, name))
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
		})
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
// ./cmd/toolgate ./cmd/toolgate-kube` reads from this module (Go files and
// embedded files) and checks that Dockerfile.dockerignore keeps each in the
// build context.
func TestDockerContextHoldsWhatTheBuildNeeds(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", `{{if .Module}}{{if .Module.Main}}{{$d := .Dir}}{{range .GoFiles}}{{$d}}/{{.}}
{{end}}{{range .EmbedFiles}}{{$d}}/{{.}}
{{end}}{{end}}{{end}}`, "../cmd/toolgate", "../cmd/toolgate-kube").Output()
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
