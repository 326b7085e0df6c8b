package deploy

// The tests here decode every manifest strictly into the Kubernetes and
// prometheus-operator types, render the overlays, the sidecar component,
// the webhook and the examples with kustomize's own library, check that
// the rendered pieces fit together (ports, probes, selectors, the policy
// mount, the Secrets) and that the policy in the ConfigMap passes
// toolgate's validation.

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/examples"
	"github.com/toolgate/toolgate/internal/testkit/sidecartest"
	"github.com/toolgate/toolgate/policy"
)

// typeMeta reads just enough of a document to pick its Go type.
type typeMeta struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
}

// decodeStrict decodes one manifest into its typed API object; a field the
// type does not have is an error. A kind not listed here is an error too, so
// a new manifest kind cannot slip in unchecked.
func decodeStrict(doc []byte) (any, error) {
	var tm typeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return nil, err
	}
	var obj any
	switch tm.APIVersion + " " + tm.Kind {
	case "apps/v1 Deployment":
		obj = &appsv1.Deployment{}
	case "apps/v1 StatefulSet":
		obj = &appsv1.StatefulSet{}
	case "apps/v1 DaemonSet":
		obj = &appsv1.DaemonSet{}
	case "batch/v1 Job":
		obj = &batchv1.Job{}
	case "v1 Service":
		obj = &corev1.Service{}
	case "v1 ConfigMap":
		obj = &corev1.ConfigMap{}
	case "v1 Secret":
		obj = &corev1.Secret{}
	case "v1 Namespace":
		obj = &corev1.Namespace{}
	case "v1 ServiceAccount":
		obj = &corev1.ServiceAccount{}
	case "admissionregistration.k8s.io/v1 MutatingWebhookConfiguration":
		obj = &admissionregistrationv1.MutatingWebhookConfiguration{}
	case "cert-manager.io/v1 Issuer":
		obj = &certManagerIssuer{}
	case "cert-manager.io/v1 Certificate":
		obj = &certManagerCertificate{}
	case "policy/v1 PodDisruptionBudget":
		obj = &policyv1.PodDisruptionBudget{}
	case "networking.k8s.io/v1 NetworkPolicy":
		obj = &networkingv1.NetworkPolicy{}
	case "monitoring.coreos.com/v1 ServiceMonitor":
		obj = &monitoringv1.ServiceMonitor{}
	case "monitoring.coreos.com/v1 PrometheusRule":
		obj = &monitoringv1.PrometheusRule{}
	default:
		return nil, fmt.Errorf("no type for apiVersion %q kind %q", tm.APIVersion, tm.Kind)
	}
	if err := unmarshalStrict(doc, obj); err != nil {
		return nil, fmt.Errorf("%s %s: %w", tm.APIVersion, tm.Kind, err)
	}
	return obj, nil
}

// unmarshalStrict decodes YAML the way the API server does with
// fieldValidation=Strict: field names are case-sensitive, and unknown or
// duplicate fields are errors (encoding/json alone would accept
// "targetport" for targetPort).
func unmarshalStrict(doc []byte, obj any) error {
	data, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return err
	}
	strict, err := sigsjson.UnmarshalStrict(data, obj)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}

var docSeparator = regexp.MustCompile(`(?m)^---[ \t]*$`)

// splitDocs splits a multi-document YAML file, dropping empty documents.
func splitDocs(data []byte) [][]byte {
	var docs [][]byte
	for _, d := range docSeparator.Split(string(data), -1) {
		if strings.TrimSpace(stripComments(d)) != "" {
			docs = append(docs, []byte(d))
		}
	}
	return docs
}

func stripComments(s string) string {
	var b strings.Builder
	for line := range strings.SplitSeq(s, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

// manifestFiles lists the YAML files under deploy/ that are Kubernetes
// objects: everything but kustomization files, policy files, testdata and
// the component's patches (TestComponentAddsTheSidecar renders those).
func manifestFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || d.Name() == "envoy" || d.Name() == "components") {
			return filepath.SkipDir
		}
		name := d.Name()
		if d.IsDir() || !strings.HasSuffix(name, ".yaml") || name == "kustomization.yaml" || name == "policy.yaml" || isPolicyFile(path) {
			return nil
		}
		files = append(files, path)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 5 {
		t.Fatalf("found only %d manifests under deploy/: %v", len(files), files)
	}
	return files
}

