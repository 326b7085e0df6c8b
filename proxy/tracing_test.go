package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/contracts"
)

// traceRecorder is a backend that records the traceparent it received.
type traceRecorder struct {
	mu  sync.Mutex
	got []string
}

func (tr *traceRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	tr.mu.Lock()
	tr.got = append(tr.got, r.Header.Get("Traceparent"))
	tr.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"results":[1],"total":1,"id":"x"}`))
}

const agentTrace = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

func TestCallsAreSpansThatContinueTheAgentsTrace(t *testing.T) {
	rec := &traceRecorder{}
	backend := httptest.NewServer(rec)
	defer backend.Close()
	doc := strings.ReplaceAll(accessPolicy, "{{url}}", backend.URL)
	doc = strings.NewReplacer("{{from}}", "header", "{{default}}", "allow").Replace(doc)
	snap, err := config.CompileSource("trace.yaml", []byte(doc), config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	var logs bytes.Buffer
	var logMu sync.Mutex
	logger := slog.New(slog.NewJSONHandler(lockedWriter{&logMu, &logs}, nil))
	core, err := NewCore(snap, Options{TracerProvider: tp, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	defer core.Close()

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
	rec.mu.Lock()
	sent := rec.got[0]
	rec.mu.Unlock()
	if !strings.Contains(sent, "4bf92f3577b34da6a3ce929d0e0e4736") || !strings.Contains(sent, attempt.SpanContext.SpanID().String()) {
		t.Errorf("backend got traceparent %q, want the attempt span %s", sent, attempt.SpanContext.SpanID())
	}
	logMu.Lock()
	var line map[string]any
	_ = json.Unmarshal(bytes.Split(logs.Bytes(), []byte("\n"))[0], &line)
	logMu.Unlock()
	if line["trace_id"] != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("log line trace_id = %v", line["trace_id"])
	}
}

func TestWithoutTracingTheAgentsTraceparentPassesThrough(t *testing.T) {
	rec := &traceRecorder{}
	backend := httptest.NewServer(rec)
	defer backend.Close()
	doc := strings.ReplaceAll(accessPolicy, "{{url}}", backend.URL)
	doc = strings.NewReplacer("{{from}}", "header", "{{default}}", "allow").Replace(doc)
	snap, err := config.CompileSource("trace.yaml", []byte(doc), config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	core, _ := NewCore(snap, Options{})
	defer core.Close()
	front := httptest.NewServer(core.Handler())
	defer front.Close()
	req, _ := http.NewRequest("POST", front.URL+"/v1/tools/search", strings.NewReader(`{}`))
	req.Header.Set("Traceparent", agentTrace)
	resp, err := front.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.got) != 1 || rec.got[0] != agentTrace {
		t.Errorf("backend got %q", rec.got)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}
