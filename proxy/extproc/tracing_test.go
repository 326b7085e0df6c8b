package extproc

import (
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/internal/testkit/proxytest"
	"github.com/toolgate/toolgate/proxy"
)

const (
	agentTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	agentTrace   = "00-" + agentTraceID + "-00f067aa0ba902b7-01"
)

// TestTracedExtprocCallIsOneTree: with tracing on, a call through the
// external processor continues the agent's trace like a call through the
// HTTP front: the validation and idempotency spans are children of the call
// span, and the call's log line carries the trace id.
func TestTracedExtprocCallIsOneTree(t *testing.T) {
	h := newHarness(t)
	// Envoy sends: the upstreams are never dialled.
	doc := strings.NewReplacer("{{legacy}}", "http://127.0.0.1:1", "{{refused}}", "http://127.0.0.1:1").Replace(testPolicy)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	logs := &proxytest.LogBuffer{}
	core, err := proxy.NewCore(proxytest.Snapshot(t, doc), proxy.Options{
		Registry:       prometheus.NewRegistry(),
		TracerProvider: tp,
		Logger:         slog.New(slog.NewJSONHandler(logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(core.Close)
	h.ext = core
	h.client = serve(t, New(core, Options{}))

	req := legacyRequest{method: "POST", path: "/v1/users/u1/notifications", body: `{"text":"hi"}`,
		header: map[string]string{"Idempotency-Key": "k-traced", "Traceparent": agentTrace}}
	out, _ := h.viaExtproc(req, &answer{code: 200, header: jsonType, body: `{"id":"m-1"}`}, false)
	var env contracts.Envelope
	if err := json.Unmarshal(out.final.body, &env); err != nil || env.Status != contracts.StatusOK {
		t.Fatalf("answer %s (%v)", out.final.body, err)
	}

	byName := map[string]tracetest.SpanStub{}
	for _, s := range exp.GetSpans() {
		byName[s.Name] = s
	}
	callSpan, ok := byName["toolgate.call"]
	if !ok {
		t.Fatalf("no toolgate.call span among %v", spanNames(exp.GetSpans()))
	}
	if got := callSpan.SpanContext.TraceID().String(); got != agentTraceID {
		t.Errorf("call span trace id = %s, the agent's trace was not continued", got)
	}
	for _, name := range []string{"toolgate.validate", "toolgate.idempotency.claim"} {
		s, ok := byName[name]
		if !ok {
			t.Errorf("no %s span", name)
			continue
		}
		if s.Parent.SpanID() != callSpan.SpanContext.SpanID() {
			t.Errorf("%s has parent %s, not the call span %s", name, s.Parent.SpanID(), callSpan.SpanContext.SpanID())
		}
	}
	var call map[string]any
	for _, l := range logs.Lines(t) {
		if l["msg"] == "call" {
			call = l
		}
	}
	if call == nil {
		t.Fatal("no call log line")
	}
	if call["trace_id"] != agentTraceID {
		t.Errorf("log line trace_id = %v, want %s", call["trace_id"], agentTraceID)
	}
	if call["front"] != "extproc" {
		t.Errorf("log line front = %v", call["front"])
	}
}

func spanNames(spans tracetest.SpanStubs) []string {
	names := make([]string, 0, len(spans))
	for _, s := range spans {
		names = append(names, s.Name)
	}
	return names
}
