package proxy

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/internal/testkit/proxytest"
)

// newTraceCore is a core on accessPolicy in front of backend, which the
// test closes with it.
func newTraceCore(t *testing.T, backend http.Handler, opts Options) *Core {
	t.Helper()
	srv := httptest.NewServer(backend)
	t.Cleanup(srv.Close)
	doc := strings.NewReplacer("{{url}}", srv.URL, "{{from}}", "header", "{{default}}", "allow").Replace(accessPolicy)
	return newTestCore(t, doc, opts)
}

const agentTrace = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

func TestCallsAreSpansThatContinueTheAgentsTrace(t *testing.T) {
	rec := &proxytest.HeaderRecorder{}
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	logs := &proxytest.LogBuffer{}
	core := newTraceCore(t, rec, Options{TracerProvider: tp, Logger: slog.New(slog.NewJSONHandler(logs, nil))})

	res := core.Call(context.Background(), &Request{Tool: "send", Body: []byte(`{}`), IdempotencyKey: "k", TraceParent: agentTrace, Caller: "ops-agent"})
	if res.Envelope.Status != contracts.StatusOK {
		t.Fatalf("%+v", res.Envelope)
	}
	spans := exp.GetSpans()
	byName := map[string]tracetest.SpanStub{}
	for _, s := range spans {
		byName[s.Name] = s
	}
	callSpan, ok := byName["toolgate.call"]
	if !ok {
		t.Fatalf("no call span among %d spans", len(spans))
	}
	if got := callSpan.SpanContext.TraceID().String(); got != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("trace id = %s, the agent's trace was not continued", got)
	}
	if callSpan.Parent.SpanID().String() != "00f067aa0ba902b7" {
		t.Errorf("parent = %s", callSpan.Parent.SpanID())
	}
	attrs := map[string]string{}
	for _, a := range callSpan.Attributes {
		attrs[string(a.Key)] = a.Value.String()
	}
	for k, want := range map[string]string{"toolgate.tool": "send", "toolgate.status": "ok", "toolgate.caller": "ops-agent",
		"toolgate.retryable": "false", "toolgate.side_effect": "done", "toolgate.replayed": "false", "toolgate.upstream": "svc", "http.response.status_code": "200"} {
		if attrs[k] != want {
			t.Errorf("attribute %s = %q, want %q", k, attrs[k], want)
		}
	}
	for _, name := range []string{"toolgate.validate", "toolgate.idempotency.claim", "toolgate.upstream.attempt"} {
		s, ok := byName[name]
		if !ok {
			t.Errorf("no %s span", name)
			continue
		}
		if s.Parent.SpanID() != callSpan.SpanContext.SpanID() {
			t.Errorf("%s is not a child of the call span", name)
		}
	}
	attempt := byName["toolgate.upstream.attempt"]
	sent := rec.Headers()[0].Get("Traceparent")
	if !strings.Contains(sent, "4bf92f3577b34da6a3ce929d0e0e4736") || !strings.Contains(sent, attempt.SpanContext.SpanID().String()) {
		t.Errorf("backend got traceparent %q, want the attempt span %s", sent, attempt.SpanContext.SpanID())
	}
	if line := logs.Lines(t)[0]; line["trace_id"] != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("log line trace_id = %v", line["trace_id"])
	}
}

func TestWithoutTracingTheAgentsTraceparentPassesThrough(t *testing.T) {
	rec := &proxytest.HeaderRecorder{}
	front := serveCore(t, newTraceCore(t, rec, Options{}))
	req, _ := http.NewRequest("POST", front.URL+"/v1/tools/search", strings.NewReader(`{}`))
	req.Header.Set("Traceparent", agentTrace)
	resp, err := front.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := rec.Headers(); len(got) != 1 || got[0].Get("Traceparent") != agentTrace {
		t.Errorf("backend got %q", got)
	}
}

