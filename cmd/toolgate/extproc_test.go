package main

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/toolgate/toolgate/internal/testkit/policytest"
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

// extprocCall is one call driven through the processor the way Envoy
// drives it: request headers (a GET, no body), then the backend's answer.
type extprocCall struct {
	t      *testing.T
	stream extprocv3.ExternalProcessor_ProcessClient
}

// startExtprocCall runs the request phase of GET path on conn and returns
// the call and the processor's answer to it.
func startExtprocCall(t *testing.T, conn *grpc.ClientConn, path string) (*extprocCall, *extprocv3.ProcessingResponse) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stream, err := extprocv3.NewExternalProcessorClient(conn).Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c := &extprocCall{t: t, stream: stream}
	return c, c.roundTrip(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: &extprocv3.HttpHeaders{Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
			{Key: ":method", RawValue: []byte("GET")},
			{Key: ":path", RawValue: []byte(path)},
			{Key: ":authority", RawValue: []byte("legacy.local")},
			{Key: "x-request-id", RawValue: []byte("cmd-" + path)},
		}}, EndOfStream: true},
	}})
}

// roundTrip sends one message on the stream and returns the processor's answer.
func (c *extprocCall) roundTrip(m *extprocv3.ProcessingRequest) *extprocv3.ProcessingResponse {
	c.t.Helper()
	if err := c.stream.Send(m); err != nil {
		c.t.Fatalf("send: %v", err)
	}
	resp, err := c.stream.Recv()
	if err != nil {
		c.t.Fatalf("recv: %v", err)
	}
	return resp
}

// answer feeds the backend's JSON answer as Envoy would (headers, then the
// buffered body) and returns the envelope the agent gets, then ends the
// stream.
func (c *extprocCall) answer(code int, body string) string {
	c.t.Helper()
	c.roundTrip(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
		ResponseHeaders: &extprocv3.HttpHeaders{Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
			{Key: ":status", RawValue: []byte(strconv.Itoa(code))},
			{Key: "content-type", RawValue: []byte("application/json")},
			{Key: "content-length", RawValue: []byte(strconv.Itoa(len(body)))},
		}}},
	}})
	resp := c.roundTrip(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
		ResponseBody: &extprocv3.HttpBody{Body: []byte(body), EndOfStream: true},
	}})
	c.end()
	return string(resp.GetResponseBody().GetResponse().GetBodyMutation().GetBody())
}

// end closes the stream as Envoy does when the request is over.
func (c *extprocCall) end() {
	_ = c.stream.CloseSend()
	for {
		if _, err := c.stream.Recv(); err != nil {
			return
		}
	}
}

// immediateStatus is the HTTP status of a local answer, or 0 when the call
// went on to the backend.
func immediateStatus(resp *extprocv3.ProcessingResponse) int {
	if ir := resp.GetImmediateResponse(); ir != nil {
		return int(ir.GetStatus().GetCode())
	}
	return 0
}

func dialExtproc(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// TestExtprocServesAndStops runs the daemon `toolgate extproc` runs, with
// a context in place of signals: calls over gRPC, health, the admin port,
// and a graceful stop.
func TestExtprocServesAndStops(t *testing.T) {
	ts := startServer(t, writePolicy(t, extprocPolicy), serverOptions{extproc: true, grace: 5 * time.Second})
	conn := dialExtproc(t, ts.frontAddr())
	hc, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil || hc.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v %v", hc, err)
	}

	call, resp := startExtprocCall(t, conn, "/nowhere")
	ir := resp.GetImmediateResponse()
	if ir == nil || ir.GetStatus().GetCode() != 404 || !bytes.Contains(ir.GetBody(), []byte(`"status":"not_found"`)) {
		t.Fatalf("unknown route: %v", resp)
	}
	call.end()

	for path, want := range map[string]string{
		"/readyz":  "",
		"/metrics": `toolgate_tool_calls_total{caller="unknown",status="not_found",tool="unknown"} 1`,
	} {
		code, body := ts.get(path)
		if code != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("GET %s: %d, want %q in:\n%.2000s", path, code, want, body)
		}
	}
	if err := ts.stop(); err != nil {
		t.Fatalf("run: %v", err)
	}
}

