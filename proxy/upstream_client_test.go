package proxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/internal/testkit/clienttest"
	"github.com/toolgate/toolgate/internal/testkit/proxytest"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/proxy/upstream"
)

// upstreamClientPolicy is wirePolicy with server.upstream_client set to
// kind ("" leaves it out: the default).
func upstreamClientPolicy(url, kind string) string {
	doc := strings.ReplaceAll(wirePolicy, "{{url}}", url)
	if kind != "" {
		doc = strings.Replace(doc, "version: 1\n", "version: 1\nserver:\n  upstream_client: "+kind+"\n", 1)
	}
	return doc
}

// TestUpstreamClientSetting: server.upstream_client picks the client that
// sends tool calls to a plain-HTTP backend, toolgate's own (fast, the
// default) or net/http's (nethttp), and the pipeline runs end to end on
// either: the HTTP front, the call, the backend, the envelope. A reload
// that changes the setting changes the client.
func TestUpstreamClientSetting(t *testing.T) {
	var served atomic.Int64
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		served.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"who":"`+r.Header.Get("X-Request-Id")+`"}`)
	}))
	t.Cleanup(backend.Close)
	tests := []struct {
		kind string
		want string // the client's type
	}{
		{"", "*upstream.H1Client"},
		{policy.UpstreamClientFast, "*upstream.H1Client"},
		{policy.UpstreamClientNetHTTP, "*upstream.NetHTTPClient"},
	}
	for _, tt := range tests {
		name := tt.kind
		if name == "" {
			name = "the default"
		}
		t.Run(name, func(t *testing.T) {
			core := newTestCore(t, upstreamClientPolicy(backend.URL, tt.kind), Options{})
			if got := clientType(core); got != tt.want {
				t.Fatalf("the upstream's client is %s, want %s", got, tt.want)
			}
			front := serveCore(t, core)
			for i, tool := range []string{"read", "write", "write_get", "read"} {
				before := served.Load()
				id := "k" + tt.kind + "-" + tool + "-" + string(rune('a'+i))
				_, env := postCall(t, front, tool, `{"n":"x"}`, map[string]string{"Idempotency-Key": id, "X-Request-Id": id})
				if env.Status != contracts.StatusOK || string(env.Data) != `{"who":"`+id+`"}` {
					t.Errorf("%s: %s %s (%s)", tool, env.Status, env.Data, env.Message)
				}
				if served.Load() != before+1 {
					t.Errorf("%s: the backend served %d requests, want 1", tool, served.Load()-before)
				}
			}
		})
	}
	t.Run("a reload that changes it changes the client", func(t *testing.T) {
		core := newTestCore(t, upstreamClientPolicy(backend.URL, ""), Options{})
		for _, kind := range []string{policy.UpstreamClientNetHTTP, policy.UpstreamClientFast} {
			if err := core.Swap(proxytest.Snapshot(t, upstreamClientPolicy(backend.URL, kind))); err != nil {
				t.Fatal(err)
			}
			want := map[string]string{policy.UpstreamClientNetHTTP: "*upstream.NetHTTPClient", policy.UpstreamClientFast: "*upstream.H1Client"}[kind]
			if got := clientType(core); got != want {
				t.Errorf("after a reload to %s the client is %s, want %s", kind, got, want)
			}
			if res := wireCall(core, "read", "after-"+kind); res.Envelope.Status != contracts.StatusOK {
				t.Errorf("after a reload to %s: %s", kind, res.Envelope.Message)
			}
		}
	})
}

// clientType is the type of the client of the core's upstream svc.
func clientType(core *Core) string {
	switch core.state.Load().upstreams["svc"].client.(type) {
	case *upstream.H1Client:
		return "*upstream.H1Client"
	case *upstream.NetHTTPClient:
		return "*upstream.NetHTTPClient"
	}
	return "another client"
}

// TestEitherClientNeverResendsASideEffect: a backend that reads a call on
// a reused connection and closes it without answering. Through either
// client a side-effecting call is sent once and ends unknown, and a
// read-only one is sent again and answered: the pipeline reads the same
// facts from both (the client conformance suite holds the clients to
// them).
func TestEitherClientNeverResendsASideEffect(t *testing.T) {
	tests := []struct {
		tool      string
		status    contracts.Status
		effect    contracts.SideEffect
		retryable bool
		received  int
	}{
		{"read", contracts.StatusOK, contracts.SideEffectNone, false, 2},
		{"write_get", contracts.StatusUpstream, contracts.SideEffectUnknown, false, 1},
		{"write", contracts.StatusUpstream, contracts.SideEffectUnknown, false, 1},
	}
	for _, kind := range []string{policy.UpstreamClientFast, policy.UpstreamClientNetHTTP} {
		for _, tt := range tests {
			t.Run(kind+" "+tt.tool, func(t *testing.T) {
				b := clienttest.NewRawBackend(t, func(c *clienttest.RawConn, n int) bool {
					if n == 2 {
						c.Close() // the request was read; no answer comes
						return false
					}
					return c.Answer(whoAnswer(c))
				})
				core := newTestCore(t, upstreamClientPolicy(b.URL(), kind), Options{})
				if a := wireCall(core, tt.tool, "A"); a.Envelope.Status != contracts.StatusOK {
					t.Fatalf("A got %s", a.Envelope.Status)
				}
				res := wireCall(core, tt.tool, "B")
				wantEnv(t, res, tt.status, tt.effect, tt.retryable)
				if got := b.Received("B"); got != tt.received {
					t.Errorf("the backend received B's request %d times, want %d", got, tt.received)
				}
			})
		}
	}
}
