package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ktypes "k8s.io/apimachinery/pkg/types"

	"github.com/toolgate/toolgate/internal/testkit/sidecartest"
)

// testCA is a certificate authority for the webhook's serving
// certificates, as cert-manager would run one.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "toolgate test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool}
}

// issue writes a serving certificate for 127.0.0.1 with the serial, and
// its key, to the files.
func (ca *testCA) issue(t *testing.T, serial int64, certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: "toolgate-webhook.toolgate-system.svc"},
		DNSNames:     []string{"toolgate-webhook.toolgate-system.svc"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	writeAtomically(t, certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	writeAtomically(t, keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
}

// writeAtomically replaces a file by a rename, as the kubelet's symlink
// swap replaces a mounted Secret's files.
func writeAtomically(t *testing.T, name string, data []byte) {
	t.Helper()
	tmp := name + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, name); err != nil {
		t.Fatal(err)
	}
}

// webhookServer runs `toolgate-kube webhook` on a loopback port until the test
// ends.
type webhookServer struct {
	url      string
	client   *http.Client
	certFile string
	keyFile  string
}

func startWebhook(t *testing.T, ca *testCA) *webhookServer {
	t.Helper()
	dir := t.TempDir()
	w := &webhookServer{certFile: filepath.Join(dir, "tls.crt"), keyFile: filepath.Join(dir, "tls.key")}
	ca.issue(t, 100, w.certFile, w.keyFile)
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	o := webhookOptions{
		listen: "127.0.0.1:0", certFile: w.certFile, keyFile: w.keyFile,
		// As the webhook's flags set them: defaults under the pods'
		// annotations.
		opts: injectOptions{image: testImage},
	}
	go func() { done <- serveWebhook(ctx, o, slog.New(slog.DiscardHandler), ready) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("webhook stopped with %v", err)
		}
	})
	select {
	case addr := <-ready:
		w.url = "https://" + addr
	case err := <-done:
		t.Fatalf("webhook did not start: %v", err)
	}
	// A new connection per request, so every request makes a handshake
	// and sees the certificate of the moment.
	w.client = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: ca.pool},
		DisableKeepAlives: true,
	}}
	return w
}

// review sends an AdmissionReview as the API server does and returns the
// response.
func (w *webhookServer) review(t *testing.T, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	t.Helper()
	body, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request:  req,
	})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := w.client.Post(w.url+"/mutate", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("HTTP %d: %s", resp.StatusCode, data)
	}
	var out admissionv1.AdmissionReview
	unmarshalStrict(t, data, &out)
	if out.APIVersion != "admission.k8s.io/v1" || out.Kind != "AdmissionReview" || out.Response == nil {
		t.Fatalf("not an admission.k8s.io/v1 AdmissionReview response: %s", data)
	}
	if out.Response.UID != req.UID {
		t.Errorf("response uid %q, want the request's %q", out.Response.UID, req.UID)
	}
	return out.Response
}

// podRequest is the AdmissionRequest of a pod's creation, with the pod as
// the API server sends it.
func podRequest(t *testing.T, uid string, podJSON []byte) *admissionv1.AdmissionRequest {
	t.Helper()
	return &admissionv1.AdmissionRequest{
		UID:       ktypes.UID("uid-" + strings.ReplaceAll(uid, " ", "-")),
		Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
		Resource:  metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
		Namespace: "shop",
		Operation: admissionv1.Create,
		Object:    runtime.RawExtension{Raw: podJSON},
	}
}

// templatePod makes a pod out of a workload of testdata/inject, as its
// ReplicaSet would create it, with extra annotations.
func templatePod(t *testing.T, file, key string, annotations map[string]string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "inject", file))
	if err != nil {
		t.Fatal(err)
	}
	tmpl, ok := decodeOutput(t, string(data)).templates[key]
	if !ok {
		t.Fatalf("no %s in %s", key, file)
	}
	pod := corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: tmpl.ObjectMeta,
		Spec:       tmpl.Spec,
	}
	pod.GenerateName = strings.ToLower(strings.Split(key, "/")[1]) + "-7d4b9c-"
	pod.Namespace = "shop"
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	for k, v := range annotations {
		pod.Annotations[k] = v
	}
	js, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// applyPatch applies a response's JSON patch to the pod with
