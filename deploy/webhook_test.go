package deploy

import (
	"encoding/json"
	"path"
	"slices"
	"strconv"
	"strings"
	"testing"

	"cel.dev/cel-go/cel"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestWebhookManifestsFitTogether renders deploy/webhook and checks what
// the API server and the webhook need of each other: the configuration
// reaches the Service, the Service the container's port, the certificate
// names the Service and lands where -tls-cert reads it, and the sidecars
// get the webhook's own image.
func TestWebhookManifestsFitTogether(t *testing.T) {
	r := render(t, "webhook")
	d := r.deployments["toolgate-webhook"]
	if d == nil {
		t.Fatal("no Deployment toolgate-webhook")
	}
	spec := d.Spec.Template.Spec
	checkPodSecurity(t, spec)
	if d.Spec.Replicas == nil || *d.Spec.Replicas < 2 {
		t.Error("one replica: with failurePolicy Fail, a restart blocks every pod that asks for toolgate")
	}
	c := spec.Containers[0]
	flags := map[string]string{}
	for _, a := range c.Args[1:] {
		name, value, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		flags[name] = value
	}
	if c.Args[0] != "webhook" {
		t.Fatalf("args %v do not run toolgate webhook", c.Args)
	}
	if flags["image"] != c.Image || !strings.Contains(c.Image, "/") {
		t.Errorf("-image=%s, want the container's image %s as the images transformer sets it", flags["image"], c.Image)
	}

	if len(r.webhooks) != 1 || len(r.webhooks[0].Webhooks) != 1 {
		t.Fatal("want one MutatingWebhookConfiguration with one webhook")
	}
	mwc := r.webhooks[0]
	wh := mwc.Webhooks[0]
	if !slices.Contains(wh.AdmissionReviewVersions, "v1") {
		t.Errorf("admissionReviewVersions %v lacks v1", wh.AdmissionReviewVersions)
	}
	if wh.SideEffects == nil || *wh.SideEffects != admissionregistrationv1.SideEffectClassNone {
		t.Error("sideEffects must be None: the webhook changes nothing but the pod")
	}
	if wh.FailurePolicy == nil || *wh.FailurePolicy != admissionregistrationv1.Fail {
		t.Error("failurePolicy must be Fail: a pod that asks for toolgate must not start without it")
	}
	if wh.NamespaceSelector == nil || wh.NamespaceSelector.MatchLabels["toolgate.dev/inject"] != "enabled" {
		t.Error("no namespaceSelector on toolgate.dev/inject=enabled: every namespace would depend on the webhook")
	}
	if wh.TimeoutSeconds == nil || *wh.TimeoutSeconds > 3 {
		t.Error("timeoutSeconds should be short: a pod that asks for toolgate waits that long for a hung webhook")
	}
	checkMatchConditions(t, wh.MatchConditions)
	if len(wh.Rules) != 1 || !slices.Equal(wh.Rules[0].Resources, []string{"pods"}) ||
		!slices.Equal(wh.Rules[0].Operations, []admissionregistrationv1.OperationType{admissionregistrationv1.Create}) {
		t.Errorf("rules %+v, want pods on CREATE only", wh.Rules)
	}

	// Configuration -> Service -> container port.
	ref := wh.ClientConfig.Service
	if ref == nil || ref.Path == nil || *ref.Path != "/mutate" {
		t.Fatalf("clientConfig %+v does not call the Service's /mutate", wh.ClientConfig)
	}
	svc := r.services[ref.Name]
	if svc == nil || svc.Namespace != ref.Namespace {
		t.Fatalf("clientConfig names Service %s/%s, which is not rendered", ref.Namespace, ref.Name)
	}
	if !selects(svc.Spec.Selector, d.Spec.Template.Labels) {
		t.Error("the Service does not select the webhook's pods")
	}
	port := int32(443)
	if ref.Port != nil {
		port = *ref.Port
	}
	i := slices.IndexFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Port == port })
	if i < 0 {
		t.Fatalf("the Service has no port %d", port)
	}
	target := resolvePort(t, c, svc.Spec.Ports[i].TargetPort)
	if want := "-listen=:" + strconv.Itoa(int(target)); !slices.Contains(c.Args, want) {
		t.Errorf("the Service leads to port %d, but the webhook's args are %v", target, c.Args)
	}
	for _, p := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Scheme != corev1.URISchemeHTTPS || p.HTTPGet.Path != "/healthz" {
			t.Errorf("probe %+v: want HTTPS GET /healthz", p)
		}
	}

	// Certificate -> Secret -> mount -> -tls-cert, -tls-key; and the CA
	// injector's annotation names that Certificate.
	cert := r.certificates["toolgate-webhook"]
	if cert == nil {
		t.Fatal("no Certificate toolgate-webhook")
	}
	if got := mwc.Annotations["cert-manager.io/inject-ca-from"]; got != cert.Metadata.Namespace+"/"+cert.Metadata.Name {
		t.Errorf("inject-ca-from %q does not name the serving Certificate %s/%s", got, cert.Metadata.Namespace, cert.Metadata.Name)
	}
	if dns := svc.Name + "." + svc.Namespace + ".svc"; !slices.Contains(cert.Spec.DNSNames, dns) {
		t.Errorf("the certificate's names %v lack %s, the name the API server calls", cert.Spec.DNSNames, dns)
	}
	var mountDir string
	for _, v := range spec.Volumes {
		if v.Secret != nil && v.Secret.SecretName == cert.Spec.SecretName {
			for _, m := range c.VolumeMounts {
				if m.Name == v.Name && m.SubPath == "" {
					mountDir = m.MountPath
				}
			}
		}
	}
	if mountDir == "" {
		t.Fatalf("the Secret %s is not mounted as a directory in the webhook", cert.Spec.SecretName)
	}
	if flags["tls-cert"] != path.Join(mountDir, "tls.crt") || flags["tls-key"] != path.Join(mountDir, "tls.key") {
		t.Errorf("-tls-cert=%s -tls-key=%s, want tls.crt and tls.key in %s", flags["tls-cert"], flags["tls-key"], mountDir)
	}
	if len(r.pdbs) != 1 || !selects(r.pdbs[0].Spec.Selector.MatchLabels, d.Spec.Template.Labels) {
		t.Error("no PodDisruptionBudget keeps a replica through node drains")
	}
}

