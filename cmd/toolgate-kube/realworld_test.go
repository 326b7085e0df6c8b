package main

import (
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/toolgate/toolgate/internal/testkit/sidecartest"
)

// The tests here run inject on manifests of public projects, kept in
// testdata/realworld (its README.md names each file's repository, path and
// commit, and what was left out).

// realworld reads a manifest of testdata/realworld.
func realworld(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "realworld", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// annotateTemplate adds an annotation to the pod template of the
// Deployment name in a manifest written as bookinfo and microservices-demo
// write theirs (a template's metadata at four spaces, its keys at six).
func annotateTemplate(t *testing.T, manifest, name, annotation string) string {
	t.Helper()
	re := regexp.MustCompile(`(?s)\n  name: ` + regexp.QuoteMeta(name) + `\n.*?\n  template:\n    metadata:\n(.*?)\n    spec:\n`)
	loc := re.FindStringSubmatchIndex(manifest)
	if loc == nil {
		t.Fatalf("no Deployment %s with a template's metadata to annotate", name)
	}
	meta := manifest[loc[2]:loc[3]]
	if i := strings.Index(meta, "      annotations:\n"); i >= 0 {
		at := loc[2] + i + len("      annotations:\n")
		return manifest[:at] + "        " + annotation + "\n" + manifest[at:]
	}
	return manifest[:loc[2]] + "      annotations:\n        " + annotation + "\n" + manifest[loc[2]:]
}

// injectOptionsFromArgs reads the sidecar's options from inject's flags,
// as the typed path the webhook takes would get them.
func injectOptionsFromArgs(t *testing.T, args []string) injectOptions {
	t.Helper()
	opts := injectOptions{image: testImage}
	fs := flag.NewFlagSet("parity", flag.ContinueOnError)
	fs.StringVar(&opts.policy, "policy", "", "")
	fs.StringVar(&opts.container, "container", "", "")
	fs.StringVar(&opts.port, "port", "", "")
	fs.StringVar(&opts.envSecret, "env-secret", "", "")
	fs.StringVar(&opts.fileSecret, "file-secret", "", "")
	agent := fs.Int("agent-port", 0, "")
	admin := fs.Int("admin-port", 0, "")
	fs.Bool("service", false, "")
	fs.Bool("network-policy", false, "")
	fs.Bool("dry-run", false, "")
	fs.String("only", "", "")
	fs.String("image", "", "")
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	opts.agentPort, opts.adminPort = int32(*agent), int32(*admin)
	return opts
}

// checkTypedParity: every pod template that inject gave toolgate holds
// the pod spec the typed path (planSidecar, then apply, as the webhook
// does) makes of the input's template.
func checkTypedParity(t *testing.T, args []string, in string, out *outputObjects) {
	t.Helper()
	before := decodeOutput(t, in)
	opts := injectOptionsFromArgs(t, args)
	// Whether a port may be fronted is inject's decision, from what the
	// input holds; the pod it makes of it is the same.
	opts.anyProtocol = true
	for key, tmpl := range out.templates {
		old, ok := before.templates[key]
		if !ok || hasSidecar(&old.Spec) || !hasSidecar(&tmpl.Spec) {
			continue
		}
		plan, err := planSidecar(&old.Spec, old.Annotations, opts)
		if err != nil {
			t.Errorf("%s: the typed path refuses what inject injected: %v", key, err)
			continue
		}
		want := old.Spec.DeepCopy()
		plan.apply(want)
		if !equality.Semantic.DeepEqual(tmpl.Spec, *want) {
			t.Errorf("%s: inject's YAML and the typed injection differ:\n got %+v\nwant %+v", key, tmpl.Spec, *want)
		}
	}
}

// names lists the names of containers.
func names(cs []corev1.Container) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Name)
	}
	return out
}

