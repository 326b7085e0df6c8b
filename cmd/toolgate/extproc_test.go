package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

const extprocPolicy = `version: 1
server:
  admin_listen: "127.0.0.1:0"
upstreams:
  legacy: {url: "http://127.0.0.1:9"}
tools:
  get_doc:
    description: Get a document.
    upstream: legacy
    args: {type: object, required: [id], properties: {id: {type: string}}}
    request: {method: GET, path: "/docs/{id}"}
`

func writePolicy(t *testing.T, doc string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestExtprocServesAndStops runs the processor as `toolgate extproc` does,
// with a context in place of signals: calls over gRPC, health, the admin
// port, and a graceful stop.
func TestExtprocServesAndStops(t *testing.T) {
	load := extprocLoader(writePolicy(t, extprocPolicy))
	snap, err := load()
	if err != nil {
		t.Fatal(err)
	}
	srv, err := newServer(snap, load, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ep, err := listenExtproc(srv, extprocOptions{listen: "127.0.0.1:0", admin: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- ep.serve(ctx, 0, 5*time.Second) }()

	conn, err := grpc.NewClient(ep.addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hc, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil || hc.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v %v", hc, err)
	}

	stream, err := extprocv3.NewExternalProcessorClient(conn).Process(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	headers := &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
		{Key: ":method", RawValue: []byte("GET")},
		{Key: ":path", RawValue: []byte("/nowhere")},
		{Key: "x-request-id", RawValue: []byte("cmd-1")},
	}}
	if err := stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: &extprocv3.HttpHeaders{Headers: headers, EndOfStream: true},
	}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	ir := resp.GetImmediateResponse()
	if ir == nil || ir.GetStatus().GetCode() != 404 || !bytes.Contains(ir.GetBody(), []byte(`"status":"not_found"`)) {
		t.Fatalf("unknown route: %v", resp)
	}
	_ = stream.CloseSend()
	for {
		if _, err := stream.Recv(); err != nil {
			break
		}
	}

	admin := "http://" + ep.adminAddr()
	for path, want := range map[string]string{
		"/readyz":  "",
		"/metrics": `toolgate_tool_calls_total{caller="unknown",status="not_found",tool="unknown"} 1`,
	} {
		res, err := http.Get(admin + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK || !strings.Contains(string(body), want) {
			t.Errorf("GET %s: %d, want %q in:\n%.2000s", path, res.StatusCode, want, body)
		}
	}

	cancel()
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the processor did not stop")
	}
}

// TestExtprocRefusesAmbiguousRoutes: under ext_proc every call is
// identified by its route, so a policy whose routes are ambiguous does not
// start, transparent mode or not.
func TestExtprocRefusesAmbiguousRoutes(t *testing.T) {
	doc := extprocPolicy + `  get_page:
    description: Get a page.
    upstream: legacy
    args: {type: object, required: [n], properties: {n: {type: string}}}
    request: {method: GET, path: "/docs/{n}"}
`
	var stdout, stderr bytes.Buffer
	code := run([]string{"extproc", "-config", writePolicy(t, doc), "-listen", "127.0.0.1:0", "-watch=false"}, &stdout, &stderr)
	if code != 1 {
		t.Fatalf("exit %d, want 1; stderr: %s", code, stderr.String())
	}
	if !strings.Contains(stderr.String(), "ambiguous routes") || !strings.Contains(stderr.String(), "get_doc and get_page") {
		t.Errorf("stderr: %s", stderr.String())
	}
}
