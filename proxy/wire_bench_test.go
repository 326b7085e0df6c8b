//go:build unix

package proxy

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/toolgate/toolgate/policy"
)

// BenchmarkBackendCall measures calls through toolgate's backend clients
// over loopback, one after another, so every call reuses a pooled
// connection and pays whatever check that takes: a read and a
// side-effecting write to a plain-HTTP backend (toolgate's HTTP/1 client),
// and a side-effecting GET to an HTTPS backend (net/http's transport).
func BenchmarkBackendCall(b *testing.B) {
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"results":[{"id":1,"title":"t"}],"total":1}`)
	})
	plain := httptest.NewServer(handler)
	defer plain.Close()
	secure := httptest.NewTLSServer(handler)
	defer secure.Close()
	cases := []struct {
		name, tool string
		srv        *httptest.Server
		tls        bool
	}{
		{"plain read", "read", plain, false},
		{"plain write", "write", plain, false},
		{"https write_get", "write_get", secure, true},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			var rt func(*policy.Upstream) http.RoundTripper
			if tc.tls {
				rt = tlsTransport(tc.srv)
			}
			core := newWireCore(b, tc.srv.URL, rt)
			body := []byte(`{"n":"x"}`)
			b.ReportAllocs()
			cpu0 := processCPU()
			i := 0
			for b.Loop() {
				i++
				res := core.Call(context.Background(), &Request{Tool: tc.tool, Body: body, IdempotencyKey: "bench-" + strconv.Itoa(i), CallID: "bench", Front: "test"})
				if res.Envelope.Status != "ok" {
					b.Fatalf("%s: %s", res.Envelope.Status, res.Envelope.Message)
				}
			}
			// CPU time says more than wall time on a shared machine; it
			// counts the in-process backend's work too.
			b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// processCPU is the CPU time the process used so far, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