// injected lists the pod templates of an output that run toolgate.
func injected(objs *outputObjects) []string {
	var keys []string
	for key, tmpl := range objs.templates {
		if hasSidecar(&tmpl.Spec) {
			keys = append(keys, key)
		}
	}
	slices.Sort(keys)
	return keys
}

// serviceTarget is the port a Service's port named (or numbered) port
// leads to: its targetPort, or the port itself.
func serviceTarget(t *testing.T, objs *outputObjects, service, port string) intstr.IntOrString {
	t.Helper()
	for _, s := range objs.services {
		if s.Name != service {
			continue
		}
		for _, sp := range s.Spec.Ports {
			if sp.Name == port || strconv.Itoa(int(sp.Port)) == port {
				if sp.TargetPort.Type == intstr.Int && sp.TargetPort.IntVal == 0 {
					return intstr.FromInt32(sp.Port)
				}
				return sp.TargetPort
			}
		}
	}
	t.Fatalf("no Service %s with a port %s in the output", service, port)
	return intstr.IntOrString{}
}

// linesKept reports the first line of in that out does not keep, in
// order: inject only adds lines to a document it edits, and replaces the
// value of a Service's targetPort.
func linesKept(in, out string) string {
	outLines := strings.Split(out, "\n")
	j := 0
	for _, l := range strings.Split(in, "\n") {
		if strings.Contains(l, "targetPort:") {
			continue
		}
		for j < len(outLines) && outLines[j] != l {
			j++
		}
		if j == len(outLines) {
			return l
		}
		j++
	}
	return ""
}

