package main

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	sigsjson "sigs.k8s.io/json"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/toolgate/toolgate/internal/testkit/sidecartest"
)

// workloadWant is what a workload of an injected manifest must get.
type workloadWant struct {
	kind, name string
	app        string // the application container
	appPort    int32
	policy     string
}

// injectCase is one golden test: an input of testdata/inject, the flags,
// and the workloads that must come out with the sidecar.
type injectCase struct {
	name, input string
	args        []string
	workloads   []workloadWant
	// closed: the output's Services and NetworkPolicies must keep other
	// pods off the application's port.
	closed bool
	// handmade counts workloads that ran toolgate before.
	handmade int
}

const testImage = "registry.example.com/toolgate:0.2.0"

func injectCases() []injectCase {
	return []injectCase{
		{
			name: "a Deployment with several containers, a named port, an init container, its Services and policy", input: "orders.yaml",
			args:      []string{"-policy", "orders-policy", "-container", "api", "-port", "http", "-service", "-network-policy"},
			workloads: []workloadWant{{"Deployment", "orders-api", "api", 8000, "orders-policy"}},
			closed:    true,
		},
		{
			name: "kubectl output with a numeric port, found by itself, and its Service", input: "numeric.yaml",
			args:      []string{"-service", "-network-policy"},
			workloads: []workloadWant{{"Deployment", "inventory", "inventory", 5000, defaultPolicy}},
			closed:    true,
		},
		{
			name: "a StatefulSet, a DaemonSet, a Job and a CronJob chosen by annotations, and one skipped", input: "kinds.yaml",
			workloads: []workloadWant{
				{"StatefulSet", "ledger", "ledger", 7000, "ledger-policy"},
				{"DaemonSet", "node-inspector", "inspector", 8100, defaultPolicy},
				{"Job", "report", "report", 8081, defaultPolicy},
				{"CronJob", "nightly", "nightly", 8200, defaultPolicy},
			},
		},
		{
			name: "a workload injected by hand is left alone, the other is injected", input: "mixed.yaml",
			workloads: []workloadWant{{"Deployment", "notify", "notify", 7002, defaultPolicy}},
			handmade:  1,
		},
		{
			name: "a List from kubectl get, with its Service", input: "list.yaml",
			args:      []string{"-port", "http", "-service", "-network-policy", "-env-secret", "billing-upstream", "-file-secret", "billing-certs"},
			workloads: []workloadWant{{"Deployment", "billing", "billing", 8000, defaultPolicy}},
			closed:    true,
		},
		{
			name: "a Pod written as JSON", input: "pod.json",
			args:      []string{"-agent-port", "18080", "-admin-port", "19090"},
			workloads: []workloadWant{{"Pod", "debug-tools", "tools", 8000, defaultPolicy}},
		},
	}
}

func runInjectArgs(t *testing.T, args []string, stdin string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = inject(args, strings.NewReader(stdin), &out, &errOut)
	return out.String(), errOut.String(), code
}

func TestInjectGolden(t *testing.T) {
	for _, c := range injectCases() {
		t.Run(c.name, func(t *testing.T) {
			input := filepath.Join("testdata", "inject", c.input)
			args := append([]string{"-image", testImage}, c.args...)
			out, notes, code := runInjectArgs(t, append(args, input), "")
			if code != 0 {
				t.Fatalf("exit %d:\n%s", code, notes)
			}
			base := strings.TrimSuffix(c.input, filepath.Ext(c.input))
			golden(t, "inject/"+base+".golden", []byte(out))
			golden(t, "inject/"+base+".notes.golden", []byte(notes))

			objs := decodeOutput(t, out)
			checkWorkloads(t, c, objs)
			checkParity(t, c, input, objs)

			// Injecting twice changes nothing: the output goes through
			// byte for byte, every workload reported as injected.
			again, notes2, code := runInjectArgs(t, append(args, "-"), out)
			if code != 0 || again != out {
				t.Errorf("a second injection changed the output (exit %d):\n%s\n%s", code, notes2, again)
			}
			if strings.Count(notes2, "already has toolgate") != len(c.workloads)+c.handmade {
				t.Errorf("the second injection does not report the workloads as injected:\n%s", notes2)
			}
		})
	}
}