func TestTraceContextValidation(t *testing.T) {
	for _, tc := range []struct {
		name   string
		parent string
		want   bool
	}{
		{"a version 00 traceparent", agentTrace, true},
		{"an unsampled one", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", true},
		{"a higher version with more fields", "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-abc-0", true},
		{"a higher version of exactly 55 characters", "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", true},
		{"empty", "", false},
		{"upper case hex", "00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01", false},
		{"an all-zero trace id", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", false},
		{"an all-zero parent id", "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", false},
		{"version ff", "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", false},
		{"version 00 with more fields", agentTrace + "-00", false},
		{"a higher version with a field not after a dash", "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x", false},
		{"a short trace id", "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01", false},
		{"dashes in the wrong places", "00-4bf92f3577b34da6a3ce929d0e0e4736000f067aa0ba902b7-01-", false},
		{"not hex", "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01", false},
		{"CR LF and a header after it", agentTrace + "\r\nX-Injected: 1", false},
		{"a folded header joined with a space", agentTrace + " X-Injected: 1", false},
		{"a NUL", agentTrace[:54] + "\x00", false},
		{"a higher version with CR LF after it", "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-\r\nX: 1", false},
		{"a higher version over 256 characters", "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-" + strings.Repeat("a", 202), false},
	} {
		t.Run("traceparent: "+tc.name, func(t *testing.T) {
			if got := ValidTraceParent(tc.parent); got != tc.want {
				t.Fatalf("ValidTraceParent(%q) = %v, want %v", tc.parent, got, tc.want)
			}
		})
	}
	for _, tc := range []struct {
		name  string
		state string
		want  bool
	}{
		{"empty", "", true},
		{"one member", "congo=t61rcWkgMzE", true},
		{"several members with spaces and an empty one", "rojo=00f067aa0ba902b7, congo=t61rcWkgMzE,,tenant@vendor=x", true},
		{"32 members", strings.Repeat("a=b,", 31) + "a=b", true},
		{"33 members", strings.Repeat("a=b,", 32) + "a=b", false},
		{"over 512 bytes", "a=" + strings.Repeat("b", 511), false},
		{"CR LF", "a=b\r\nX-Injected: 1", false},
		{"a tab", "a=b\tc", false},
		{"a non-ASCII byte", "a=é", false},
		{"a member without =", "a=b,c", false},
		{"a member with two =", "a=b=c", false},
		{"an empty key", "=b", false},
	} {
		t.Run("tracestate: "+tc.name, func(t *testing.T) {
			if got := validTraceState(tc.state); got != tc.want {
				t.Fatalf("validTraceState(%q) = %v, want %v", tc.state, got, tc.want)
			}
		})
	}
}

// TestInvalidTraceContextIsNotForwarded: whatever an agent puts in its
// trace context (CR LF included, which a backend would read as a header of
// its own, and which an https:// transport refuses before dialing), the
// call runs and the backend sees only a valid traceparent, or none.
func TestInvalidTraceContextIsNotForwarded(t *testing.T) {
	const injected = "\r\nX-Injected: 1"
	for _, tracingOn := range []bool{false, true} {
		for _, tc := range []struct {
			name          string
			parent, state string
			wantParent    bool // the agent's traceparent reaches the backend (with tracing off: as it came)
			wantState     string
		}{
			{"a valid traceparent and tracestate", agentTrace, "congo=t61rcWkgMzE", true, "congo=t61rcWkgMzE"},
			{"CR LF in traceparent", agentTrace + injected, "congo=t61rcWkgMzE", false, ""},
			{"garbage in traceparent", "not-a-trace", "", false, ""},
			{"CR LF in tracestate", agentTrace, "congo=t61rcWkgMzE" + injected, true, ""},
			{"a megabyte of tracestate", agentTrace, "a=" + strings.Repeat("b", 1<<20), true, ""},
		} {
			name := fmt.Sprintf("tracing %v: %s", map[bool]string{false: "off", true: "on"}[tracingOn], tc.name)
			t.Run(name, func(t *testing.T) {
				backend := &proxytest.HeaderRecorder{}
				opts := Options{}
				if tracingOn {
					opts.TracerProvider = sdktrace.NewTracerProvider(sdktrace.WithSyncer(tracetest.NewInMemoryExporter()))
				}
				core := newTraceCore(t, backend, opts)
				res := core.Call(context.Background(), &Request{Tool: "search", Body: []byte(`{}`), TraceParent: tc.parent, TraceState: tc.state})
				if res.Envelope.Status != contracts.StatusOK {
					t.Fatalf("the call failed: %+v", res.Envelope)
				}
				got := backend.Headers()
				if len(got) != 1 {
					t.Fatalf("backend got %d requests", len(got))
				}
				h := got[0]
				if h.Get("X-Injected") != "" {
					t.Fatalf("a header was injected into the backend request: %.300v", h)
				}
				parent := h.Get("Traceparent")
				switch {
				case parent != "" && !ValidTraceParent(parent):
					t.Errorf("backend got an invalid traceparent %.100q", parent)
				case tc.wantParent && !strings.Contains(parent, "4bf92f3577b34da6a3ce929d0e0e4736"):
					t.Errorf("backend got traceparent %q, want the agent's trace continued", parent)
				case !tc.wantParent && !tracingOn && parent != "":
					t.Errorf("backend got traceparent %q, want none", parent)
				case !tc.wantParent && strings.Contains(parent, "4bf92f3577b34da6a3ce929d0e0e4736"):
					t.Errorf("backend got traceparent %q: the invalid agent trace was continued", parent)
				}
				if state := h.Get("Tracestate"); state != tc.wantState {
					t.Errorf("backend got tracestate %.100q, want %q", state, tc.wantState)
				}
			})
		}
	}
}

// TestFoldedTraceparentHeaderIsNotForwarded sends a traceparent with an
// obsolete line fold over a raw connection (a Go client would refuse to):
// the server joins the lines with a space, which is no traceparent.
func TestFoldedTraceparentHeaderIsNotForwarded(t *testing.T) {
	backend := &proxytest.HeaderRecorder{}
	front := serveCore(t, newTraceCore(t, backend, Options{}))
	conn, err := net.Dial("tcp", front.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "POST /v1/tools/search HTTP/1.1\r\nHost: localhost\r\nTraceparent: %s\r\n X-Injected: 1\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}", agentTrace)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	got := backend.Headers()
	if resp.StatusCode == http.StatusBadRequest && len(got) == 0 {
		return // the server refused the folded header outright: nothing was forwarded
	}
	if resp.StatusCode != http.StatusOK || len(got) != 1 {
		t.Fatalf("HTTP %d, backend got %d requests", resp.StatusCode, len(got))
	}
	if p := got[0].Get("Traceparent"); p != "" || got[0].Get("X-Injected") != "" {
		t.Errorf("backend got traceparent %.100q and headers %.300v", p, got[0])
	}
}