func TestInjectRealManifests(t *testing.T) {
	bookinfo := realworld(t, "bookinfo.yaml")
	boutique := realworld(t, "microservices-demo.yaml")
	cases := []struct {
		name  string
		in    string
		args  []string
		code  int
		notes []string // lines of stderr must hold these
		never []string // and never these
		check func(t *testing.T, out string, objs *outputObjects)
	}{
		{
			name: "bookinfo with CRLF line endings: all six workloads get toolgate and the file keeps its line endings",
			in:   strings.ReplaceAll(bookinfo, "\n", "\r\n"),
			args: []string{"-service"},
			check: func(t *testing.T, out string, objs *outputObjects) {
				if got := injected(objs); len(got) != 6 {
					t.Errorf("injected %v, want the six Deployments", got)
				}
				if strings.Count(out, "\n") != strings.Count(out, "\r\n") {
					t.Error("the output mixes line endings; the input has CRLF only")
				}
				lf, _, _ := runInjectArgs(t, []string{"-image", testImage, "-service"}, bookinfo)
				if out != strings.ReplaceAll(lf, "\n", "\r\n") {
					t.Error("the CRLF file's output differs from the LF file's in more than the line endings")
				}
			},
		},
		{
			name:  "bookinfo with reviews-v3 skipped: the reviews Service, which also leads to reviews-v3, stays on the application",
			in:    annotateTemplate(t, bookinfo, "reviews-v3", `toolgate.dev/inject: "false"`),
			args:  []string{"-service", "-network-policy"},
			notes: []string{`Service/reviews: port http (9080) still leads to the application's container reviews port 9080: it also selects Deployment/reviews-v3, which has no toolgate (toolgate.dev/inject: "false")`, "Inject those workloads too"},
			check: func(t *testing.T, out string, objs *outputObjects) {
				if got := serviceTarget(t, objs, "reviews", "http"); got.IntValue() != 9080 {
					t.Errorf("Service reviews leads to %s; reviews-v3's pods serve no toolgate there", got.String())
				}
				for _, s := range []string{"details", "ratings", "productpage"} {
					if got := serviceTarget(t, objs, s, "http"); got.IntValue() != 8080 {
						t.Errorf("Service %s leads to %s, want toolgate's 8080", s, got.String())
					}
				}
				if got := injected(objs); slices.Contains(got, "Deployment/reviews-v3") || !slices.Contains(got, "Deployment/reviews-v2") {
					t.Errorf("injected %v", got)
				}
			},
		},
		{
			name:  "bookinfo with -only: one workload and its Service, the rest as they were",
			in:    bookinfo,
			args:  []string{"-only", "Deployment/productpage-v1", "-service"},
			never: []string{"details", "reviews"},
			check: func(t *testing.T, out string, objs *outputObjects) {
				if got := injected(objs); !slices.Equal(got, []string{"Deployment/productpage-v1"}) {
					t.Errorf("injected %v, want productpage-v1 alone", got)
				}
				if got := serviceTarget(t, objs, "productpage", "http"); got.IntValue() != 8080 {
					t.Errorf("Service productpage leads to %s", got.String())
				}
				if got := serviceTarget(t, objs, "details", "http"); got.IntValue() != 9080 {
					t.Errorf("Service details leads to %s; details-v1 has no toolgate", got.String())
				}
			},
		},
		{
			name:  "microservices-demo: the gRPC and Redis services are skipped, their Services left alone; the frontend keeps its mixed list indentation",
			in:    annotateTemplate(t, boutique, "loadgenerator", `toolgate.dev/inject: "false"`),
			args:  []string{"-agent-port", "8081", "-service", "-network-policy"},
			notes: []string{"Deployment/adservice: skipped: container server port 9555 speaks gRPC (its readiness probe is a gRPC health check)", "Deployment/redis-cart: skipped: container redis port 6379 speaks Redis"},
			check: func(t *testing.T, out string, objs *outputObjects) {
				if got := injected(objs); !slices.Equal(got, []string{"Deployment/frontend"}) {
					t.Errorf("injected %v, want the frontend alone", got)
				}
				if got := serviceTarget(t, objs, "adservice", "grpc"); got.IntValue() != 9555 {
					t.Errorf("the gRPC Service adservice leads to %s", got.String())
				}
				if got := serviceTarget(t, objs, "redis-cart", "tcp-redis"); got.IntValue() != 6379 {
					t.Errorf("the Redis Service redis-cart leads to %s", got.String())
				}
				for _, s := range []string{"frontend", "frontend-external"} {
					if got := serviceTarget(t, objs, s, "http"); got.IntValue() != 8081 {
						t.Errorf("Service %s leads to %s, want toolgate's 8081", s, got.String())
					}
				}
				if l := linesKept(annotateTemplate(t, boutique, "loadgenerator", `toolgate.dev/inject: "false"`), out); l != "" {
					t.Errorf("the output lost or re-indented the line %q", l)
				}
			},
		},
		{
			name: "microservices-demo's adservice speaks gRPC, and the policy of the input calls its port: it is fronted as the policy says, its gRPC Service stays",
			in: annotateTemplate(t, boutique, "loadgenerator", `toolgate.dev/inject: "false"`) + `---
apiVersion: v1
kind: ConfigMap
metadata: {name: toolgate-policy}
data:
  policy.yaml: |
    version: 1
    upstreams:
      ads: {url: "http://127.0.0.1:9555"}
`,
			args: []string{"-only", "adservice", "-service"},
			notes: []string{
				"Deployment/adservice: fronts container server port 9555, which speaks gRPC (its readiness probe is a gRPC health check), as the policy in ConfigMap toolgate-policy says: it calls http://127.0.0.1:9555",
				`Service/adservice: port grpc (9555) leads to the application's container server port 9555 and stays so: it speaks gRPC (its name "grpc")`,
			},
			check: func(t *testing.T, out string, objs *outputObjects) {
				if got := injected(objs); !slices.Equal(got, []string{"Deployment/adservice"}) {
					t.Errorf("injected %v, want adservice alone", got)
				}
				if got := serviceTarget(t, objs, "adservice", "grpc"); got.IntValue() != 9555 {
					t.Errorf("the gRPC Service leads to %s", got.String())
				}
			},
		},
		{
			name:  "microservices-demo: the load generator declares no port, and the refusal says to skip it rather than name a port for every workload",
			in:    boutique,
			args:  []string{"-agent-port", "8081"},
			code:  1,
			notes: []string{"Deployment/loadgenerator: container main declares 0 TCP ports", `skip it with the annotation toolgate.dev/inject: "false" (or pick workloads with -only)`, "the annotation toolgate.dev/port on its pod template (-port would apply to every workload)"},
			never: []string{"name the application's with -port"},
		},
		{
			name:  "microservices-demo's frontend listens on 8080: the refusal names the annotation that moves toolgate's port for it alone",
			in:    annotateTemplate(t, boutique, "loadgenerator", `toolgate.dev/inject: "false"`),
			code:  1,
			notes: []string{"Deployment/frontend: port 8080 is the application's own (container server port 8080); toolgate needs ports of its own: move its agent port to 8081, say, with the annotation toolgate.dev/agent-port on its pod template"},
		},
		{
			name: "microservices-demo's frontend with the annotation toolgate.dev/agent-port gets toolgate on that port",
			in: annotateTemplate(t, annotateTemplate(t, boutique, "loadgenerator", `toolgate.dev/inject: "false"`),
				"frontend", `toolgate.dev/agent-port: "8081"`),
			args: []string{"-service"},
			check: func(t *testing.T, out string, objs *outputObjects) {
				sidecartest.Check(t, objs.templates["Deployment/frontend"].Spec, sidecartest.Want{Image: testImage, Policy: defaultPolicy, AgentPort: 8081, AdminPort: 9090, AppPort: 8080})
				if got := serviceTarget(t, objs, "frontend", "http"); got.IntValue() != 8081 {
					t.Errorf("Service frontend leads to %s, want toolgate's 8081", got.String())
				}
			},
		},
		{
			name:  "guestbook: the Redis pods, known by their port number alone, are skipped; the frontend and its Service get toolgate",
			in:    realworld(t, "guestbook-all-in-one.yaml"),
			args:  []string{"-service"},
			notes: []string{"Deployment/redis-master: skipped: container master port 6379 speaks Redis (port 6379 is Redis's)", "Deployment/redis-replica: skipped", "Service/frontend: port 80 now leads to toolgate's agent port 8080"},
			check: func(t *testing.T, out string, objs *outputObjects) {
				if got := injected(objs); !slices.Equal(got, []string{"Deployment/frontend"}) {
					t.Errorf("injected %v, want the frontend alone", got)
				}
				if got := serviceTarget(t, objs, "redis-master", "6379"); got.IntValue() != 6379 {
					t.Errorf("Service redis-master leads to %s", got.String())
				}
			},
		},
		{
			name: "argo-cd's server: its https Service port stays on the application, and its NetworkPolicy that admits everything is reported",
			in:   realworld(t, "argocd-server.yaml"),
			args: []string{"-port", "8080", "-agent-port", "8081", "-service", "-network-policy"},
			notes: []string{
				`Service/argocd-server: port https (443) leads to the application's container argocd-server port 8080 and stays so: it speaks TLS (its name "https")`,
				"Deployment/argocd-server: NetworkPolicy argocd-server-network-policy selects its pods and admits every pod and address to every port (its ingress rule 1), which takes the application's port 8080",
			},
			check: func(t *testing.T, out string, objs *outputObjects) {
				if got := serviceTarget(t, objs, "argocd-server", "http"); got.IntValue() != 8081 {
					t.Errorf("the http port leads to %s, want toolgate's 8081", got.String())
				}
				if got := serviceTarget(t, objs, "argocd-server", "https"); got.IntValue() != 8080 {
					t.Errorf("the https port leads to %s: TLS clients cannot talk to toolgate's plain HTTP port", got.String())
				}
			},
		},
		{
			name:  "kube-prometheus's Grafana: the NetworkPolicy that admits Prometheus to Grafana's own port is reported",
			in:    realworld(t, "grafana.yaml"),
			args:  []string{"-service", "-network-policy"},
			notes: []string{"Deployment/grafana: NetworkPolicy grafana selects its pods and admits pods app.kubernetes.io/name=prometheus to port 3000 (its ingress rule 1), which takes the application's port 3000", "Service/grafana: port http (3000) now leads to toolgate's agent port 8080"},
		},
		{
			name: "a merge key's init containers and volumes stay in the pod",
			in:   realworld(t, "reviews-merge.yaml"),
			check: func(t *testing.T, out string, objs *outputObjects) {
				spec := objs.templates["Deployment/reviews-v1"].Spec
				if got := names(spec.InitContainers); !slices.Equal(got, []string{"toolgate", "init-one"}) {
					t.Errorf("init containers %v, want toolgate and the merged init-one", got)
				}
				var vols []string
				for _, v := range spec.Volumes {
					vols = append(vols, v.Name)
				}
				if !slices.Equal(vols, []string{"wlp-output", "tmp", "toolgate-policy"}) {
					t.Errorf("volumes %v, want the merged ones and toolgate's", vols)
				}
				if spec.ServiceAccountName != "bookinfo-reviews" {
					t.Errorf("serviceAccountName %q, want the merged bookinfo-reviews", spec.ServiceAccountName)
				}
			},
		},
		{
			name: "istio's proxy-override: the grace period covers a preStop that runs sleep 10",
			in:   realworld(t, "istio/proxy-override.yaml"),
			args: []string{"-container", "hello", "-port", "8000"},
			check: func(t *testing.T, out string, objs *outputObjects) {
				spec := objs.templates["Deployment/hello"].Spec
				sidecartest.Check(t, spec, sidecartest.Want{Image: testImage, Policy: defaultPolicy, AgentPort: 8080, AdminPort: 9090, AppPort: 8000})
				// 10 s of preStop, 10 for the application to stop, toolgate's
				// 5 s drain and 20 s grace, 5 s of margin.
				if spec.TerminationGracePeriodSeconds == nil || *spec.TerminationGracePeriodSeconds != 50 {
					t.Errorf("terminationGracePeriodSeconds %v, want 50", spec.TerminationGracePeriodSeconds)
				}
			},
		},
		{
			name:  "istio's hello-multi: one policy ConfigMap for applications on two ports is reported",
			in:    realworld(t, "istio/hello-multi.yaml"),
			notes: []string{"the policy ConfigMap toolgate-policy serves Deployment/hello-v1 (port 80), Deployment/hello-v2 (port 81)", "give each workload a policy of its own with the annotation toolgate.dev/policy"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"-image", testImage}, c.args...)
			out, notes, code := runInjectArgs(t, args, c.in)
			if code != c.code {
				t.Fatalf("exit %d, want %d:\n%s", code, c.code, notes)
			}
			for _, want := range c.notes {
				if !strings.Contains(notes, want) {
					t.Errorf("stderr lacks %q:\n%s", want, notes)
				}
			}
			for _, never := range c.never {
				if strings.Contains(notes, never) {
					t.Errorf("stderr has %q:\n%s", never, notes)
				}
			}
			if code != 0 {
				if out != "" {
					t.Errorf("printed manifests despite the error:\n%s", out)
				}
				return
			}
			objs := decodeOutput(t, out)
			checkTypedParity(t, c.args, c.in, objs)
			again, notes2, code := runInjectArgs(t, args, out)
			if code != 0 || again != out {
				t.Errorf("a second run changed the output (exit %d):\n%s", code, notes2)
			}
			if c.check != nil {
				c.check(t, out, objs)
			}
		})
	}
}