// outputObjects are the objects of an inject output, decoded strictly.
type outputObjects struct {
	templates map[string]corev1.PodTemplateSpec // "Kind/name"
	services  []corev1.Service
	policies  []networkingv1.NetworkPolicy
	configs   []corev1.ConfigMap
}

var outputDocSeparator = regexp.MustCompile(`(?m)^---.*$`)

// decodeOutput decodes every document of an inject output strictly into
// its Kubernetes API type, as the API server does with
// fieldValidation=Strict; Lists are opened.
func decodeOutput(t *testing.T, out string) *outputObjects {
	t.Helper()
	objs := &outputObjects{templates: map[string]corev1.PodTemplateSpec{}}
	for _, doc := range outputDocSeparator.Split(out, -1) {
		if strings.TrimSpace(stripYAMLComments(doc)) == "" {
			continue
		}
		js, err := sigsyaml.YAMLToJSONStrict([]byte(doc))
		if err != nil {
			t.Fatalf("output document does not parse: %v\n%s", err, doc)
		}
		decodeObject(t, js, objs)
	}
	return objs
}

func stripYAMLComments(s string) string {
	var b strings.Builder
	for line := range strings.SplitSeq(s, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

func unmarshalStrict(t *testing.T, js []byte, v any) {
	t.Helper()
	strict, err := sigsjson.UnmarshalStrict(js, v)
	if err == nil {
		err = errors.Join(strict...)
	}
	if err != nil {
		t.Fatalf("strict decoding into %T: %v\n%s", v, err, js)
	}
}

func decodeObject(t *testing.T, js []byte, objs *outputObjects) {
	t.Helper()
	var tm struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	unmarshalTypeMeta(t, js, &tm)
	switch tm.APIVersion + " " + tm.Kind {
	case "v1 List":
		var l corev1.List
		unmarshalStrict(t, js, &l)
		for _, it := range l.Items {
			decodeObject(t, it.Raw, objs)
		}
	case "apps/v1 Deployment":
		var d appsv1.Deployment
		unmarshalStrict(t, js, &d)
		objs.templates["Deployment/"+d.Name] = d.Spec.Template
	case "apps/v1 StatefulSet":
		var s appsv1.StatefulSet
		unmarshalStrict(t, js, &s)
		objs.templates["StatefulSet/"+s.Name] = s.Spec.Template
	case "apps/v1 DaemonSet":
		var d appsv1.DaemonSet
		unmarshalStrict(t, js, &d)
		objs.templates["DaemonSet/"+d.Name] = d.Spec.Template
	case "batch/v1 Job":
		var j batchv1.Job
		unmarshalStrict(t, js, &j)
		objs.templates["Job/"+j.Name] = j.Spec.Template
	case "batch/v1 CronJob":
		var c batchv1.CronJob
		unmarshalStrict(t, js, &c)
		objs.templates["CronJob/"+c.Name] = c.Spec.JobTemplate.Spec.Template
	case "v1 Pod":
		var p corev1.Pod
		unmarshalStrict(t, js, &p)
		objs.templates["Pod/"+p.Name] = corev1.PodTemplateSpec{ObjectMeta: p.ObjectMeta, Spec: p.Spec}
	case "apps/v1 ReplicaSet":
		var r appsv1.ReplicaSet
		unmarshalStrict(t, js, &r)
		objs.templates["ReplicaSet/"+r.Name] = r.Spec.Template
	case "v1 ReplicationController":
		var r corev1.ReplicationController
		unmarshalStrict(t, js, &r)
		objs.templates["ReplicationController/"+r.Name] = *r.Spec.Template
	case "v1 ServiceAccount":
		var a corev1.ServiceAccount
		unmarshalStrict(t, js, &a)
	case "v1 Service":
		var s corev1.Service
		unmarshalStrict(t, js, &s)
		objs.services = append(objs.services, s)
	case "v1 ConfigMap":
		var c corev1.ConfigMap
		unmarshalStrict(t, js, &c)
		objs.configs = append(objs.configs, c)
	case "networking.k8s.io/v1 NetworkPolicy":
		var np networkingv1.NetworkPolicy
		unmarshalStrict(t, js, &np)
		objs.policies = append(objs.policies, np)
	default:
		t.Fatalf("no type for %s %s in the test", tm.APIVersion, tm.Kind)
	}
}

func unmarshalTypeMeta(t *testing.T, js []byte, tm any) {
	t.Helper()
	if err := sigsyaml.Unmarshal(js, tm); err != nil {
		t.Fatal(err)
	}
}

func containerNamed(spec corev1.PodSpec, name string) (corev1.Container, bool) {
	for _, c := range spec.Containers {
		if c.Name == name {
			return c, true
		}
	}
	return corev1.Container{}, false
}

// checkWorkloads holds every expected workload of the output to the
// sidecar checks, and the application's port to "only through toolgate"
// when the case asks for it.
func checkWorkloads(t *testing.T, c injectCase, objs *outputObjects) {
	t.Helper()
	injected := 0
	for _, tmpl := range objs.templates {
		if hasSidecar(&tmpl.Spec) {
			injected++
		}
	}
	if want := len(c.workloads) + c.handmade; injected != want {
		t.Errorf("%d workloads have toolgate, want %d", injected, want)
	}
	for _, w := range c.workloads {
		key := w.kind + "/" + w.name
		tmpl, ok := objs.templates[key]
		if !ok {
			t.Errorf("no %s in the output", key)
			continue
		}
		agent, admin := int32(defaultAgentPort), int32(defaultAdminPort)
		if c.input == "pod.json" {
			agent, admin = 18080, 19090
		}
		t.Run(key, func(t *testing.T) {
			sidecartest.Check(t, tmpl.Spec, sidecartest.Want{
				Image: testImage, Policy: w.policy, AgentPort: agent, AdminPort: admin, AppPort: w.appPort,
			})
			if _, i := sidecartest.Sidecar(t, tmpl.Spec); i != 0 {
				t.Errorf("toolgate is init container %d; it must start first and stop last", i)
			}
			app, ok := containerNamed(tmpl.Spec, w.app)
			if !ok {
				t.Fatalf("no application container %s", w.app)
			}
			if c.closed {
				sidecartest.AppPortClosed(t, tmpl.Labels, app, w.appPort, objs.services, objs.policies)
				if len(objs.policies) == 0 {
					t.Error("no NetworkPolicy: other pods could still call the application's port")
				}
			}
		})
	}
}

// checkParity: the YAML that inject writes holds the same pod spec as the
// typed path the webhook takes (planSidecar, then apply) on the input.
func checkParity(t *testing.T, c injectCase, input string, objs *outputObjects) {
	t.Helper()
	data, err := os.ReadFile(input)
	if err != nil {
		t.Fatal(err)
	}
	before := decodeOutput(t, string(data))
	opts := injectOptions{image: testImage, agentPort: defaultAgentPort, adminPort: defaultAdminPort}
	fs := flag.NewFlagSet("parity", flag.ContinueOnError)
	fs.StringVar(&opts.policy, "policy", "", "")
	fs.StringVar(&opts.container, "container", "", "")
	fs.StringVar(&opts.port, "port", "", "")
	fs.StringVar(&opts.envSecret, "env-secret", "", "")
	fs.StringVar(&opts.fileSecret, "file-secret", "", "")
	agent := fs.Int("agent-port", defaultAgentPort, "")
	admin := fs.Int("admin-port", defaultAdminPort, "")
	fs.Bool("service", false, "")
	fs.Bool("network-policy", false, "")
	if err := fs.Parse(c.args); err != nil {
		t.Fatal(err)
	}
	opts.agentPort, opts.adminPort = int32(*agent), int32(*admin)
	for _, w := range c.workloads {
		key := w.kind + "/" + w.name
		tmpl := before.templates[key]
		plan, err := planSidecar(&tmpl.Spec, tmpl.Annotations, opts)
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		want := tmpl.Spec.DeepCopy()
		plan.apply(want)
		if got := objs.templates[key].Spec; !equality.Semantic.DeepEqual(got, *want) {
			t.Errorf("%s: inject's YAML and the typed injection differ:\n got %+v\nwant %+v", key, got, *want)
		}
	}
}

func TestInjectReadsDirectoriesAndStdin(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"mixed.yaml", "pod.json"} {
		data, err := os.ReadFile(filepath.Join("testdata", "inject", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "README.md"), []byte("not a manifest"), 0o644); err != nil {
		t.Fatal(err)
	}
	fromDir, notes, code := runInjectArgs(t, []string{"-image", testImage, dir}, "")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, notes)
	}
	objs := decodeOutput(t, fromDir)
	if len(objs.templates) != 3 {
		t.Errorf("%d workloads from the directory, want 3 (README.md is not read)", len(objs.templates))
	}
	mixed, err := os.ReadFile(filepath.Join("testdata", "inject", "mixed.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	fromStdin, _, code := runInjectArgs(t, []string{"-image", testImage}, string(mixed))
	fromFile, _, _ := runInjectArgs(t, []string{"-image", testImage, filepath.Join("testdata", "inject", "mixed.yaml")}, "")
	if code != 0 || fromStdin != fromFile {
		t.Errorf("stdin and the file give different output (exit %d)", code)
	}
	if !strings.HasPrefix(fromDir, fromFile) {
		t.Errorf("the directory's output does not start with its first file's")
	}
	flagsAfter, _, code := runInjectArgs(t, []string{filepath.Join("testdata", "inject", "mixed.yaml"), "-image", testImage}, "")
	if code != 0 || flagsAfter != fromFile {
		t.Errorf("flags after the file give different output (exit %d)", code)
	}
}

func TestInjectDryRunPrintsADiff(t *testing.T) {
	input := filepath.Join("testdata", "inject", "numeric.yaml")
	out, notes, code := runInjectArgs(t, []string{"-image", testImage, "-service", "-dry-run", input}, "")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, notes)
	}
	for _, want := range []string{"--- " + input, "+++ " + input, "\n+      - name: toolgate\n", "\n+    targetPort: 8080 "} {
		if !strings.Contains(out, want) {
			t.Errorf("the diff lacks %q:\n%s", want, out)
		}
	}
	// Everything the team wrote stays, in kubectl's own layout: the diff
	// only adds.
	for line := range strings.SplitSeq(out, "\n") {
		if strings.HasPrefix(line, "-") && !strings.HasPrefix(line, "---") {
			t.Errorf("the diff removes a line it should keep: %q", line)
		}
	}
	injected, _, _ := runInjectArgs(t, []string{"-image", testImage, "-service", input}, "")
	again, notes, code := runInjectArgs(t, []string{"-image", testImage, "-service", "-dry-run", "-"}, injected)
	if code != 0 || again != "" || !strings.Contains(notes, "no changes") {
		t.Errorf("a dry run over injected manifests prints %q (exit %d, %s), want no diff", again, code, notes)
	}
}