func TestEveryManifestDecodesStrictly(t *testing.T) {
	for _, file := range manifestFiles(t) {
		t.Run(file, func(t *testing.T) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			docs := splitDocs(data)
			if len(docs) == 0 {
				t.Fatal("no YAML documents")
			}
			for i, doc := range docs {
				if _, err := decodeStrict(doc); err != nil {
					t.Errorf("document %d: %v", i+1, err)
				}
			}
		})
	}
}

// isPolicyFile reports whether a YAML file under deploy/ is a toolgate
// policy file (a "version: 1" document) rather than a manifest.
func isPolicyFile(path string) bool {
	data, err := os.ReadFile(path)
	return err == nil && regexp.MustCompile(`(?m)^version: 1\s*$`).Match(data)
}

func TestEveryKustomizationDecodesStrictly(t *testing.T) {
	for _, c := range []struct{ dir, apiVersion, kind string }{
		{"base", types.KustomizationVersion, types.KustomizationKind},
		{"overlays/single", types.KustomizationVersion, types.KustomizationKind},
		{"overlays/replicated", types.KustomizationVersion, types.KustomizationKind},
		{"webhook", types.KustomizationVersion, types.KustomizationKind},
		{"examples/secrets", types.KustomizationVersion, types.KustomizationKind},
		{"components/sidecar", types.ComponentVersion, types.ComponentKind},
		{"testdata/component", types.KustomizationVersion, types.KustomizationKind},
	} {
		t.Run(c.dir, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join(c.dir, "kustomization.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			var k types.Kustomization
			if err := unmarshalStrict(data, &k); err != nil {
				t.Fatal(err)
			}
			if k.Kind != c.kind || k.APIVersion != c.apiVersion {
				t.Errorf("apiVersion/kind = %s/%s, want %s/%s", k.APIVersion, k.Kind, c.apiVersion, c.kind)
			}
		})
	}
}

func TestStrictDecodingRejectsUnknownFields(t *testing.T) {
	docs := map[string]string{
		"Deployment":     "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec:\n  replica: 3\n",
		"Service":        "apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec:\n  ports: [{port: 80, targetport: 8080}]\n",
		"ServiceMonitor": "apiVersion: monitoring.coreos.com/v1\nkind: ServiceMonitor\nmetadata: {name: x}\nspec:\n  endpoints: [{port: admin, intervall: 15s}]\n",
		"PrometheusRule": "apiVersion: monitoring.coreos.com/v1\nkind: PrometheusRule\nmetadata: {name: x}\nspec:\n  groups: [{name: g, rules: [{alert: A, expr: up, fro: 1m}]}]\n",
		"Certificate":    "apiVersion: cert-manager.io/v1\nkind: Certificate\nmetadata: {name: x}\nspec:\n  secretname: x\n",
		"unknown kind":   "apiVersion: v1\nkind: Endpoints\nmetadata: {name: x}\n",
	}
	for name, doc := range docs {
		t.Run(name, func(t *testing.T) {
			if _, err := decodeStrict([]byte(doc)); err == nil {
				t.Fatal("decoded without error")
			}
		})
	}
}

// rendered is an overlay's output, decoded.
type rendered struct {
	deployments  map[string]*appsv1.Deployment
	templates    map[string]corev1.PodTemplateSpec // "Kind/name" of every workload
	services     map[string]*corev1.Service
	configMaps   map[string]*corev1.ConfigMap
	secrets      map[string]*corev1.Secret
	webhooks     []*admissionregistrationv1.MutatingWebhookConfiguration
	certificates map[string]*certManagerCertificate
	pdbs         []*policyv1.PodDisruptionBudget
	netpols      []*networkingv1.NetworkPolicy
	monitors     []*monitoringv1.ServiceMonitor
	rules        []*monitoringv1.PrometheusRule
	kindsByOrder []string
}