// evanphx/json-patch, as the API server applies it.
func applyPatch(t *testing.T, podJSON []byte, resp *admissionv1.AdmissionResponse) []byte {
	t.Helper()
	if resp.PatchType == nil || *resp.PatchType != admissionv1.PatchTypeJSONPatch {
		t.Fatalf("patch type %v, want JSONPatch", resp.PatchType)
	}
	patch, err := jsonpatch.DecodePatch(resp.Patch)
	if err != nil {
		t.Fatalf("the patch does not decode: %v\n%s", err, resp.Patch)
	}
	out, err := patch.Apply(podJSON)
	if err != nil {
		t.Fatalf("the patch does not apply: %v\n%s", err, resp.Patch)
	}
	return out
}

func TestWebhookInjectsAnnotatedPods(t *testing.T) {
	w := startWebhook(t, newTestCA(t))
	cases := []struct {
		name, file, key string
		annotations     map[string]string
		want            sidecartest.Want
		container       string
	}{
		{
			name: "a pod with an init container, several containers and its policy named", file: "orders.yaml", key: "Deployment/orders-api",
			annotations: map[string]string{annotationInject: "true", annotationContainer: "api", annotationPort: "http", annotationPolicy: "orders-policy"},
			want:        sidecartest.Want{Image: testImage, Policy: "orders-policy", AgentPort: 8080, AdminPort: 9090, AppPort: 8000},
			container:   "api",
		},
		{
			name: "a pod without init containers or volumes, its only port found", file: "numeric.yaml", key: "Deployment/inventory",
			annotations: map[string]string{annotationInject: "true"},
			want:        sidecartest.Want{Image: testImage, Policy: defaultPolicy, AgentPort: 8080, AdminPort: 9090, AppPort: 5000},
			container:   "inventory",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			podJSON := templatePod(t, c.file, c.key, c.annotations)
			resp := w.review(t, podRequest(t, c.name, podJSON))
			if !resp.Allowed {
				t.Fatalf("refused: %+v", resp.Result)
			}
			patched := applyPatch(t, podJSON, resp)
			var pod corev1.Pod
			unmarshalStrict(t, patched, &pod)
			sidecartest.Check(t, pod.Spec, c.want)
			if _, i := sidecartest.Sidecar(t, pod.Spec); i != 0 {
				t.Errorf("toolgate is init container %d, want 0", i)
			}
			if want := fmt.Sprintf("upstream url http://127.0.0.1:%d", c.want.AppPort); len(resp.Warnings) == 0 || !strings.Contains(resp.Warnings[0], want) {
				t.Errorf("no warning about the policy's requirements: %v", resp.Warnings)
			}

			// The same pod spec as toolgate-kube inject's typed path.
			var before corev1.Pod
			unmarshalStrict(t, podJSON, &before)
			plan, err := planSidecar(&before.Spec, before.Annotations, injectOptions{image: testImage, agentPort: 8080, adminPort: 9090})
			if err != nil {
				t.Fatal(err)
			}
			want := before.Spec.DeepCopy()
			plan.apply(want)
			if !equality.Semantic.DeepEqual(pod.Spec, *want) {
				t.Errorf("the webhook's pod and inject's differ:\n got %+v\nwant %+v", pod.Spec, *want)
			}

			// A pod created again from the patched spec (a ReplicaSet of
			// a workload injected by toolgate-kube inject) is left alone.
			again := w.review(t, podRequest(t, c.name+" again", patched))
			if !again.Allowed || len(again.Patch) != 0 {
				t.Errorf("an injected pod was patched again: %s", again.Patch)
			}
		})
	}
}

