package proxy

import (
	"context"
	"net/http"
	"strconv"

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

// traceCarrier reads an agent's trace context from a Request.
type traceCarrier struct{ req *Request }

func (c traceCarrier) Get(key string) string {
	switch key {
	case "traceparent":
		return c.req.TraceParent
	case "tracestate":
		return c.req.TraceState
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
	if req.TraceParent != "" {
		ctx = t.prop.Extract(ctx, traceCarrier{req})
	}
	return t.tracer.Start(ctx, "toolgate.call", trace.WithSpanKind(trace.SpanKindServer))
}

// endCall records the call's outcome on its span and ends it.
func (t tracing) endCall(span trace.Span, cl *call, res *Result) {
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
	if req.TraceParent != "" {
		h.Set("Traceparent", req.TraceParent)
		if req.TraceState != "" {
			h.Set("Tracestate", req.TraceState)
		}
	}
}

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