// TestExtprocRefusesAmbiguousRoutes: under ext_proc every call is
// identified by its route, so a policy whose routes are ambiguous does not
// start, transparent mode or not, and the error says where.
func TestExtprocRefusesAmbiguousRoutes(t *testing.T) {
	doc := extprocPolicy + `  get_page:
    description: Get a page.
    upstream: legacy
    args: {type: object, required: [n], properties: {n: {type: string}}}
    request: {method: GET, path: "/docs/{n}"}
`
	path := writePolicy(t, doc)
	var stdout, stderr bytes.Buffer
	code := run([]string{"extproc", "-config", path, "-listen", "127.0.0.1:0", "-watch=false"}, &stdout, &stderr)
	if code != 1 {
		t.Fatalf("exit %d, want 1; stderr: %s", code, stderr.String())
	}
	if want := path + ":16:34: tools.get_page.request.path: route GET /docs/{n} is ambiguous with tool get_doc (GET /docs/{id})"; !strings.HasPrefix(stderr.String(), want) {
		t.Errorf("stderr: %s\nwant: %s…", stderr.String(), want)
	}
}

// withPageTool adds get_page, on its own route, to a policy.
const pageTool = `  get_page:
    description: Get a page.
    upstream: legacy
    args: {type: object, required: [n], properties: {n: {type: string}}}
    request: {method: GET, path: "/pages/{n}"}
`

// ambiguousTool adds a tool whose route is get_doc's.
const ambiguousTool = `  get_doc_again:
    description: Get a document again.
    upstream: legacy
    args: {type: object, required: [key], properties: {key: {type: string}}}
    request: {method: GET, path: "/docs/{key}"}
`

// TestExtprocReloadsThroughTheReloader: extproc reloads as serve does, on
// every trigger: a file change, SIGHUP and POST /-/reload. A good policy
// takes effect for new streams and counts a generation; a policy extproc
// cannot run (ambiguous routes) is refused on reload with file:line:col,
// and the running one stays.
func TestExtprocReloadsThroughTheReloader(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts serverOptions
		// trigger makes the daemon see the file written.
		trigger func(ts *testServer)
	}{
		{"a file change", serverOptions{watch: true}, func(*testServer) {}},
		{"SIGHUP", serverOptions{hup: make(chan os.Signal, 1)}, func(ts *testServer) { ts.opts.hup <- syscall.SIGHUP }},
		{"POST /-/reload", serverOptions{}, func(ts *testServer) { ts.postReload() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(policytest.RealTempDir(t), "policy.yaml")
			policytest.WriteFile(t, path, extprocPolicy)
			tc.opts.extproc = true
			ts := startServer(t, path, tc.opts)
			conn := dialExtproc(t, ts.frontAddr())
			call, resp := startExtprocCall(t, conn, "/pages/1")
			if code := immediateStatus(resp); code != http.StatusNotFound {
				t.Fatalf("a route of no tool: answered %d, want 404", code)
			}
			call.end()

			// A tool added: its route is a call now.
			policytest.ReplaceFile(t, path, extprocPolicy+pageTool)
			tc.trigger(ts)
			policytest.Eventually(t, "generation 2", func() bool { return ts.config().Generation == 2 })
			call, resp = startExtprocCall(t, conn, "/pages/1")
			if code := immediateStatus(resp); code != 0 {
				t.Fatalf("get_page after the reload: answered %d locally: %v", code, resp)
			}
			if env := call.answer(200, `{"page":1}`); !strings.Contains(env, `"status":"ok"`) || !strings.Contains(env, `"tool":"get_page"`) {
				t.Errorf("get_page after the reload: %s", env)
			}
			if g := ts.metric("toolgate_config_generation"); g != 2 {
				t.Errorf("toolgate_config_generation %v, want 2", g)
			}

			// Routes extproc cannot tell apart: refused, reported with
			// their position, the running policy stays.
			policytest.ReplaceFile(t, path, extprocPolicy+pageTool+ambiguousTool)
			tc.trigger(ts)
			policytest.Eventually(t, "the refused reload", func() bool {
				return ts.metric("toolgate_config_reloads_total", "result", "failure") >= 1
			})
			want := path + ":21:34: tools.get_doc_again.request.path: route GET /docs/{key} is ambiguous with tool get_doc (GET /docs/{id}): toolgate extproc identifies every call by its route"
			if code, body := ts.postReload(); code != http.StatusBadRequest || body != want+"\n" {
				t.Errorf("POST /-/reload: %d %q, want 400 %q", code, body, want)
			}
			if !strings.Contains(ts.logs.String(), want) {
				t.Errorf("the log does not report %q", want)
			}
			if ok := ts.metric("toolgate_config_last_reload_successful"); ok != 0 {
				t.Errorf("toolgate_config_last_reload_successful %v after a refused policy", ok)
			}
			if c := ts.config(); c.Generation != 2 || slices.Contains(c.Tools, "get_doc_again") {
				t.Errorf("after the refused policy: %+v", c)
			}
		})
	}
}
