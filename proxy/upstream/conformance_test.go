package upstream_test

import (
	"log/slog"
	"net/url"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/testkit/clienttest"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/proxy/upstream"
)

// TestClientConformance runs the client conformance suite against both
// clients, each made as the sidecar makes it: toolgate's HTTP/1.1 client,
// and net/http's over the transport NewTransport makes for a plain-HTTP
// upstream (server.upstream_client: nethttp).
func TestClientConformance(t *testing.T) {
	harnesses := []struct {
		name string
		h    clienttest.Harness
	}{
		{"toolgate's HTTP/1.1 client", clienttest.Harness{
			New: func(t *testing.T, o clienttest.Options) upstream.Client {
				return upstream.NewH1Client(upstream.H1Options{Addr: o.Addr, MaxIdle: o.MaxIdle, IdleTimeout: o.IdleTimeout, Dial: o.Dial})
			},
			PeeksBeforeReuse: upstream.H1Supported,
			CountsWrites:     true,
			Stirred: func(c upstream.Client) bool {
				_, stirred := c.(*upstream.H1Client).Idle()
				return stirred > 0
			},
		}},
		{"net/http's client", clienttest.Harness{New: newNetHTTP}},
	}
	for _, tt := range harnesses {
		t.Run(tt.name, func(t *testing.T) {
			if !upstream.H1Supported && tt.h.PeeksBeforeReuse {
				t.Skip("this system cannot peek at a socket: the fast client is not used")
			}
			clienttest.RunConformanceTests(t, tt.h)
		})
	}
}

// newNetHTTP is the net/http client of a plain-HTTP upstream, on the
// transport the sidecar makes for it, with the suite's dial and idle
// timeout.
func newNetHTTP(t *testing.T, o clienttest.Options) upstream.Client {
	u, err := url.Parse("http://" + o.Addr)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &policy.Upstream{Name: "svc", URL: u, MaxConcurrent: o.MaxIdle}
	tr := upstream.NewTransport(cfg, upstream.Env{Now: time.Now, Logger: slog.New(slog.DiscardHandler)})
	if o.Dial != nil {
		tr.DialContext = o.Dial
	}
	if o.IdleTimeout > 0 {
		tr.IdleConnTimeout = o.IdleTimeout
	}
	return upstream.NewNetHTTPClient(tr)
}
