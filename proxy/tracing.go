package proxy

import (
	"context"
	"net/http"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolgate/toolgate/contracts"
)

// tracing makes each call a span ("toolgate.call") with child spans for
// validation, the idempotency claim and every backend attempt. The agent's
// W3C traceparent is continued and propagated to the backend. With no
// tracer provider, nothing is recorded and the agent's traceparent is
// passed to the backend as it came, so a trace that runs through toolgate
// is not broken.
type tracing struct {
	on     bool
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
}

func newTracing(tp trace.TracerProvider) tracing {
	if tp == nil {
		return tracing{prop: propagation.TraceContext{}}
	}
	return tracing{on: true, tracer: tp.Tracer("github.com/toolgate/toolgate/proxy"), prop: propagation.TraceContext{}}
}

// traceCarrier reads an agent's trace context from a Request, valid parts
// only.
type traceCarrier struct{ req *Request }

func (c traceCarrier) Get(key string) string {
	parent, state := agentTraceContext(c.req)
	switch key {
	case "traceparent":
		return parent
	case "tracestate":
		return state
	}
	return ""
}
func (c traceCarrier) Set(string, string) {}
func (c traceCarrier) Keys() []string     { return []string{"traceparent", "tracestate"} }

// startCall starts the call's span, continuing the agent's trace.
func (t tracing) startCall(ctx context.Context, req *Request) (context.Context, trace.Span) {
	if !t.on {
		return ctx, nil
	}
	if parent, _ := agentTraceContext(req); parent != "" {
		ctx = t.prop.Extract(ctx, traceCarrier{req})
	}
	return t.tracer.Start(ctx, "toolgate.call", trace.WithSpanKind(trace.SpanKindServer))
}

// endCall records the call's outcome on its span and ends it.
func (t tracing) endCall(span trace.Span, cl *Call, res *Result) {
	if span == nil {
		return
	}
	env := &res.Envelope
	attrs := []attribute.KeyValue{
		attribute.String("toolgate.tool", cl.metricsName()),
		attribute.String("toolgate.status", string(env.Status)),
		attribute.String("toolgate.caller", cl.caller),
		attribute.Bool("toolgate.retryable", env.Retryable),
		attribute.String("toolgate.side_effect", string(env.SideEffect)),
		attribute.Bool("toolgate.replayed", env.Replayed),
		attribute.String("toolgate.reason", string(res.Reason)),
	}
	if cl.tool != nil {
		attrs = append(attrs, attribute.String("toolgate.upstream", cl.tool.contract.Upstream))
	}
	if code, err := strconv.Atoi(cl.upCode); err == nil {
		attrs = append(attrs, attribute.Int("http.response.status_code", code))
	}
	span.SetAttributes(attrs...)
	if !env.Status.Success() {
		span.SetStatus(codes.Error, string(env.Status))
	}
	span.End()
}

// child starts a span under the call's span; end it with endChild.
func (t tracing) child(ctx context.Context, name string, kind trace.SpanKind) (context.Context, trace.Span) {
	if !t.on {
		return ctx, nil
	}
	return t.tracer.Start(ctx, name, trace.WithSpanKind(kind))
}

func endChild(span trace.Span, o *contracts.Outcome) {
	if span == nil {
		return
	}
	if o != nil && o.Status != "" && !o.Status.Success() {
		span.SetAttributes(attribute.String("toolgate.status", string(o.Status)), attribute.String("toolgate.reason", string(o.Reason)))
		span.SetStatus(codes.Error, string(o.Reason))
	}
	span.End()
}

// inject puts the trace context of ctx into a backend request, or passes
// the agent's own when tracing is off.
func (t tracing) inject(ctx context.Context, req *Request, h http.Header) {
	if t.on {
		t.prop.Inject(ctx, propagation.HeaderCarrier(h))
		return
	}
	if parent, state := agentTraceContext(req); parent != "" {
		h.Set("Traceparent", parent)
		if state != "" {
			h.Set("Tracestate", state)
		}
	}
}

// agentTraceContext returns the agent's W3C trace context, each part only
// when it is well formed: the values come from a header or from MCP's
// _meta, so anything (CR, LF, megabytes) may be in them, and they are
// written into the backend request. An invalid traceparent drops both
// (a tracestate means nothing without it); an invalid tracestate drops
// only itself. Neither ever fails the call.
func agentTraceContext(req *Request) (parent, state string) {
	if !ValidTraceParent(req.TraceParent) {
		return "", ""
	}
	if validTraceState(req.TraceState) {
		state = req.TraceState
	}
	return req.TraceParent, state
}

// maxTraceParentBytes bounds a traceparent of a future version, which may
// carry fields after the four of version 00.
const maxTraceParentBytes = 256

// ValidTraceParent reports whether v is a W3C trace-context traceparent
// toolgate continues and forwards: version-traceid-parentid-flags in lower
// case hex (2-32-16-2 digits), a trace id and a parent id that are not all
// zeros, version ff refused. Version 00 is exactly those 55 characters; a
// higher version may add fields after a further "-", in lower case hex and
// "-" only, up to 256 characters in all.
func ValidTraceParent(v string) bool {
	const size = 55 // 2 + 1 + 32 + 1 + 16 + 1 + 2
	if len(v) < size || len(v) > maxTraceParentBytes {
		return false
	}
	if v[2] != '-' || v[35] != '-' || v[52] != '-' {
		return false
	}
	version, traceID, parentID, flags := v[:2], v[3:35], v[36:52], v[53:55]
	if !lowerHex(version) || !lowerHex(traceID) || !lowerHex(parentID) || !lowerHex(flags) {
		return false
	}
	if version == "ff" || allZeros(traceID) || allZeros(parentID) {
		return false
	}
	if len(v) == size {
		return true
	}
	if version == "00" || v[size] != '-' {
		return false
	}
	for i := size + 1; i < len(v); i++ {
		if c := v[i]; c != '-' && !isLowerHex(c) {
			return false
		}
	}
	return true
}

// maxTraceStateBytes bounds tracestate: W3C asks vendors to propagate at
// least 512 characters, and allows at most 32 list members.
const (
	maxTraceStateBytes   = 512
	maxTraceStateMembers = 32
)

// validTraceState reports whether v is a tracestate toolgate forwards: at
// most 512 bytes of printable ASCII (no control characters, so no CR or
// LF), at most 32 comma-separated members, each empty or key=value.
func validTraceState(v string) bool {
	if len(v) > maxTraceStateBytes {
		return false
	}
	members := 1
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c < 0x20 || c > 0x7e {
			return false
		}
		if c == ',' {
			members++
		}
	}
	if members > maxTraceStateMembers {
		return false
	}
	for m := range strings.SplitSeq(v, ",") {
		m = strings.Trim(m, " \t")
		if m == "" {
			continue
		}
		key, value, ok := strings.Cut(m, "=")
		if !ok || key == "" || value == "" || strings.Contains(value, "=") {
			return false
		}
	}
	return true
}

func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isLowerHex(s[i]) {
			return false
		}
	}
	return true
}

func isLowerHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' }

func allZeros(s string) bool { return strings.Trim(s, "0") == "" }

// traceID is the call's trace id for the log line, or "".
func traceID(span trace.Span) string {
	if span == nil {
		return ""
	}
	if sc := span.SpanContext(); sc.HasTraceID() {
		return sc.TraceID().String()
	}
	return ""
}