// render builds an overlay with kustomize's library (what `kubectl apply
// -k` runs) on the files on disk, and decodes every object strictly.
func render(t *testing.T, dir string) *rendered {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	r := &rendered{
		deployments:  map[string]*appsv1.Deployment{},
		templates:    map[string]corev1.PodTemplateSpec{},
		services:     map[string]*corev1.Service{},
		configMaps:   map[string]*corev1.ConfigMap{},
		secrets:      map[string]*corev1.Secret{},
		certificates: map[string]*certManagerCertificate{},
	}
	for _, res := range m.Resources() {
		doc, err := res.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		obj, err := decodeStrict(doc)
		if err != nil {
			t.Fatalf("rendered %s %s: %v", res.GetKind(), res.GetName(), err)
		}
		r.kindsByOrder = append(r.kindsByOrder, res.GetKind()+"/"+res.GetName())
		switch o := obj.(type) {
		case *appsv1.Deployment:
			r.deployments[o.Name] = o
			r.templates["Deployment/"+o.Name] = o.Spec.Template
		case *appsv1.StatefulSet:
			r.templates["StatefulSet/"+o.Name] = o.Spec.Template
		case *appsv1.DaemonSet:
			r.templates["DaemonSet/"+o.Name] = o.Spec.Template
		case *batchv1.Job:
			r.templates["Job/"+o.Name] = o.Spec.Template
		case *corev1.Secret:
			r.secrets[o.Name] = o
		case *admissionregistrationv1.MutatingWebhookConfiguration:
			r.webhooks = append(r.webhooks, o)
		case *certManagerCertificate:
			r.certificates[o.Metadata.Name] = o
		case *corev1.Service:
			r.services[o.Name] = o
		case *corev1.ConfigMap:
			r.configMaps[o.Name] = o
		case *policyv1.PodDisruptionBudget:
			r.pdbs = append(r.pdbs, o)
		case *networkingv1.NetworkPolicy:
			r.netpols = append(r.netpols, o)
		case *monitoringv1.ServiceMonitor:
			r.monitors = append(r.monitors, o)
		case *monitoringv1.PrometheusRule:
			r.rules = append(r.rules, o)
		}
	}
	return r
}

// overlays are the deployable variants and what each must render to.
var overlays = []struct {
	dir      string
	replicas int32
	backend  string
	objects  []string
}{
	{
		dir: "overlays/single", replicas: 1, backend: policy.BackendMemory,
		objects: []string{
			"ConfigMap/toolgate-policy", "Deployment/legacy-tools", "NetworkPolicy/legacy-tools", "PodDisruptionBudget/legacy-tools",
			"PrometheusRule/toolgate", "Service/legacy-tools", "Service/legacy-tools-admin",
			"ServiceMonitor/legacy-tools-toolgate",
		},
	},
	{
		dir: "overlays/replicated", replicas: 3, backend: policy.BackendRedis,
		objects: []string{
			"ConfigMap/toolgate-policy", "Deployment/legacy-tools", "Deployment/redis", "NetworkPolicy/legacy-tools", "NetworkPolicy/redis",
			"PodDisruptionBudget/legacy-tools", "PrometheusRule/toolgate", "Service/legacy-tools",
			"Service/legacy-tools-admin", "Service/redis", "ServiceMonitor/legacy-tools-toolgate",
		},
	},
}

func TestOverlaysRenderAndFitTogether(t *testing.T) {
	for _, ov := range overlays {
		t.Run(ov.dir, func(t *testing.T) {
			r := render(t, ov.dir)
			got := slices.Sorted(slices.Values(r.kindsByOrder))
			if !slices.Equal(got, ov.objects) {
				t.Fatalf("rendered objects\n got %v\nwant %v", got, ov.objects)
			}
			d := r.deployments["legacy-tools"]
			if d.Spec.Replicas == nil || *d.Spec.Replicas != ov.replicas {
				t.Errorf("replicas = %v, want %d", d.Spec.Replicas, ov.replicas)
			}
			snap := checkPolicyConfigMap(t, r, d)
			if snap.State.Backend != ov.backend {
				t.Errorf("policy state.backend = %q, want %q", snap.State.Backend, ov.backend)
			}
			if ov.backend == policy.BackendRedis {
				checkRedisReachable(t, r, snap)
				if len(d.Spec.Template.Spec.TopologySpreadConstraints) == 0 {
					t.Error("replicated Deployment has no topologySpreadConstraints")
				}
			}
			checkSidecar(t, r, d, snap)
			checkPodSecurity(t, d.Spec.Template.Spec)
			checkServices(t, r, d, snap)
			checkPDB(t, r, d)
			checkLegacyPortsClosed(t, r, d)
		})
	}
}