// checkMatchConditions evaluates the webhook's matchConditions with CEL,
// as the API server does (object is the pod being created): the API
// server must call the webhook for the pods that ask for toolgate and for
// no other, so that a webhook that is down or hung blocks nothing else.
// The end-to-end test (make e2e-kube) runs them in a real API server.
func checkMatchConditions(t *testing.T, conds []admissionregistrationv1.MatchCondition) {
	t.Helper()
	if len(conds) == 0 {
		t.Fatal("no matchConditions: with the webhook down, every pod of an opted-in namespace would be refused")
	}
	env, err := cel.NewEnv(cel.Variable("object", cel.DynType))
	if err != nil {
		t.Fatal(err)
	}
	var programs []cel.Program
	for _, c := range conds {
		ast, iss := env.Compile(c.Expression)
		if iss.Err() != nil {
			t.Fatalf("matchCondition %s: %v", c.Name, iss.Err())
		}
		prg, err := env.Program(ast)
		if err != nil {
			t.Fatal(err)
		}
		programs = append(programs, prg)
	}
	for _, c := range []struct {
		name        string
		annotations map[string]string
		want        bool
	}{
		{"a pod that asks for toolgate", map[string]string{"toolgate.dev/inject": "true"}, true},
		{"a pod without annotations", nil, false},
		{"a pod with other annotations", map[string]string{"prometheus.io/scrape": "true"}, false},
		{"a pod that says false", map[string]string{"toolgate.dev/inject": "false"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			pod := corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "app-", Annotations: c.annotations}}
			js, err := json.Marshal(pod)
			if err != nil {
				t.Fatal(err)
			}
			var object map[string]any
			if err := json.Unmarshal(js, &object); err != nil {
				t.Fatal(err)
			}
			all := true
			for i, prg := range programs {
				out, _, err := prg.Eval(map[string]any{"object": object})
				if err != nil {
					t.Fatalf("matchCondition %s: %v", conds[i].Name, err)
				}
				all = all && out.Value() == true
			}
			if all != c.want {
				t.Errorf("the webhook is called: %v, want %v", all, c.want)
			}
		})
	}
}