// TestInjectAgainAppliesServiceAndNetworkPolicy: a second run with
// -service and -network-policy over manifests injected without them moves
// the Services and adds the NetworkPolicies, as one run with both would
// have; a third run changes nothing.
func TestInjectAgainAppliesServiceAndNetworkPolicy(t *testing.T) {
	bookinfo := realworld(t, "bookinfo.yaml")
	plain, _, code := runInjectArgs(t, []string{"-image", testImage}, bookinfo)
	if code != 0 {
		t.Fatal("the first run failed")
	}
	args := []string{"-image", testImage, "-service", "-network-policy"}
	once, _, _ := runInjectArgs(t, args, bookinfo)
	again, notes, code := runInjectArgs(t, args, plain)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, notes)
	}
	if again != once {
		t.Errorf("injected, then -service -network-policy, differs from both at once")
	}
	objs := decodeOutput(t, again)
	if len(objs.policies) != 6 {
		t.Errorf("%d NetworkPolicies, want one per workload", len(objs.policies))
	}
	for key, tmpl := range objs.templates {
		app := tmpl.Spec.Containers[0]
		sidecartest.AppPortClosed(t, tmpl.Labels, app, app.Ports[0].ContainerPort, objs.services, objs.policies)
		if !strings.Contains(notes, key+": already has toolgate") {
			t.Errorf("the second run does not say %s has toolgate already:\n%s", key, notes)
		}
	}
	third, notes, code := runInjectArgs(t, args, again)
	if code != 0 || third != again {
		t.Errorf("a third run changed the output (exit %d): %s", code, notes)
	}
}