// sidecar returns the toolgate container of a pod spec.
func sidecar(t *testing.T, spec corev1.PodSpec) corev1.Container {
	t.Helper()
	for _, c := range spec.InitContainers {
		if c.Name == "toolgate" {
			return c
		}
	}
	t.Fatal("no init container named toolgate")
	return corev1.Container{}
}

// serveFlags parses the toolgate container's arguments like `toolgate
// serve` does: "-name=value" or "-name value" after the command.
func serveFlags(t *testing.T, args []string) map[string]string {
	t.Helper()
	if len(args) == 0 || args[0] != "serve" {
		t.Fatalf("toolgate args %q do not start with serve", args)
	}
	flags := map[string]string{}
	for i := 1; i < len(args); i++ {
		a := strings.TrimLeft(args[i], "-")
		if a == args[i] {
			t.Fatalf("toolgate arg %q is not a flag", args[i])
		}
		if name, value, ok := strings.Cut(a, "="); ok {
			flags[name] = value
			continue
		}
		if i+1 >= len(args) {
			t.Fatalf("toolgate flag %q has no value", args[i])
		}
		flags[a] = args[i+1]
		i++
	}
	for name := range flags {
		if !slices.Contains([]string{"config", "listen", "admin", "log-level", "drain-delay", "grace"}, name) {
			t.Errorf("toolgate serve has no flag -%s", name)
		}
	}
	return flags
}

// checkPolicyConfigMap loads the policy the pod will read, exactly as
// toolgate serve -config DIR does, and returns it.
func checkPolicyConfigMap(t *testing.T, r *rendered, d *appsv1.Deployment) *policy.Snapshot {
	spec := d.Spec.Template.Spec
	tg := sidecar(t, spec)
	configPath := serveFlags(t, tg.Args)["config"]
	var mount *corev1.VolumeMount
	for i, m := range tg.VolumeMounts {
		if m.MountPath == configPath {
			mount = &tg.VolumeMounts[i]
		}
	}
	if mount == nil {
		t.Fatalf("-config %s is not a volume mount of the toolgate container", configPath)
	}
	if mount.SubPath != "" || mount.SubPathExpr != "" {
		t.Error("the policy is mounted with subPath: ConfigMap updates would never arrive")
	}
	var cmName string
	for _, v := range spec.Volumes {
		if v.Name == mount.Name && v.ConfigMap != nil {
			cmName = v.ConfigMap.Name
		}
	}
	cm := r.configMaps[cmName]
	if cm == nil {
		t.Fatalf("volume %s names ConfigMap %q, which the overlay does not render", mount.Name, cmName)
	}
	if len(cm.Data) == 0 {
		t.Fatal("policy ConfigMap has no data")
	}
	dir := t.TempDir()
	for name, content := range cm.Data {
		if !strings.HasSuffix(name, ".yaml") {
			t.Errorf("ConfigMap key %q does not end in .yaml: toolgate would ignore it", name)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Loaded as the sidecar loads it: its -listen and -admin, when it has
	// them, in place of the policy's addresses.
	flags := serveFlags(t, tg.Args)
	snap, err := config.Load(dir, config.Options{
		LookupEnv:   func(string) (string, bool) { return "", false },
		Listen:      flags["listen"],
		AdminListen: flags["admin"],
	})
	if err != nil {
		t.Fatalf("the ConfigMap's policy fails toolgate check:\n%v", err)
	}
	return snap
}

func checkRedisReachable(t *testing.T, r *rendered, snap *policy.Snapshot) {
	u, err := url.Parse(snap.State.RedisURL)
	if err != nil {
		t.Fatal(err)
	}
	svc := r.services[u.Hostname()]
	if svc == nil {
		t.Fatalf("state.redis_url %s names no Service of the overlay", snap.State.RedisURL)
	}
	if !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return strconv.Itoa(int(p.Port)) == u.Port() }) {
		t.Errorf("Service %s has no port %s", svc.Name, u.Port())
	}
	redis := r.deployments["redis"]
	if !selects(svc.Spec.Selector, redis.Spec.Template.Labels) {
		t.Errorf("Service redis does not select the redis pods")
	}
	pods := r.deployments["legacy-tools"].Spec.Template.Labels
	allowed := false
	for _, np := range r.netpols {
		if !selects(np.Spec.PodSelector.MatchLabels, redis.Spec.Template.Labels) {
			continue
		}
		for _, in := range np.Spec.Ingress {
			for _, from := range in.From {
				if from.PodSelector != nil && selects(from.PodSelector.MatchLabels, pods) {
					allowed = true
				}
			}
		}
	}
	if !allowed {
		t.Error("no NetworkPolicy lets the toolgate pods reach redis")
	}
}

