package main

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/toolgate/toolgate/policy"
)

// newTracerProvider builds the OTLP trace pipeline of server.tracing. It
// returns nil (tracing off) when the section is absent; the shutdown
// function flushes spans still buffered.
func newTracerProvider(ctx context.Context, s *policy.TracingSettings) (*sdktrace.TracerProvider, error) {
	if s == nil {
		return nil, nil
	}
	var (
		exp *otlptrace.Exporter
		err error
	)
	switch s.Protocol {
	case "http":
		opts := []otlptracehttp.Option{otlptracehttp.WithEndpoint(s.Endpoint), otlptracehttp.WithHeaders(s.Headers)}
		if s.Insecure {
			opts = append(opts, otlptracehttp.WithInsecure())
		}
		exp, err = otlptracehttp.New(ctx, opts...)
	default:
		opts := []otlptracegrpc.Option{otlptracegrpc.WithEndpoint(s.Endpoint), otlptracegrpc.WithHeaders(s.Headers)}
		if s.Insecure {
			opts = append(opts, otlptracegrpc.WithInsecure())
		}
		exp, err = otlptracegrpc.New(ctx, opts...)
	}
	if err != nil {
		return nil, fmt.Errorf("tracing exporter: %w", err)
	}
	res := resource.NewSchemaless(
		attribute.String("service.name", s.ServiceName),
		attribute.String("service.version", version),
	)
	return sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(s.SamplingRatio))),
	), nil
}