// TestInjectDryRunShowsOnlyWhatChanges runs -dry-run on real manifests:
// the diff adds lines and replaces values, and never removes a line
// inject keeps.
func TestInjectDryRunShowsOnlyWhatChanges(t *testing.T) {
	for _, c := range []struct {
		name, file string
		args       []string
		replaced   int // lines a value of which changes
	}{
		{"bookinfo, its Services given a targetPort", "bookinfo.yaml", []string{"-service"}, 0},
		{"argo-cd's server, its Service's targetPort replaced", "argocd-server.yaml", []string{"-port", "8080", "-agent-port", "8081", "-service"}, 1},
		{"Grafana, its named targetPort replaced", "grafana.yaml", []string{"-service"}, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			diff, notes, code := runInjectArgs(t, append([]string{"-image", testImage, "-dry-run"}, c.args...), realworld(t, c.file))
			if code != 0 {
				t.Fatalf("exit %d: %s", code, notes)
			}
			removed, added := 0, 0
			for l := range strings.SplitSeq(diff, "\n") {
				switch {
				case strings.HasPrefix(l, "---"), strings.HasPrefix(l, "+++"):
				case strings.HasPrefix(l, "-"):
					removed++
					if !strings.Contains(l, "targetPort:") {
						t.Errorf("the diff removes %q", l)
					}
				case strings.HasPrefix(l, "+"):
					added++
				}
			}
			if removed != c.replaced || added < 70 {
				t.Errorf("the diff removes %d lines and adds %d, want %d removed (a value replaced) and the sidecar added:\n%s", removed, added, c.replaced, diff)
			}
		})
	}
}