// selects reports whether a label selector matches a set of labels.
func selects(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func listenPort(t *testing.T, addr string) int32 {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("listen address %q: %v", addr, err)
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	return int32(n)
}

func containerPort(t *testing.T, c corev1.Container, name string) int32 {
	t.Helper()
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	t.Fatalf("container %s has no port named %s", c.Name, name)
	return 0
}

func checkSidecar(t *testing.T, r *rendered, d *appsv1.Deployment, snap *policy.Snapshot) {
	spec := d.Spec.Template.Spec
	tg := sidecar(t, spec)
	if tg.RestartPolicy == nil || *tg.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Error("toolgate is not a native sidecar: its init container needs restartPolicy: Always")
	}
	if !strings.Contains(tg.Image, "/") || !strings.Contains(tg.Image, ":") {
		t.Errorf("toolgate image %q was not set by the images transformer", tg.Image)
	}
	if len(spec.Containers) == 0 {
		t.Fatal("no legacy container next to toolgate")
	}
	agent, admin := containerPort(t, tg, "toolgate"), containerPort(t, tg, "toolgate-admin")
	if want := listenPort(t, snap.Server.Listen); agent != want {
		t.Errorf("agent containerPort %d, but server.listen is %s", agent, snap.Server.Listen)
	}
	if want := listenPort(t, snap.Server.AdminListen); admin != want {
		t.Errorf("admin containerPort %d, but server.admin_listen is %s", admin, snap.Server.AdminListen)
	}
	if host, _, _ := net.SplitHostPort(snap.Server.Listen); host != "" {
		t.Errorf("server.listen %s is not reachable from other pods", snap.Server.Listen)
	}
	if host, _, _ := net.SplitHostPort(snap.Server.AdminListen); host != "" {
		t.Errorf("server.admin_listen %s cannot be probed by the kubelet", snap.Server.AdminListen)
	}
	probes := []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{
		{"startupProbe", tg.StartupProbe, "/healthz"},
		{"livenessProbe", tg.LivenessProbe, "/healthz"},
		{"readinessProbe", tg.ReadinessProbe, "/readyz"},
	}
	for _, p := range probes {
		if p.probe == nil || p.probe.HTTPGet == nil {
			t.Errorf("toolgate has no HTTP %s", p.name)
			continue
		}
		g := p.probe.HTTPGet
		if g.Path != p.path {
			t.Errorf("%s path %s, want %s", p.name, g.Path, p.path)
		}
		if port := resolvePort(t, tg, g.Port); port != admin {
			t.Errorf("%s probes port %d, want the admin port %d", p.name, port, admin)
		}
	}

	// The pod's grace period must cover the whole shutdown: the legacy
	// containers' preStop and exit first, then toolgate's drain and grace.
	flags := serveFlags(t, tg.Args)
	drain := parseDuration(t, flags["drain-delay"], 5*time.Second)
	grace := parseDuration(t, flags["grace"], 30*time.Second)
	var preStop time.Duration
	for _, c := range spec.Containers {
		if c.Lifecycle != nil && c.Lifecycle.PreStop != nil && c.Lifecycle.PreStop.Sleep != nil {
			preStop = max(preStop, time.Duration(c.Lifecycle.PreStop.Sleep.Seconds)*time.Second)
		}
	}
	const margin = 5 * time.Second
	need := preStop + drain + grace + margin
	if spec.TerminationGracePeriodSeconds == nil {
		t.Fatal("no terminationGracePeriodSeconds")
	}
	if got := time.Duration(*spec.TerminationGracePeriodSeconds) * time.Second; got < need {
		t.Errorf("terminationGracePeriodSeconds %v < preStop %v + drain-delay %v + grace %v + %v", got, preStop, drain, grace, margin)
	}

	// GOMEMLIMIT below the memory limit, or the GC never gets to help.
	limit := tg.Resources.Limits.Memory()
	for _, e := range tg.Env {
		if e.Name != "GOMEMLIMIT" {
			continue
		}
		q, err := resource.ParseQuantity(strings.TrimSuffix(e.Value, "B"))
		if err != nil {
			t.Fatalf("GOMEMLIMIT %q: %v", e.Value, err)
		}
		if limit.IsZero() || q.Cmp(*limit) >= 0 {
			t.Errorf("GOMEMLIMIT %s is not below the memory limit %s", e.Value, limit)
		}
	}
}

