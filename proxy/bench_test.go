package proxy

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/testkit/proxytest"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/examples"
	"github.com/toolgate/toolgate/policy"
)

// benchPolicy is the example policy's two tools against in-process
// backends.
func benchCore(b *testing.B, rt http.RoundTripper) *Core {
	b.Helper()
	return benchCoreOf(b, string(examples.Policy()), rt)
}

// benchCoreOf is benchCore of a variant of the example policy.
func benchCoreOf(b *testing.B, policyYAML string, rt http.RoundTripper) *Core {
	b.Helper()
	doc := strings.NewReplacer("127.0.0.1:8080", "127.0.0.1:0", "127.0.0.1:9090", "127.0.0.1:1").Replace(policyYAML)
	snap, err := config.CompileSource("policy.yaml", []byte(doc), config.Options{})
	if err != nil {
		b.Fatal(err)
	}
	opts := Options{Registry: prometheus.NewRegistry()}
	if rt != nil {
		opts.Transport = func(*policy.Upstream) http.RoundTripper { return rt }
	}
	core, err := NewCore(snap, opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(core.Close)
	return core
}

// BenchmarkPipeline measures Core.Call end to end against in-process
// backends: validate, bind, call, classify with CEL, render, record.
func BenchmarkPipeline(b *testing.B) {
	cases := []struct {
		name, tool, args, key string
	}{
		{"ok", "search_articles", `{"q":"go","limit":5}`, ""},
		{"empty", "search_articles", `{"q":"nothing-matches-this"}`, ""},
		{"bad_args", "search_articles", `{"q":"go","limit":50}`, ""},
		{"replay", "send_notification", `{"user_id":"alice","text":"hello"}`, "bench-replay"},
		{"send", "send_notification", `{"user_id":"alice","text":"hello"}`, ""},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			core := benchCore(b, proxytest.HandlerTransport())
			body := []byte(tc.args)
			key := tc.key
			if tc.name == "replay" {
				core.Call(context.Background(), &Request{Tool: tc.tool, Body: body, IdempotencyKey: key})
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				k := key
				if tc.name == "send" {
					i++
					k = "bench-" + strings.Repeat("x", i%7) + string(rune('a'+i%26)) + itoa(i)
				}
				res := core.Call(context.Background(), &Request{Tool: tc.tool, Body: body, IdempotencyKey: k, CallID: "bench"})
				if res.Envelope.Status == "" {
					b.Fatal("no envelope")
				}
			}
		})
	}
}

func itoa(i int) string {
	var buf [20]byte
	n := len(buf)
	for i > 0 || n == len(buf) {
		n--
		buf[n] = byte('0' + i%10)
		i /= 10
	}
	return string(buf[n:])
}

// BenchmarkHTTPFront measures the agent port over loopback HTTP, the way
// an agent calls it, against the search backend over loopback too.
func BenchmarkHTTPFront(b *testing.B) {
	backend := httptest.NewServer(examples.NewSearchBackend(examples.SearchOptions{}))
	defer backend.Close()
	doc := strings.NewReplacer("http://127.0.0.1:7001", backend.URL).Replace(string(examples.Policy()))
	core := newTestCore(b, doc, Options{Registry: prometheus.NewRegistry()})
	defer core.Close()
	front := httptest.NewServer(agentHandler(core))
	defer front.Close()
	client := front.Client()
	body := []byte(`{"q":"go","limit":5}`)
	b.ReportAllocs()
	cpu0 := processCPU()
	for b.Loop() {
		resp, err := client.Post(front.URL+"/v1/tools/search_articles", "application/json", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	// CPU time says more than wall time on a shared machine; it counts the
	// client's and the backend's work too.
	b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
	runtime.GC()
}

// BenchmarkCoreOnly is the search call's pipeline against a canned answer:
// toolgate's own cost per call, without sockets or a backend.
func BenchmarkCoreOnly(b *testing.B) {
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("GET", "/api/search?q=go&limit=5", nil)
	examples.NewSearchBackend(examples.SearchOptions{}).ServeHTTP(rec, req)
	core := benchCore(b, proxytest.CannedTransport{Body: rec.Body.Bytes()})
	body := []byte(`{"q":"go","limit":5}`)
	b.ReportAllocs()
	for b.Loop() {
		res := core.Call(context.Background(), &Request{Tool: "search_articles", Body: body, CallID: "bench"})
		if res.Envelope.Status != "ok" {
			b.Fatal(res.Envelope.Status)
		}
		_ = res.Envelope.AppendJSON(nil)
	}
}