// TestInjectIstioInjectorInputs runs inject on istio's own injector test
// inputs: each is injected (strictly decodable, the same pod as the typed
// path, a second run changes nothing), or refused with a message that
// says what to do.
func TestInjectIstioInjectorInputs(t *testing.T) {
	refused := map[string]string{
		"cronjob.yaml":            "container hello declares 0 TCP ports; name the application's HTTP port with -port (or the annotation toolgate.dev/port)",
		"job.yaml":                "container pi declares 0 TCP ports",
		"frontend.yaml":           "container nginx declares 0 TCP ports",
		"https-probes.yaml":       "2 containers could be the application; name one with -container (or the annotation toolgate.dev/container)",
		"two_container.yaml":      "2 containers could be the application",
		"proxy-override.yaml":     "2 containers could be the application",
		"hello-host-network.yaml": `the pod uses the host's network: toolgate's ports would be the node's, and loopback the node's loopback; or, if it serves no HTTP for agents, skip it with the annotation toolgate.dev/inject: "false"`,
	}
	entries, err := os.ReadDir(filepath.Join("testdata", "realworld", "istio"))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) < 19 {
		t.Fatalf("%d of istio's inputs, want 19", len(entries))
	}
	for _, e := range entries {
		t.Run(e.Name(), func(t *testing.T) {
			in := realworld(t, "istio/"+e.Name())
			args := []string{"-image", testImage, "-service"}
			out, notes, code := runInjectArgs(t, args, in)
			if want, ok := refused[e.Name()]; ok {
				if code != 1 || !strings.Contains(notes, want) {
					t.Errorf("exit %d, stderr:\n%s\nwant exit 1 and %q", code, notes, want)
				}
				return
			}
			if code != 0 {
				t.Fatalf("exit %d: %s", code, notes)
			}
			objs := decodeOutput(t, out)
			if len(injected(objs)) == 0 {
				t.Errorf("nothing injected:\n%s", notes)
			}
			checkTypedParity(t, args[2:], in, objs)
			again, _, code := runInjectArgs(t, args, out)
			if code != 0 || again != out {
				t.Error("a second run changed the output")
			}
		})
	}
}