func parseDuration(t *testing.T, s string, def time.Duration) time.Duration {
	t.Helper()
	if s == "" {
		return def
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func resolvePort(t *testing.T, c corev1.Container, p intstr.IntOrString) int32 {
	t.Helper()
	if p.Type == intstr.Int {
		return p.IntVal
	}
	return containerPort(t, c, p.StrVal)
}

// checkPodSecurity holds every container to the restricted Pod Security
// Standard, plus a read-only root filesystem and resource requests.
func checkPodSecurity(t *testing.T, spec corev1.PodSpec) {
	pod := spec.SecurityContext
	if pod == nil {
		t.Fatal("no pod securityContext")
	}
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Error("the service account token is mounted; toolgate never calls the Kubernetes API")
	}
	if pod.RunAsUser != nil && *pod.RunAsUser == 0 {
		t.Error("pod runs as root")
	}
	all := append(slices.Clone(spec.InitContainers), spec.Containers...)
	for _, c := range all {
		sc := c.SecurityContext
		if sc == nil {
			t.Errorf("%s: no securityContext", c.Name)
			continue
		}
		nonRoot := (sc.RunAsNonRoot != nil && *sc.RunAsNonRoot) || (sc.RunAsNonRoot == nil && pod.RunAsNonRoot != nil && *pod.RunAsNonRoot)
		if !nonRoot {
			t.Errorf("%s: runAsNonRoot is not true", c.Name)
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			t.Errorf("%s: allowPrivilegeEscalation is not false", c.Name)
		}
		if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			t.Errorf("%s: readOnlyRootFilesystem is not true", c.Name)
		}
		if sc.Privileged != nil && *sc.Privileged {
			t.Errorf("%s: privileged", c.Name)
		}
		if sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 {
			t.Errorf("%s: capabilities must drop ALL and add none", c.Name)
		}
		seccomp := sc.SeccompProfile
		if seccomp == nil {
			seccomp = pod.SeccompProfile
		}
		if seccomp == nil || seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("%s: seccompProfile is not RuntimeDefault", c.Name)
		}
		req, lim := c.Resources.Requests, c.Resources.Limits
		if req.Cpu().IsZero() || req.Memory().IsZero() || lim.Memory().IsZero() {
			t.Errorf("%s: needs cpu and memory requests and a memory limit", c.Name)
		}
	}
}