func TestInjectRefusesWhatCannotWork(t *testing.T) {
	deployment := func(spec string) string {
		return "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: app}\nspec:\n  selector: {matchLabels: {app: a}}\n  template:\n    metadata: {labels: {app: a}}\n    spec:\n" + spec
	}
	twoContainers := deployment("      containers:\n        - {name: a, image: a, ports: [{containerPort: 8000}]}\n        - {name: b, image: b, ports: [{containerPort: 8001}]}\n")
	oneContainer := deployment("      containers:\n        - {name: a, image: a, ports: [{name: http, containerPort: 8000}]}\n")
	policy := func(server, url string) string {
		return "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: toolgate-policy}\ndata:\n  policy.yaml: |\n    version: 1\n" + server +
			"    upstreams:\n      app: {url: \"" + url + "\"}\n"
	}
	cases := []struct {
		name  string
		args  []string
		input string
		code  int
		msg   string
	}{
		{"without an image", nil, oneContainer, 2, "-image is required"},
		{"when it cannot tell the application container", []string{"-image", testImage}, twoContainers, 1, "2 containers could be the application; name one with -container"},
		{"an unknown container", []string{"-image", testImage, "-container", "c"}, twoContainers, 1, `no container "c"`},
		{"an unknown port name", []string{"-image", testImage, "-port", "grpc"}, oneContainer, 1, `no port named "grpc"`},
		{"an agent port the application uses", []string{"-image", testImage, "-agent-port", "8000"}, oneContainer, 1, "port 8000 is the application's own (container a port http (8000)); toolgate needs ports of its own: move its agent port to 8001, say, with -agent-port (or the annotation toolgate.dev/agent-port)"},
		{"an admin port another container uses", []string{"-image", testImage, "-container", "a", "-admin-port", "8001"}, twoContainers, 1, "container b uses port 8001 already; move toolgate's admin port to 8002, say, with -admin-port (or the annotation toolgate.dev/admin-port)"},
		{"a pod on the host's network", []string{"-image", testImage}, deployment("      hostNetwork: true\n      containers:\n        - {name: a, image: a, ports: [{containerPort: 8000}]}\n"), 1, "uses the host's network"},
		{"a policy that calls another port", []string{"-image", testImage}, oneContainer + policy("    server: {listen: \":8080\", admin_listen: \":9090\"}\n", "http://127.0.0.1:9000"), 1, "no upstream url is http://127.0.0.1:8000"},
		{"a document that is not YAML", []string{"-image", testImage}, "a: [b\n", 1, "stdin: document 1"},
		{"a missing file", []string{"-image", testImage, "no-such-file.yaml"}, "", 1, "no such file"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, stderr, code := runInjectArgs(t, c.args, c.input)
			if code != c.code || !strings.Contains(stderr, c.msg) {
				t.Errorf("exit %d, stderr:\n%s\nwant exit %d and %q", code, stderr, c.code, c.msg)
			}
			if out != "" {
				t.Errorf("printed manifests despite the error:\n%s", out)
			}
		})
	}
	// Where toolgate listens is in its arguments (-listen, -admin), so the
	// policy's server section does not matter to the sidecar.
	for _, c := range []struct{ name, server string }{
		{"a policy that calls the application passes", "    server: {listen: \":8080\", admin_listen: \"0.0.0.0:9090\"}\n"},
		{"a policy without listen addresses passes", ""},
		{"a policy that listens on loopback passes", "    server: {listen: \"127.0.0.1:8080\", admin_listen: \"127.0.0.1:9090\"}\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, stderr, code := runInjectArgs(t, []string{"-image", testImage}, oneContainer+policy(c.server, "http://localhost:8000/api"))
			if code != 0 {
				t.Errorf("exit %d: %s", code, stderr)
			}
			if strings.Contains(stderr, "must call the application") {
				t.Errorf("the policy is in the input and checked; no need to list its requirements:\n%s", stderr)
			}
		})
	}
}