func TestWebhookKeepsFieldsItDoesNotKnow(t *testing.T) {
	w := startWebhook(t, newTestCA(t))
	// A pod from a newer API server, with a field this build's types lack.
	pod := []byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"generateName":"x-","annotations":{"toolgate.dev/inject":"true"}},` +
		`"spec":{"futureField":{"a":1},"containers":[{"name":"app","image":"app:1","futureContainerField":true,"ports":[{"containerPort":8000}]}],` +
		`"initContainers":[{"name":"setup","image":"setup:1","futureContainerField":"kept"}],"volumes":[{"name":"data","emptyDir":{}}]}}`)
	resp := w.review(t, podRequest(t, "future", pod))
	if !resp.Allowed {
		t.Fatalf("refused: %+v", resp.Result)
	}
	patched := applyPatch(t, pod, resp)
	var raw struct {
		Spec struct {
			FutureField    map[string]int   `json:"futureField"`
			InitContainers []map[string]any `json:"initContainers"`
			Containers     []map[string]any `json:"containers"`
			Volumes        []map[string]any `json:"volumes"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(patched, &raw); err != nil {
		t.Fatal(err)
	}
	s := raw.Spec
	if s.FutureField["a"] != 1 || s.Containers[0]["futureContainerField"] != true {
		t.Errorf("fields unknown to the webhook were lost: %s", patched)
	}
	if len(s.InitContainers) != 2 || s.InitContainers[0]["name"] != "toolgate" || s.InitContainers[1]["futureContainerField"] != "kept" {
		t.Errorf("init containers %v: want toolgate, then setup as it was", s.InitContainers)
	}
	if len(s.Volumes) != 2 || s.Volumes[0]["name"] != "data" {
		t.Errorf("volumes %v: want data, then toolgate's", s.Volumes)
	}
}

func TestWebhookLeavesOtherRequestsAlone(t *testing.T) {
	w := startWebhook(t, newTestCA(t))
	plain := templatePod(t, "numeric.yaml", "Deployment/inventory", nil)
	optOut := templatePod(t, "numeric.yaml", "Deployment/inventory", map[string]string{annotationInject: "false"})
	annotated := templatePod(t, "numeric.yaml", "Deployment/inventory", map[string]string{annotationInject: "true"})
	update := podRequest(t, "update", annotated)
	update.Operation = admissionv1.Update
	update.OldObject = runtime.RawExtension{Raw: plain}
	svc := podRequest(t, "service", []byte(`{"apiVersion":"v1","kind":"Service","metadata":{"name":"s"}}`))
	svc.Kind = metav1.GroupVersionKind{Version: "v1", Kind: "Service"}
	binding := podRequest(t, "binding", annotated)
	binding.SubResource = "binding"
	for name, req := range map[string]*admissionv1.AdmissionRequest{
		"a pod without the annotation":      podRequest(t, "plain", plain),
		"a pod that says false":             podRequest(t, "opt out", optOut),
		"an update of an annotated pod":     update,
		"a Service":                         svc,
		"a subresource of an annotated pod": binding,
	} {
		t.Run(name, func(t *testing.T) {
			resp := w.review(t, req)
			if !resp.Allowed || len(resp.Patch) != 0 || resp.PatchType != nil {
				t.Errorf("want allowed without a patch, got %+v", resp)
			}
		})
	}
}

func TestWebhookRefusesPodsItCannotServe(t *testing.T) {
	w := startWebhook(t, newTestCA(t))
	for name, c := range map[string]struct {
		pod []byte
		msg string
	}{
		"a port the pod does not have": {
			templatePod(t, "orders.yaml", "Deployment/orders-api", map[string]string{annotationInject: "true", annotationContainer: "api", annotationPort: "grpc"}),
			`container api has no port named "grpc"`,
		},
		"two candidate containers": {
			templatePod(t, "orders.yaml", "Deployment/orders-api", map[string]string{annotationInject: "true"}),
			"2 containers could be the application",
		},
		"an object that is no pod": {[]byte(`{"kind":"Pod","spec":{"containers":"api"}}`), "cannot read the pod"},
	} {
		t.Run(name, func(t *testing.T) {
			resp := w.review(t, podRequest(t, name, c.pod))
			if resp.Allowed || resp.Result == nil || !strings.Contains(resp.Result.Message, c.msg) {
				t.Errorf("want refused with %q, got %+v", c.msg, resp)
			}
			if len(resp.Patch) != 0 {
				t.Error("a refusal carries a patch")
			}
		})
	}
}