func checkServices(t *testing.T, r *rendered, d *appsv1.Deployment, snap *policy.Snapshot) {
	labels := d.Spec.Template.Labels
	tg := sidecar(t, d.Spec.Template.Spec)

	svc := r.services["legacy-tools"]
	if !selects(svc.Spec.Selector, labels) {
		t.Errorf("Service %s does not select the pods", svc.Name)
	}
	agent := containerPort(t, tg, "toolgate")
	if len(svc.Spec.Ports) != 1 || resolvePort(t, tg, svc.Spec.Ports[0].TargetPort) != agent {
		t.Errorf("Service %s must expose exactly toolgate's agent port %d: %+v", svc.Name, agent, svc.Spec.Ports)
	}

	admin := containerPort(t, tg, "toolgate-admin")
	if len(r.monitors) != 1 {
		t.Fatalf("%d ServiceMonitors, want 1", len(r.monitors))
	}
	sm := r.monitors[0]
	var scraped []*corev1.Service
	for _, s := range r.services {
		if selects(sm.Spec.Selector.MatchLabels, s.Labels) {
			scraped = append(scraped, s)
		}
	}
	if len(scraped) != 1 {
		t.Fatalf("the ServiceMonitor selects %d Services, want 1 (the admin Service)", len(scraped))
	}
	adminSvc := scraped[0]
	if !selects(adminSvc.Spec.Selector, labels) {
		t.Errorf("Service %s does not select the pods", adminSvc.Name)
	}
	if len(sm.Spec.Endpoints) == 0 {
		t.Fatal("the ServiceMonitor has no endpoints")
	}
	for _, ep := range sm.Spec.Endpoints {
		if ep.Path != "/metrics" {
			t.Errorf("ServiceMonitor path %q, want /metrics", ep.Path)
		}
		i := slices.IndexFunc(adminSvc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == ep.Port })
		if i < 0 {
			t.Errorf("ServiceMonitor port %v is not a port of Service %s", ep.Port, adminSvc.Name)
			continue
		}
		if got := resolvePort(t, tg, adminSvc.Spec.Ports[i].TargetPort); got != admin {
			t.Errorf("ServiceMonitor scrapes port %d, want toolgate's admin port %d", got, admin)
		}
	}
	if host, port, _ := net.SplitHostPort(snap.Server.AdminListen); host != "" || port != strconv.Itoa(int(admin)) {
		t.Errorf("admin_listen %s does not match the admin port %d", snap.Server.AdminListen, admin)
	}
}

// checkLegacyPortsClosed: other pods reach the legacy containers' ports
// only through toolgate; no Service leads to them, and the NetworkPolicy
// admits no other pod to them.
func checkLegacyPortsClosed(t *testing.T, r *rendered, d *appsv1.Deployment) {
	var services []corev1.Service
	for _, s := range r.services {
		services = append(services, *s)
	}
	var policies []networkingv1.NetworkPolicy
	for _, np := range r.netpols {
		policies = append(policies, *np)
	}
	selected := false
	for _, np := range policies {
		if sidecartest.Selects(np.Spec.PodSelector.MatchLabels, d.Spec.Template.Labels) {
			selected = true
		}
	}
	if !selected {
		t.Error("no NetworkPolicy selects the pods: other pods can call the legacy ports directly")
	}
	for _, c := range d.Spec.Template.Spec.Containers {
		for _, p := range c.Ports {
			sidecartest.AppPortClosed(t, d.Spec.Template.Labels, c, p.ContainerPort, services, policies)
		}
	}
}

func checkPDB(t *testing.T, r *rendered, d *appsv1.Deployment) {
	if len(r.pdbs) != 1 {
		t.Fatalf("%d PodDisruptionBudgets, want 1", len(r.pdbs))
	}
	pdb := r.pdbs[0]
	if pdb.Spec.Selector == nil || !selects(pdb.Spec.Selector.MatchLabels, d.Spec.Template.Labels) {
		t.Error("the PodDisruptionBudget does not select the pods")
	}
	if pdb.Spec.MaxUnavailable == nil && pdb.Spec.MinAvailable == nil {
		t.Error("the PodDisruptionBudget sets neither maxUnavailable nor minAvailable")
	}
}

func TestPrometheusRuleHasTheAlertsOperatorsNeed(t *testing.T) {
	r := render(t, "overlays/single")
	if len(r.rules) != 1 {
		t.Fatalf("%d PrometheusRules, want 1", len(r.rules))
	}
	want := []string{
		"ToolgateToolFailureRatioHigh", "ToolgateCircuitOpen", "ToolgateIdempotencyStoreErrors",
		"ToolgateConfigReloadFailed", "ToolgateBudgetExhausted", "ToolgateToolLatencyHigh",
	}
	var got []string
	for _, g := range r.rules[0].Spec.Groups {
		for _, rule := range g.Rules {
			if rule.Alert == "" {
				continue
			}
			got = append(got, rule.Alert)
			if !slices.Contains([]string{"critical", "warning", "info"}, rule.Labels["severity"]) {
				t.Errorf("%s: severity %q, want critical, warning or info", rule.Alert, rule.Labels["severity"])
			}
			for _, a := range []string{"summary", "description"} {
				if strings.TrimSpace(rule.Annotations[a]) == "" {
					t.Errorf("%s: no %s annotation", rule.Alert, a)
				}
			}
		}
	}
	for _, name := range want {
		if !slices.Contains(got, name) {
			t.Errorf("no alert %s", name)
		}
	}
}