// TestInjectRefusesAContainerNamedToolgate: a container of that name that
// is not toolgate's native sidecar is refused, not taken for toolgate.
func TestInjectRefusesAContainerNamedToolgate(t *testing.T) {
	in := strings.Replace(realworld(t, "istio/hello.yaml"), "- name: hello\n", "- name: toolgate\n", 1)
	if !strings.Contains(in, "- name: toolgate\n") {
		t.Fatal("no container renamed")
	}
	out, notes, code := runInjectArgs(t, []string{"-image", testImage}, in)
	if code != 1 || out != "" || !strings.Contains(notes, "container toolgate (image fake.docker.io/google-samples/hello-go-gke:1.0) is an ordinary container, not toolgate's native sidecar, and the sidecar needs the name: rename it") {
		t.Errorf("exit %d, stderr:\n%s", code, notes)
	}
}

// TestInjectReadsAliasesAcrossListItems: a List item may name an anchor of
// an earlier item; inject reads it as kubectl does, and the item that
// holds the anchor keeps its meaning for the other.
func TestInjectReadsAliasesAcrossListItems(t *testing.T) {
	in := `apiVersion: v1
kind: List
items:
- apiVersion: apps/v1
  kind: Deployment
  metadata: {name: a}
  spec:
    selector: {matchLabels: {app: a}}
    template:
      metadata: {labels: {app: a}}
      spec: &pod
        containers:
        - {name: app, image: app:1, ports: [{containerPort: 8000}]}
- apiVersion: apps/v1
  kind: Deployment
  metadata: {name: b, annotations: {}}
  spec:
    selector: {matchLabels: {app: b}}
    template:
      metadata: {labels: {app: b}, annotations: {toolgate.dev/inject: "false"}}
      spec: *pod
`
	out, notes, code := runInjectArgs(t, []string{"-image", testImage}, in)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, notes)
	}
	objs := decodeOutput(t, out)
	if got := injected(objs); !slices.Equal(got, []string{"Deployment/a"}) {
		t.Errorf("injected %v, want a alone: b shares a's pod spec through an alias, and is skipped", got)
	}
}