func TestWebhookRejectsWhatIsNotAReview(t *testing.T) {
	w := startWebhook(t, newTestCA(t))
	for name, c := range map[string]struct {
		contentType, body string
		code              int
	}{
		"a form":                 {"application/x-www-form-urlencoded", "a=b", http.StatusUnsupportedMediaType},
		"JSON without a request": {"application/json", `{"kind":"AdmissionReview"}`, http.StatusBadRequest},
		"broken JSON":            {"application/json", `{"request":`, http.StatusBadRequest},
	} {
		t.Run(name, func(t *testing.T) {
			resp, err := w.client.Post(w.url+"/mutate", c.contentType, strings.NewReader(c.body))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != c.code {
				t.Errorf("HTTP %d, want %d", resp.StatusCode, c.code)
			}
		})
	}
	resp, err := w.client.Get(w.url + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/healthz: HTTP %d", resp.StatusCode)
	}
}

// servingSerial makes a TLS handshake and returns the serial of the
// certificate the webhook serves.
func (w *webhookServer) servingSerial(t *testing.T, pool *x509.CertPool) int64 {
	t.Helper()
	conn, err := tls.Dial("tcp", strings.TrimPrefix(w.url, "https://"), &tls.Config{RootCAs: pool})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
}

func TestWebhookReloadsItsCertificate(t *testing.T) {
	ca := newTestCA(t)
	w := startWebhook(t, ca)
	if got := w.servingSerial(t, ca.pool); got != 100 {
		t.Fatalf("serving serial %d, want 100", got)
	}
	// cert-manager renews: the Secret's files are replaced.
	ca.issue(t, 101, w.certFile, w.keyFile)
	if got := w.servingSerial(t, ca.pool); got != 101 {
		t.Errorf("after the renewal the webhook serves serial %d, want 101", got)
	}
	// A key that does not match (a half-finished update) keeps the last
	// good pair.
	other := filepath.Join(t.TempDir(), "other")
	ca.issue(t, 102, other+".crt", other+".key")
	key, err := os.ReadFile(other + ".key")
	if err != nil {
		t.Fatal(err)
	}
	writeAtomically(t, w.keyFile, key)
	if got := w.servingSerial(t, ca.pool); got != 101 {
		t.Errorf("with a mismatched key the webhook serves serial %d, want the last good 101", got)
	}
	ca.issue(t, 103, w.certFile, w.keyFile)
	if got := w.servingSerial(t, ca.pool); got != 103 {
		t.Errorf("after the pair is whole again the webhook serves serial %d, want 103", got)
	}
}

func TestWebhookNeedsItsCertificate(t *testing.T) {
	var stderr bytes.Buffer
	dir := t.TempDir()
	code := run([]string{"webhook", "-image", testImage, "-listen", "127.0.0.1:0", "-tls-cert", filepath.Join(dir, "tls.crt"), "-tls-key", filepath.Join(dir, "tls.key")}, io.Discard, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), "tls.crt") {
		t.Errorf("exit %d, stderr %q: want 1 naming the missing certificate", code, stderr.String())
	}
	stderr.Reset()
	if code := run([]string{"webhook"}, io.Discard, &stderr); code != 2 || !strings.Contains(stderr.String(), "-image is required") {
		t.Errorf("exit %d, stderr %q: want 2 and -image is required", code, stderr.String())
	}
}

// TestWebhookAnnotationsAreDocumented keeps docs/kubernetes.md naming
// every annotation inject and the webhook read.
func TestWebhookAnnotationsAreDocumented(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "docs", "kubernetes.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range annotations() {
		if !strings.Contains(string(data), a) {
			t.Errorf("docs/kubernetes.md does not document the annotation %s", a)
		}
	}
}