// TestBasePolicyIsTheExamplePolicy keeps deploy/base/policy.yaml (kustomize
// cannot read ../../examples) identical to examples/policy.yaml except for
// the listen addresses, which must be open to the pod network.
func TestBasePolicyIsTheExamplePolicy(t *testing.T) {
	base, err := os.ReadFile("base/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Split(string(examples.Policy()), "\n")
	got := strings.Split(string(base), "\n")
	if len(got) != len(want) {
		t.Fatalf("base/policy.yaml has %d lines, examples/policy.yaml %d: copy it again and change only server.listen and server.admin_listen", len(got), len(want))
	}
	allowed := map[string]string{"listen": ":8080", "admin_listen": ":9090"}
	changed := map[string]bool{}
	for i := range want {
		if got[i] == want[i] {
			continue
		}
		key, value, ok := listenLine(got[i])
		wkey, _, wok := listenLine(want[i])
		if !ok || !wok || key != wkey {
			t.Errorf("base/policy.yaml:%d differs from examples/policy.yaml:\n got %q\nwant %q", i+1, got[i], want[i])
			continue
		}
		if value != allowed[key] {
			t.Errorf("base/policy.yaml:%d: server.%s is %q, want %q (the Deployment's ports)", i+1, key, value, allowed[key])
		}
		changed[key] = true
	}
	for key := range allowed {
		if !changed[key] {
			t.Errorf("base/policy.yaml keeps server.%s of examples/policy.yaml; the cluster needs %q", key, allowed[key])
		}
	}
}

var listenRE = regexp.MustCompile(`^  (listen|admin_listen): "?([^"#\s]*)"?\s*$`)

func listenLine(s string) (key, value string, ok bool) {
	m := listenRE.FindStringSubmatch(s)
	if m == nil {
		return "", "", false
	}
	return m[1], m[2], true
}

// TestReplicatedPolicyDiffersOnlyInState keeps the replicated overlay's
// full copy of the policy (toolgate allows `state` in one file only, so the
// overlay replaces the file) equal to the base outside the state section.
func TestReplicatedPolicyDiffersOnlyInState(t *testing.T) {
	base, err := os.ReadFile("base/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	replicated, err := os.ReadFile("overlays/replicated/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	baseRest, _ := cutSection(t, string(base), "state")
	repRest, repState := cutSection(t, string(replicated), "state")
	if baseRest != repRest {
		t.Errorf("overlays/replicated/policy.yaml differs from base/policy.yaml outside state:\n%s", lineDiff(baseRest, repRest))
	}
	if !strings.Contains(repState, "backend: redis") {
		t.Errorf("the replicated state section does not select redis:\n%s", repState)
	}
}

// cutSection removes a top-level YAML section (its key line and the indented
// or blank lines under it) and returns the rest and the section.
func cutSection(t *testing.T, doc, key string) (rest, section string) {
	t.Helper()
	var r, s strings.Builder
	in, found := false, false
	for line := range strings.SplitSeq(doc, "\n") {
		switch {
		case strings.HasPrefix(line, key+":"):
			in, found = true, true
		case in && line != "" && !strings.HasPrefix(line, " ") && !strings.HasPrefix(line, "#"):
			in = false
		}
		if in {
			s.WriteString(line + "\n")
		} else {
			r.WriteString(line + "\n")
		}
	}
	if !found {
		t.Fatalf("no top-level %s section", key)
	}
	return r.String(), s.String()
}

func lineDiff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	var out bytes.Buffer
	for i := 0; i < max(len(al), len(bl)); i++ {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x != y {
			fmt.Fprintf(&out, "line %d:\n- %s\n+ %s\n", i+1, x, y)
		}
	}
	return out.String()
}
