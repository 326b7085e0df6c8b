package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"os/signal"
	"syscall"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/toolgate/toolgate/internal/boundedio"
)

// maxAdmissionBytes bounds an AdmissionReview request: the API server
// stores objects of at most 1.5 MiB, and a review carries one or two.
const maxAdmissionBytes = 8 << 20

// webhookOptions are the flags of `toolgate-kube webhook`.
type webhookOptions struct {
	listen            string
	certFile, keyFile string
	level             string
	opts              injectOptions
}

func runWebhook(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("toolgate-kube webhook", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, `Usage of toolgate-kube webhook:
  toolgate-kube webhook -image IMAGE [-listen :8443] [-tls-cert FILE] [-tls-key FILE] [flags]

A mutating admission webhook (admission.k8s.io/v1, POST /mutate over TLS) that adds the toolgate
sidecar, as toolgate-kube inject does, to every pod created with the annotation
toolgate.dev/inject: "true". The annotations toolgate.dev/policy, /container, /port, /agent-port,
/admin-port, /env-secret and /file-secret choose per pod; -policy, -agent-port and -admin-port are
the defaults of theirs. A pod that asks for toolgate and cannot get it (no such port, a port taken,
a port that speaks gRPC or TLS) is refused with the reason and what to change. The certificate and
key are read again when their files change (a mounted Secret). GET /healthz answers on the same
port. deploy/webhook holds the manifests.

`)
		fs.PrintDefaults()
	}
	var o webhookOptions
	fs.StringVar(&o.listen, "listen", ":8443", "HTTPS address of the webhook")
	fs.StringVar(&o.certFile, "tls-cert", "/etc/toolgate-webhook/tls.crt", "certificate file (PEM), re-read when it changes")
	fs.StringVar(&o.keyFile, "tls-key", "/etc/toolgate-webhook/tls.key", "private key file (PEM), re-read when it changes")
	fs.StringVar(&o.level, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&o.opts.image, "image", "", "toolgate's image for the sidecars (required)")
	fs.StringVar(&o.opts.fallback.policy, "policy", "", "policy ConfigMap of pods without "+annotationPolicy+" (default "+defaultPolicy+")")
	agent := fs.Int("agent-port", defaultAgentPort, "toolgate's agent port in pods without "+annotationAgentPort)
	admin := fs.Int("admin-port", defaultAdminPort, "toolgate's admin port in pods without "+annotationAdminPort)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	o.opts.fallback.agentPort, o.opts.fallback.adminPort = int32(*agent), int32(*admin)
	if o.opts.image == "" {
		fmt.Fprintln(stderr, "toolgate-kube webhook: -image is required")
		return 2
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.level)); err != nil {
		fmt.Fprintf(stderr, "toolgate-kube webhook: bad -log-level: %v\n", err)
		return 2
	}
	logger := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level}))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := serveWebhook(ctx, o, logger, nil); err != nil {
		fmt.Fprintf(stderr, "toolgate-kube webhook: %v\n", err)
		return 1
	}
	return 0
}

// serveWebhook serves the webhook until ctx ends; ready, when not nil,
// receives the listening address.
func serveWebhook(ctx context.Context, o webhookOptions, logger *slog.Logger, ready chan<- string) error {
	certs, err := newCertReloader(o.certFile, o.keyFile, logger)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("POST /mutate", &admissionHandler{opts: o.opts, logger: logger})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		IdleTimeout:       120 * time.Second,
		TLSConfig:         &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: certs.getCertificate},
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	done := make(chan error, 1)
	go func() { done <- srv.ServeTLS(ln, "", "") }()
	logger.Info("toolgate-kube webhook started", "version", version, "listen", ln.Addr().String(), "image", o.opts.image)
	if ready != nil {
		ready <- ln.Addr().String()
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = srv.Shutdown(sctx)
	logger.Info("toolgate-kube webhook stopped")
	return err
}

// admissionHandler answers AdmissionReviews of pods.
type admissionHandler struct {
	opts   injectOptions
	logger *slog.Logger
}