// TestWebhookOnRealPods sends pods made from real workloads to the
// webhook: the annotations move toolgate's ports and add its Secrets, and
// a pod that cannot have toolgate is refused with advice in annotations,
// never in flags the webhook does not have.
func TestWebhookOnRealPods(t *testing.T) {
	w := startWebhook(t, newTestCA(t))
	boutique := filepath.Join("..", "realworld", "microservices-demo.yaml")
	inject := map[string]string{annotationInject: "true"}
	with := func(kv ...string) map[string]string {
		m := map[string]string{annotationInject: "true"}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	t.Run("microservices-demo's frontend on 8080 gets toolgate on the port its annotation names", func(t *testing.T) {
		pod := templatePod(t, boutique, "Deployment/frontend", with(annotationAgentPort, "8081", annotationEnvSecret, "frontend-env", annotationFileSecret, "frontend-certs"))
		resp := w.review(t, podRequest(t, "frontend", pod))
		if !resp.Allowed {
			t.Fatalf("refused: %+v", resp.Result)
		}
		var got corev1.Pod
		unmarshalStrict(t, applyPatch(t, pod, resp), &got)
		sidecartest.Check(t, got.Spec, sidecartest.Want{Image: testImage, Policy: defaultPolicy, AgentPort: 8081, AdminPort: 9090, AppPort: 8080})
		tg, _ := sidecartest.Sidecar(t, got.Spec)
		if len(tg.EnvFrom) != 1 || tg.EnvFrom[0].SecretRef == nil || tg.EnvFrom[0].SecretRef.Name != "frontend-env" {
			t.Errorf("envFrom %+v, want the Secret frontend-env", tg.EnvFrom)
		}
		if !slices.ContainsFunc(got.Spec.Volumes, func(v corev1.Volume) bool { return v.Secret != nil && v.Secret.SecretName == "frontend-certs" }) ||
			!slices.ContainsFunc(tg.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == secretFilesDir && m.ReadOnly }) {
			t.Errorf("the Secret frontend-certs is not mounted read-only at %s: %+v", secretFilesDir, tg.VolumeMounts)
		}
	})
	for _, c := range []struct {
		name string
		pod  []byte
		msg  string
	}{
		{
			"microservices-demo's frontend on 8080 without the annotation: the denial names it",
			templatePod(t, boutique, "Deployment/frontend", inject),
			"port 8080 is the application's own (container server port 8080); toolgate needs ports of its own: move its agent port to 8081, say, with the pod annotation toolgate.dev/agent-port",
		},
		{
			"microservices-demo's adservice speaks gRPC",
			templatePod(t, boutique, "Deployment/adservice", inject),
			"container server port 9555 speaks gRPC (its readiness probe is a gRPC health check); toolgate fronts plain HTTP/1 only. Name the application's HTTP port with the pod annotation toolgate.dev/port; if this one does serve HTTP/1, name the port http",
		},
		{
			"istio's two_container: the denial names the annotation",
			templatePod(t, filepath.Join("..", "realworld", "istio", "two_container.yaml"), "Deployment/hello", inject),
			"2 containers could be the application; name one with the pod annotation toolgate.dev/container; or, if it serves no HTTP for agents, remove the annotation toolgate.dev/inject",
		},
		{
			"bookinfo's details with its container named toolgate",
			[]byte(strings.Replace(string(templatePod(t, filepath.Join("..", "realworld", "bookinfo.yaml"), "Deployment/details-v1", inject)), `"name":"details"`, `"name":"toolgate"`, 1)),
			"container toolgate (image registry.istio.io/release/examples-bookinfo-details-v1:1.20.3) is an ordinary container, not toolgate's native sidecar",
		},
		{
			"an agent port annotation that is no port",
			templatePod(t, boutique, "Deployment/frontend", with(annotationAgentPort, "eighty")),
			`the annotation toolgate.dev/agent-port: "eighty" is not a port number`,
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp := w.review(t, podRequest(t, c.name, c.pod))
			if resp.Allowed || resp.Result == nil || !strings.Contains(resp.Result.Message, c.msg) {
				t.Fatalf("want refused with %q, got %+v", c.msg, resp.Result)
			}
			for _, flagName := range []string{" -container", " -port", " -agent-port", " -admin-port", " -only"} {
				if strings.Contains(resp.Result.Message, flagName) {
					t.Errorf("the denial names %s, a flag the webhook does not have: %s", flagName, resp.Result.Message)
				}
			}
		})
	}
}