func TestCompactSequencesFollowsTheInput(t *testing.T) {
	for _, c := range []struct {
		doc  string
		want bool
	}{
		{"a:\n- b\n", true},
		{"a:\n  - b\n", false},
		{"a:\n  - name: x\n    ports:\n    - 1\n", false},
		{"a:\n- name: x\n  ports:\n  - 1\n", true},
		{"a: [b]\n", false},
	} {
		if got := compactSequences([]byte(c.doc)); got != c.want {
			t.Errorf("compactSequences(%q) = %v, want %v", c.doc, got, c.want)
		}
	}
}

// FuzzInject feeds inject arbitrary manifests: it must not panic, and what
// it prints once must come through a second run unchanged.
func FuzzInject(f *testing.F) {
	entries, err := os.ReadDir(filepath.Join("testdata", "inject"))
	if err != nil {
		f.Fatal(err)
	}
	for _, e := range entries {
		if ext := filepath.Ext(e.Name()); ext == ".yaml" || ext == ".json" {
			data, err := os.ReadFile(filepath.Join("testdata", "inject", e.Name()))
			if err != nil {
				f.Fatal(err)
			}
			f.Add(data)
		}
	}
	f.Add([]byte("kind: Deployment\nspec:\n  template:\n    spec:\n      containers: [{name: a, ports: [{containerPort: 1}]}]\n"))
	f.Add([]byte("---\n---\n# only a comment\n---\nkind: List\nitems: [{kind: Pod, spec: {containers: [{name: a, ports: [{containerPort: 80}]}]}}]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		args := []string{"-image", testImage, "-service", "-network-policy"}
		out, _, code := runInjectArgs(t, args, string(data))
		if code != 0 {
			return
		}
		again, notes, code := runInjectArgs(t, args, out)
		if code != 0 || again != out {
			t.Fatalf("a second injection changed the output (exit %d, %s):\n--- first\n%s\n--- second\n%s", code, notes, out, again)
		}
	})
}