func (h *admissionHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		http.Error(w, "want Content-Type: application/json", http.StatusUnsupportedMediaType)
		return
	}
	body, err := boundedio.ReadAll(r.Body, maxAdmissionBytes)
	if err != nil {
		http.Error(w, "cannot read the request body", http.StatusBadRequest)
		return
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil || review.Request == nil {
		http.Error(w, "not an AdmissionReview with a request", http.StatusBadRequest)
		return
	}
	out := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Response: h.review(review.Request),
	}
	out.Response.UID = review.Request.UID
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

// review decides on one request: pods created with the annotation get the
// sidecar as a JSON patch; every other request is allowed unchanged.
func (h *admissionHandler) review(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	allow := &admissionv1.AdmissionResponse{Allowed: true}
	if req.Kind.Group != "" || req.Kind.Kind != "Pod" || req.Operation != admissionv1.Create || req.SubResource != "" {
		return allow
	}
	var pod corev1.Pod
	if err := json.Unmarshal(req.Object.Raw, &pod); err != nil {
		return deny(http.StatusBadRequest, fmt.Sprintf("toolgate-kube webhook: cannot read the pod: %v", err))
	}
	name := pod.Name
	if name == "" {
		name = pod.GenerateName + "*"
	}
	log := h.logger.With("namespace", req.Namespace, "pod", name)
	if pod.Annotations[annotationInject] != "true" {
		log.Debug("not asked for toolgate")
		return allow
	}
	opts := h.opts
	opts.webhook = true
	plan, err := planSidecar(&pod.Spec, pod.Annotations, opts)
	if errors.Is(err, errAlreadyInjected) {
		log.Info("pod has toolgate already")
		return allow
	}
	if err != nil {
		log.Warn("refused a pod that asks for toolgate", "err", err.Error())
		return deny(http.StatusUnprocessableEntity, fmt.Sprintf("toolgate-kube webhook: pod asks for toolgate (%s: \"true\") but cannot have it: %v", annotationInject, err))
	}
	patch, err := json.Marshal(plan.patch(&pod.Spec))
	if err != nil {
		return deny(http.StatusInternalServerError, fmt.Sprintf("toolgate-kube webhook: %v", err))
	}
	log.Info("injected toolgate", "app", plan.app.String(), "policy", plan.opts.policy)
	pt := admissionv1.PatchTypeJSONPatch
	return &admissionv1.AdmissionResponse{
		Allowed:   true,
		Patch:     patch,
		PatchType: &pt,
		// The API server may cut warnings over 256 characters; this one
		// stays short, the full reasoning is in docs/kubernetes.md.
		Warnings: []string{fmt.Sprintf(`toolgate: the policy in ConfigMap %s must call the application at an upstream url http://127.0.0.1:%d`,
			plan.opts.policy, plan.app.number)},
	}
}

func deny(code int32, msg string) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{
		Allowed: false,
		Result:  &metav1.Status{Status: metav1.StatusFailure, Code: code, Message: msg},
	}
}

// patchOp is one RFC 6902 operation.
type patchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// patch renders the plan as JSON patch operations on a pod with this
// spec: what apply does to the typed spec, as the few additions it is.
// Fields of the pod that the API's Go types do not know are never
// rewritten.
func (p *sidecarPlan) patch(spec *corev1.PodSpec) []patchOp {
	var ops []patchOp
	if len(spec.InitContainers) == 0 {
		ops = append(ops, patchOp{Op: "add", Path: "/spec/initContainers", Value: []corev1.Container{p.container}})
	} else {
		ops = append(ops, patchOp{Op: "add", Path: "/spec/initContainers/0", Value: p.container})
	}
	if len(spec.Volumes) == 0 {
		ops = append(ops, patchOp{Op: "add", Path: "/spec/volumes", Value: p.volumes})
	} else {
		for _, v := range p.volumes {
			ops = append(ops, patchOp{Op: "add", Path: "/spec/volumes/-", Value: v})
		}
	}
	if p.grace != nil {
		ops = append(ops, patchOp{Op: "add", Path: "/spec/terminationGracePeriodSeconds", Value: *p.grace})
	}
	return ops
}
