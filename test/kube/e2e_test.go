package kube

import (
	"bytes"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	sigsyaml "sigs.k8s.io/yaml"
)

// e2eImage is the sidecar image of the test's injections; no pod runs
// (the API server has no kubelet), so it is only a name.
const e2eImage = "registry.example.com/toolgate:0.2.0"

// certManagerCRDs stand in for cert-manager's CustomResourceDefinitions
// (deploy/webhook's certificate.yaml uses its Issuer and Certificate):
// their names and versions, with any content.
const certManagerCRDs = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: issuers.cert-manager.io
spec:
  group: cert-manager.io
  names: {kind: Issuer, listKind: IssuerList, plural: issuers, singular: issuer}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: certificates.cert-manager.io
spec:
  group: cert-manager.io
  names: {kind: Certificate, listKind: CertificateList, plural: certificates, singular: certificate}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
`

// injectCases are the inputs the test injects and applies: the goldens of
// cmd/toolgate-kube with their flags, and the real-world manifests.
var injectCases = []struct {
	file string
	args []string
	crlf bool
}{
	{"cmd/toolgate-kube/testdata/inject/orders.yaml", []string{"-policy", "orders-policy", "-container", "api", "-port", "http", "-service", "-network-policy"}, false},
	{"cmd/toolgate-kube/testdata/inject/numeric.yaml", []string{"-service", "-network-policy"}, false},
	{"cmd/toolgate-kube/testdata/inject/kinds.yaml", nil, false},
	{"cmd/toolgate-kube/testdata/inject/mixed.yaml", nil, false},
	{"cmd/toolgate-kube/testdata/inject/list.yaml", []string{"-port", "http", "-service", "-network-policy", "-env-secret", "billing-upstream", "-file-secret", "billing-certs"}, false},
	{"cmd/toolgate-kube/testdata/inject/pod.json", []string{"-agent-port", "18080", "-admin-port", "19090"}, false},
	{"cmd/toolgate-kube/testdata/realworld/bookinfo.yaml", []string{"-service", "-network-policy"}, false},
	{"cmd/toolgate-kube/testdata/realworld/bookinfo.yaml", []string{"-service", "-network-policy"}, true},
	{"cmd/toolgate-kube/testdata/realworld/microservices-demo.yaml", []string{"-only", "frontend,adservice,redis-cart", "-agent-port", "8081", "-service", "-network-policy"}, false},
	{"cmd/toolgate-kube/testdata/realworld/guestbook-all-in-one.yaml", []string{"-service", "-network-policy"}, false},
	{"cmd/toolgate-kube/testdata/realworld/argocd-server.yaml", []string{"-port", "8080", "-agent-port", "8081", "-service", "-network-policy"}, false},
	{"cmd/toolgate-kube/testdata/realworld/grafana.yaml", []string{"-service", "-network-policy"}, false},
	{"cmd/toolgate-kube/testdata/realworld/reviews-merge.yaml", []string{"-network-policy"}, false},
}

// serverFields are the lines of kubectl get's output that name one
// cluster's object.
var serverFields = regexp.MustCompile(`(?m)^\s+(uid|resourceVersion): .*\n`)

// tools are the test's toolgate and toolgate-kube, with kubectl next to
// them.
type tools struct{ bin string }

// inject runs toolgate-kube inject on input and returns its output.
func (tl tools) inject(t *testing.T, input string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	cmd := exec.Command(filepath.Join(tl.bin, "toolgate-kube"), append([]string{"inject", "-image", e2eImage}, args...)...)
	cmd.Stdin = strings.NewReader(input)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	return out.String(), errOut.String(), err
}

// TestKubernetesEndToEnd runs toolgate's Kubernetes tools against a real
// kube-apiserver (make e2e-kube): the docs' commands, the injected
// manifests under server-side strict field validation, and the webhook
// behind the API server.
func TestKubernetesEndToEnd(t *testing.T) {
	c := startCluster(t)
	tl := tools{bin: buildTools(t)}
	if err := os.Symlink(filepath.Join(c.bin, "kubectl"), filepath.Join(tl.bin, "kubectl")); err != nil {
		t.Fatal(err)
	}
	c.must(t, "", "create", "namespace", "e2e")
	c.must(t, "", "create", "serviceaccount", "default")

	ok := t.Run("the docs' commands run in order, kubectl's against the API server", func(t *testing.T) {
		c.must(t, certManagerCRDs, "apply", "--server-side", "-f", "-")
		c.must(t, "", "wait", "--for=condition=Established", "crd/issuers.cert-manager.io", "crd/certificates.cert-manager.io")
		w := newWalker(t, tl.bin, "KUBECONFIG="+c.kubeconfig)
		blocks := shellBlocks(t, kubernetesDocs)
		// operations.md's way into Kubernetes, after the page it points
		// to (its other blocks build images and call a running toolgate).
		for _, b := range shellBlocks(t, operationsDocs) {
			if strings.Contains(b.script, "toolgate-kube") {
				blocks = append(blocks, b)
			}
		}
		n := 0
		for _, b := range blocks {
			w.run(t, b)
			if b.cluster {
				n++
			}
		}
		if n < 5 {
			t.Errorf("walked %d blocks with kubectl, want kubernetes.md's inject, pipe, webhook and certificate blocks and operations.md's", n)
		}
		var d appsv1.Deployment
		if err := json.Unmarshal([]byte(c.must(t, "", "-n", "shop", "get", "deployment", "orders-api", "-o", "json")), &d); err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(d.Spec.Template.Spec.InitContainers, func(c corev1.Container) bool { return c.Name == "toolgate" }) {
			t.Error("the Deployment the page applied has no toolgate")
		}
		var mwc admissionregistrationv1.MutatingWebhookConfiguration
		if err := json.Unmarshal([]byte(c.must(t, "", "get", "mutatingwebhookconfiguration", "toolgate", "-o", "json")), &mwc); err != nil {
			t.Fatal(err)
		}
		if len(mwc.Webhooks) != 1 || len(mwc.Webhooks[0].ClientConfig.CABundle) == 0 || len(mwc.Webhooks[0].MatchConditions) == 0 {
			t.Errorf("the page's webhook configuration has no caBundle or no matchConditions: %+v", mwc.Webhooks)
		}
	})
	if !ok {
		t.FailNow()
	}

	t.Run("injected manifests pass server-side strict field validation", func(t *testing.T) {
		for _, ns := range []string{"finance", "monitoring"} {
			c.must(t, "", "create", "namespace", ns)
		}
		istio, err := filepath.Glob(filepath.Join(repoRoot, "cmd/toolgate-kube/testdata/realworld/istio/*.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		cases := slices.Clone(injectCases)
		for _, f := range istio {
			rel, _ := filepath.Rel(repoRoot, f)
			cases = append(cases, struct {
				file string
				args []string
				crlf bool
			}{rel, []string{"-service"}, false})
		}
		runs, objects := 0, 0
		for _, ic := range cases {
			data, err := os.ReadFile(filepath.Join(repoRoot, ic.file))
			if err != nil {
				t.Fatal(err)
			}
			in := string(data)
			if ic.crlf {
				in = strings.ReplaceAll(in, "\n", "\r\n")
			}
			// kubectl get's output from another cluster names objects
			// (uid, resourceVersion) this one does not have.
			in = serverFields.ReplaceAllString(in, "")
			apply := []string{"apply", "--server-side", "--dry-run=server", "--validate=strict", "--force-conflicts", "--field-manager=toolgate-e2e", "-f", "-"}
			if _, errOut, err := c.kubectl(in, apply...); err != nil {
				t.Logf("%s: the API server refuses the input as it is, left out: %s", ic.file, strings.TrimSpace(errOut))
				continue
			}
			out, notes, err := tl.inject(t, in, ic.args...)
			if err != nil {
				if strings.Contains(ic.file, "/istio/") {
					continue // refused, and said why: cmd/toolgate-kube's tests hold the message
				}
				t.Fatalf("%s: inject: %v\n%s", ic.file, err, notes)
			}
			applied, errOut, err := c.kubectl(out, apply...)
			if err != nil {
				t.Errorf("%s %v: the API server refuses the injected manifests: %v\n%s", ic.file, ic.args, err, errOut)
				continue
			}
			runs++
			objects += strings.Count(applied, "(server dry run)")
		}
		t.Logf("%d injected inputs, %d objects applied with server-side strict field validation (dry run)", runs, objects)
		if runs < len(injectCases)+10 {
			t.Errorf("only %d inputs applied", runs)
		}
	})

	t.Run("the webhook behind the API server", func(t *testing.T) {
		testWebhook(t, c, tl)
	})
}

// podFrom makes a pod of a workload of a real manifest (as its
// ReplicaSet would), with annotations, as YAML.
func podFrom(t *testing.T, file, name string, annotations map[string]string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, file))
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var d appsv1.Deployment
		if err := sigsyaml.Unmarshal([]byte(doc), &d); err != nil || d.Kind != "Deployment" || d.Name != name {
			continue
		}
		pod := corev1.Pod{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
			ObjectMeta: d.Spec.Template.ObjectMeta,
			Spec:       d.Spec.Template.Spec,
		}
		pod.GenerateName = name + "-"
		if pod.Annotations == nil {
			pod.Annotations = map[string]string{}
		}
		for k, v := range annotations {
			pod.Annotations[k] = v
		}
		out, err := sigsyaml.Marshal(pod)
		if err != nil {
			t.Fatal(err)
		}
		return string(out)
	}
	t.Fatalf("no Deployment %s in %s", name, file)
	return ""
}

// createPod creates a pod and returns it as the API server stored it (or
// answered the dry run), with how long the request took.
func createPod(t *testing.T, c *cluster, ns, pod string, dryRun bool) (*corev1.Pod, time.Duration, error) {
	t.Helper()
	args := []string{"-n", ns, "create", "-f", "-", "-o", "json"}
	if dryRun {
		args = append(args, "--dry-run=server")
	}
	start := time.Now()
	out, errOut, err := c.kubectl(pod, args...)
	took := time.Since(start)
	if err != nil {
		return nil, took, fmt.Errorf("%w: %s", err, errOut)
	}
	var p corev1.Pod
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatal(err)
	}
	return &p, took, nil
}

// toolgateOf returns the pod's toolgate init container, if any, without
// the service account token the API server mounts in every container
// (under a name of its choosing).
func toolgateOf(p *corev1.Pod) *corev1.Container {
	for _, c := range p.Spec.InitContainers {
		if c.Name == "toolgate" {
			c = *c.DeepCopy()
			c.VolumeMounts = slices.DeleteFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
				return m.MountPath == "/var/run/secrets/kubernetes.io/serviceaccount"
			})
			return &c
		}
	}
	return nil
}

// volumeOf returns the pod's volume of that name, if any.
func volumeOf(p *corev1.Pod, name string) *corev1.Volume {
	for i, v := range p.Spec.Volumes {
		if v.Name == name {
			return &p.Spec.Volumes[i]
		}
	}
	return nil
}

// testWebhook runs toolgate-kube webhook behind the API server, through
// the configuration of deploy/webhook the docs' walk applied (its
// clientConfig pointed at the webhook on loopback).
func testWebhook(t *testing.T, c *cluster, tl tools) {
	for _, ns := range []string{"shop", "e2e"} {
		for _, sa := range []string{"frontend", "adservice"} {
			c.must(t, "", "-n", ns, "create", "serviceaccount", sa)
		}
	}
	c.must(t, "", "-n", "shop", "create", "serviceaccount", "default")
	frontend := "cmd/toolgate-kube/testdata/realworld/microservices-demo.yaml"
	plain := podFrom(t, frontend, "frontend", nil)
	asks := podFrom(t, frontend, "frontend", map[string]string{"toolgate.dev/inject": "true", "toolgate.dev/agent-port": "8081"})
	grpc := podFrom(t, frontend, "adservice", map[string]string{"toolgate.dev/inject": "true"})

	t.Run("down: the Service has no endpoints; a pod that asks for toolgate is refused, every other is created", func(t *testing.T) {
		p, took, err := createPod(t, c, "shop", plain, true)
		if err != nil || toolgateOf(p) != nil {
			t.Errorf("a pod without the annotation, in an opted-in namespace: %v", err)
		}
		t.Logf("a pod without the annotation created in %v", took.Round(time.Millisecond))
		if _, _, err := createPod(t, c, "shop", asks, true); err == nil || !strings.Contains(err.Error(), `failed calling webhook "inject.toolgate.dev"`) {
			t.Errorf("a pod that asks for toolgate, with the webhook down: %v", err)
		}
	})

	dir := t.TempDir()
	ca := newTestCA(t)
	certFile, keyFile := ca.issue(t, dir, "webhook")
	addr := freeAddr(t)
	webhook := process(t, dir, "webhook", filepath.Join(tl.bin, "toolgate-kube"), "webhook",
		"-image", e2eImage, "-listen", addr, "-tls-cert", certFile, "-tls-key", keyFile)
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.pool()}}}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		resp, err := client.Get("https://" + addr + "/healthz")
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the webhook does not answer: %v", err)
		}
	}
	patch := fmt.Sprintf(`[{"op":"remove","path":"/webhooks/0/clientConfig/service"},`+
		`{"op":"add","path":"/webhooks/0/clientConfig/url","value":"https://%s/mutate"},`+
		`{"op":"replace","path":"/webhooks/0/clientConfig/caBundle","value":"%s"}]`, addr, base64.StdEncoding.EncodeToString(ca.certPEM))
	c.must(t, "", "patch", "mutatingwebhookconfiguration", "toolgate", "--type", "json", "-p", patch)

	t.Run("up: the pod that asks for toolgate gets the sidecar toolgate-kube inject adds", func(t *testing.T) {
		// The API server picks the new configuration up within a moment.
		var got *corev1.Pod
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			p, _, err := createPod(t, c, "shop", asks, false)
			if err == nil && toolgateOf(p) != nil {
				got = p
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no pod with toolgate after 30 s: %v", err)
			}
		}
		injected, notes, err := tl.inject(t, asks)
		if err != nil {
			t.Fatalf("inject: %v\n%s", err, notes)
		}
		want, _, err := createPod(t, c, "e2e", injected, true)
		if err != nil {
			t.Fatalf("inject's pod: %v", err)
		}
		if g, w := toolgateOf(got), toolgateOf(want); !equality.Semantic.DeepEqual(g, w) {
			t.Errorf("the webhook's toolgate and inject's differ:\n got %+v\nwant %+v", g, w)
		}
		if g, w := volumeOf(got, "toolgate-policy"), volumeOf(want, "toolgate-policy"); g == nil || !equality.Semantic.DeepEqual(g, w) {
			t.Errorf("the policy volume: got %+v, want %+v", g, w)
		}
		if !equality.Semantic.DeepEqual(got.Spec.TerminationGracePeriodSeconds, want.Spec.TerminationGracePeriodSeconds) {
			t.Errorf("grace period %v, inject's %v", *got.Spec.TerminationGracePeriodSeconds, *want.Spec.TerminationGracePeriodSeconds)
		}
		if tg := toolgateOf(got); tg.Ports[0].ContainerPort != 8081 {
			t.Errorf("toolgate's agent port %d, want the annotation's 8081", tg.Ports[0].ContainerPort)
		}
	})

	t.Run("up: a pod whose port speaks gRPC is refused with the reason", func(t *testing.T) {
		_, _, err := createPod(t, c, "shop", grpc, true)
		if err == nil || !strings.Contains(err.Error(), "speaks gRPC") || !strings.Contains(err.Error(), "the pod annotation toolgate.dev/port") {
			t.Errorf("want a refusal naming gRPC and the annotation, got %v", err)
		}
	})

	t.Run("hung: only the pod that asks for toolgate waits, for the configuration's timeout", func(t *testing.T) {
		webhook.stop()
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		// Accepts connections and never answers: a webhook that hangs.
		var mu sync.Mutex
		var held []net.Conn
		go func() {
			for {
				conn, err := ln.Accept()
				if err != nil {
					return
				}
				mu.Lock()
				held = append(held, conn)
				mu.Unlock()
			}
		}()
		t.Cleanup(func() {
			ln.Close()
			mu.Lock()
			for _, c := range held {
				c.Close()
			}
			mu.Unlock()
		})
		_, fast, err := createPod(t, c, "shop", plain, true)
		if err != nil || fast > 2*time.Second {
			t.Errorf("a pod without the annotation took %v (%v) with the webhook hung", fast, err)
		}
		_, slow, err := createPod(t, c, "shop", asks, true)
		if err == nil || slow < 2500*time.Millisecond || slow > 10*time.Second {
			t.Errorf("a pod that asks for toolgate, with the webhook hung: %v after %v; want refused after about 3 s", err, slow)
		}
		t.Logf("webhook hung: a pod without the annotation in %v, one that asks refused in %v", fast.Round(time.Millisecond), slow.Round(time.Millisecond))
	})
}
