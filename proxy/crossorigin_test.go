package proxy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/internal/testkit/mcptest"
	"github.com/toolgate/toolgate/proxy/mcpfront"
)

// browserEnv is a toolgate with the example policy in transparent mode
// (plus a passthrough), on a loopback listener like the demo.
func browserEnv(t *testing.T, extraServer string) *mcptest.Env {
	t.Helper()
	return mcptest.NewEnv(t, func(doc string) string {
		return strings.Replace(doc, "  http_status: mapped\n", "  http_status: mapped\n  transparent: true\n"+
			"  passthrough: [{prefix: /health, upstream: search}]\n"+extraServer, 1)
	})
}

// agentRoute is one agent-facing route with a call a web page would like to
// make on it.
type agentRoute struct {
	name, method, path, body string
	mcp                      bool // answers in JSON-RPC
}

// agentRoutes are every kind of agent-facing route, MCP last.
func agentRoutes() []agentRoute {
	return []agentRoute{
		{"the tool endpoint of a side-effecting tool", http.MethodPost, "/v1/tools/send_notification",
			`{"user_id":"alice","text":"pwned","idempotency_key":"k-browser"}`, false},
		{"the tool list", http.MethodGet, "/v1/tools", "", false},
		{"a transparent route of a read-only tool", http.MethodGet, "/api/search?q=go", "", false},
		{"a transparent route of a side-effecting tool", http.MethodPost, "/v1/users/alice/notifications", `{"text":"pwned"}`, false},
		{"a passthrough route", http.MethodGet, "/health", "", false},
		{"an unknown route", http.MethodGet, "/nothing/here", "", false},
		{"MCP", http.MethodPost, "/mcp",
			`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"send_notification","arguments":{"user_id":"alice","text":"pwned","idempotency_key":"k-browser-mcp"}}}`, true},
	}
}

// send makes the request of route with header on env's loopback listener.
func (r agentRoute) send(t *testing.T, env *mcptest.Env, host string, header http.Header) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(r.method, env.Server.URL+r.path, strings.NewReader(r.body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if r.mcp {
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("MCP-Protocol-Version", "2025-11-25")
	}
	if host != "" {
		req.Host = host
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

// TestBrowsersAreNotCallers sends what a web page can make a browser send
// to every agent-facing route: each is refused before anything runs, with a
// forbidden envelope (a JSON-RPC error on /mcp).
func TestBrowsersAreNotCallers(t *testing.T) {
	env := browserEnv(t, "")
	pages := []struct {
		name   string
		host   string
		header http.Header
	}{
		{"a cross-site fetch (Sec-Fetch-Site and Origin)", "", http.Header{
			"Sec-Fetch-Site": {"cross-site"}, "Sec-Fetch-Mode": {"no-cors"}, "Origin": {"https://evil.example"}, "Content-Type": {"text/plain;charset=UTF-8"}}},
		{"a cross-site form post from an old browser (Origin only)", "", http.Header{
			"Origin": {"https://evil.example"}, "Content-Type": {"application/x-www-form-urlencoded"}}},
		{"a same-site page on another port", "", http.Header{
			"Sec-Fetch-Site": {"same-site"}, "Origin": {"http://intranet.example:8000"}, "Content-Type": {"application/json"}}},
		{"a sandboxed page (Origin null)", "", http.Header{"Origin": {"null"}, "Content-Type": {"application/json"}}},
		{"a DNS-rebinding page: its own name as Host and Origin", "evil.example:80", http.Header{
			"Sec-Fetch-Site": {"same-origin"}, "Origin": {"http://evil.example"}, "Content-Type": {"application/json"}}},
		{"a DNS-rebinding page reading with GET", "evil.example", http.Header{"Sec-Fetch-Site": {"same-origin"}}},
	}
	for _, route := range agentRoutes() {
		for _, page := range pages {
			t.Run(route.name+"/"+page.name, func(t *testing.T) {
				before := env.Notify.Count()
				resp, body := route.send(t, env, page.host, page.header)
				if resp.StatusCode != http.StatusForbidden {
					t.Fatalf("HTTP %d, want 403: %s", resp.StatusCode, body)
				}
				if route.mcp {
					var msg struct {
						ID    *json.RawMessage `json:"id"`
						Error *struct{ Code int64 }
					}
					if err := json.Unmarshal(body, &msg); err != nil || msg.Error == nil || msg.Error.Code != -32600 || msg.ID != nil {
						t.Errorf("want a JSON-RPC error without id: %s", body)
					}
				} else {
					e, err := contracts.DecodeEnvelope([]byte(strings.TrimSpace(string(body))))
					if err != nil || e.Status != contracts.StatusForbidden || e.SideEffect != contracts.SideEffectNone || e.Cost != 0 {
						t.Errorf("want a forbidden envelope, nothing done: %v %s", err, body)
					}
				}
				if n := env.Notify.Count(); n != before {
					t.Errorf("the backend sent %d notifications", n-before)
				}
			})
		}
	}
}

// TestAgentsAndLocalPagesAreServed: the same routes serve clients that are
// not browsers, the page's own origin, and loopback origins (a local
// console or the MCP Inspector).
func TestAgentsAndLocalPagesAreServed(t *testing.T) {
	env := browserEnv(t, "")
	self := strings.TrimPrefix(env.Server.URL, "http://")
	callers := []struct {
		name   string
		host   string
		header http.Header
	}{
		{"an agent SDK (no browser headers)", "", http.Header{"Content-Type": {"application/json"}}},
		{"localhost as Host", "localhost", http.Header{"Content-Type": {"application/json"}}},
		{"a page of the same origin", "", http.Header{"Sec-Fetch-Site": {"same-origin"}, "Origin": {"http://" + self}, "Content-Type": {"application/json"}}},
		{"an old browser on the same origin (Origin only)", "", http.Header{"Origin": {"http://" + self}, "Content-Type": {"application/json"}}},
		{"a local page on another port", "", http.Header{"Sec-Fetch-Site": {"same-site"}, "Origin": {"http://localhost:6274"}, "Content-Type": {"application/json"}}},
		{"the address bar (Sec-Fetch-Site none)", "", http.Header{"Sec-Fetch-Site": {"none"}, "Content-Type": {"application/json"}}},
	}
	for _, route := range agentRoutes() {
		if route.method != http.MethodGet && route.path != "/mcp" {
			continue // keep the backend's notifications out of it
		}
		for _, c := range callers {
			t.Run(route.name+"/"+c.name, func(t *testing.T) {
				resp, body := route.send(t, env, c.host, c.header)
				if resp.StatusCode == http.StatusForbidden {
					t.Fatalf("refused: %s", body)
				}
			})
		}
	}
}

// TestHostRuleFollowsTheListener: a Service name as Host is served on a
// listener that is not loopback (a pod behind a Kubernetes Service), unless
// server.allowed_hosts names the served hosts.
func TestHostRuleFollowsTheListener(t *testing.T) {
	podIP := &net.TCPAddr{IP: net.ParseIP("10.0.0.5"), Port: 8080}
	loopback := &net.TCPAddr{IP: net.ParseIP("127.0.0.1"), Port: 8080}
	open := browserEnv(t, "")
	locked := browserEnv(t, "  allowed_hosts: [toolgate.agents.svc.cluster.local, \"*.example.com\"]\n")
	cases := []struct {
		name   string
		env    *mcptest.Env
		local  net.Addr
		host   string
		served bool
	}{
		{"a Service name on the pod IP", open, podIP, "toolgate.agents.svc.cluster.local:8080", true},
		{"any name on the pod IP", open, podIP, "anything.example", true},
		{"a Service name on a loopback listener", open, loopback, "toolgate.agents.svc.cluster.local:8080", false},
		{"an allowed name on a loopback listener", locked, loopback, "toolgate.agents.svc.cluster.local:8080", true},
		{"an allowed subdomain", locked, podIP, "agents.example.com", true},
		{"the wildcard's own apex is not a subdomain", locked, podIP, "example.com", false},
		{"another name when allowed_hosts is set", locked, podIP, "evil.example", false},
		{"an IP literal when allowed_hosts is set", locked, podIP, "10.0.0.5:8080", true},
		{"localhost when allowed_hosts is set", locked, podIP, "localhost:8080", true},
	}
	for _, tc := range cases {
		for _, route := range listAndMCP() {
			t.Run(tc.name+"/"+route.name, func(t *testing.T) {
				body := route.body
				if route.mcp {
					body = `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`
				}
				req := httptest.NewRequest(route.method, "http://"+tc.host+route.path, strings.NewReader(body))
				req = req.WithContext(context.WithValue(req.Context(), http.LocalAddrContextKey, tc.local))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Accept", "application/json, text/event-stream")
				rec := httptest.NewRecorder()
				mcptest.AgentHandler(tc.env.Core, mcpfront.Options{}).ServeHTTP(rec, req)
				if served := rec.Code != http.StatusForbidden; served != tc.served {
					t.Errorf("HTTP %d, want served=%v: %s", rec.Code, tc.served, rec.Body)
				}
			})
		}
	}
}

// listAndMCP are the tool list and MCP, the routes without side effects.
func listAndMCP() []agentRoute {
	all := agentRoutes()
	return []agentRoute{all[1], all[len(all)-1]}
}

// TestAllowedOriginsAreServed: server.allowed_origins admits a console on
// another site (through a proxy that keeps its own Host), on every route.
func TestAllowedOriginsAreServed(t *testing.T) {
	env := browserEnv(t, "  allowed_origins: [\"https://Console.Example.com:443/\"]\n")
	for _, route := range listAndMCP() {
		for _, tc := range []struct {
			origin string
			served bool
		}{
			{"https://console.example.com", true},
			{"https://console.example.com:8443", false},
			{"http://console.example.com", false},
		} {
			t.Run(route.name+"/"+tc.origin, func(t *testing.T) {
				if route.mcp {
					route.body = `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`
				}
				resp, body := route.send(t, env, "", http.Header{"Sec-Fetch-Site": {"cross-site"}, "Origin": {tc.origin}, "Content-Type": {"application/json"}})
				if served := resp.StatusCode != http.StatusForbidden; served != tc.served {
					t.Errorf("HTTP %d, want served=%v: %s", resp.StatusCode, tc.served, body)
				}
			})
		}
	}
}

// TestToolEndpointTakesJSONBodies: a body a page may send without a
// preflight is not a call: 415 with a bad_args envelope, nothing runs.
// curl's default form type is served when no browser header says a page
// sent it.
func TestToolEndpointTakesJSONBodies(t *testing.T) {
	env := mcptest.NewEnv(t, nil)
	cases := []struct {
		name   string
		header http.Header
		status int
	}{
		{"application/json", http.Header{"Content-Type": {"application/json"}}, 200},
		{"application/json with a charset", http.Header{"Content-Type": {"application/json; charset=utf-8"}}, 200},
		{"a +json type", http.Header{"Content-Type": {"application/vnd.toolgate+json"}}, 200},
		{"no Content-Type from an agent", http.Header{}, 200},
		{"curl -d (a form type, no browser headers)", http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}, 200},
		{"text/plain", http.Header{"Content-Type": {"text/plain"}}, 415},
		{"multipart/form-data", http.Header{"Content-Type": {"multipart/form-data; boundary=x"}}, 415},
		{"a form type from a page of the same origin", http.Header{"Content-Type": {"application/x-www-form-urlencoded"}, "Sec-Fetch-Site": {"same-origin"}}, 415},
		{"no Content-Type from a page (a Blob body)", http.Header{"Sec-Fetch-Site": {"same-origin"}, "Sec-Fetch-Mode": {"no-cors"}}, 415},
		{"JSON with parameters that do not parse (no page can send it without a preflight)", http.Header{"Content-Type": {"application/json;;"}}, 200},
		{"text/plain dressed with a JSON parameter", http.Header{"Content-Type": {"text/plain; x=application/json"}}, 415},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := env.Notify.Count()
			key := "ct-" + string(rune('a'+i))
			req, _ := http.NewRequest(http.MethodPost, env.Server.URL+"/v1/tools/send_notification",
				strings.NewReader(`{"user_id":"alice","text":"hello","idempotency_key":"`+key+`"}`))
			req.Header = tc.header
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Fatalf("HTTP %d, want %d: %s", resp.StatusCode, tc.status, body)
			}
			e, err := contracts.DecodeEnvelope([]byte(strings.TrimSpace(string(body))))
			if err != nil {
				t.Fatalf("not an envelope: %s", body)
			}
			sent := env.Notify.Count() - before
			if tc.status == 415 {
				if e.Status != contracts.StatusBadArgs || e.SideEffect != contracts.SideEffectNone || sent != 0 {
					t.Errorf("want bad_args with nothing sent, got %s/%s and %d sent: %s", e.Status, e.SideEffect, sent, e.Message)
				}
				if !strings.Contains(e.Message, "application/json") {
					t.Errorf("the message does not say what was wrong: %s", e.Message)
				}
			} else if e.Status != contracts.StatusOK || sent != 1 {
				t.Errorf("want ok and one notification, got %s and %d: %s", e.Status, sent, e.Message)
			}
		})
	}
	t.Run("always_200 keeps its 200", func(t *testing.T) {
		env := mcptest.NewEnv(t, func(doc string) string {
			return strings.Replace(doc, "http_status: mapped", "http_status: always_200", 1)
		})
		req, _ := http.NewRequest(http.MethodPost, env.Server.URL+"/v1/tools/search_articles", strings.NewReader(`{"q":"go"}`))
		req.Header.Set("Content-Type", "text/plain")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("Toolgate-Status") != "bad_args" {
			t.Errorf("HTTP %d %s, want 200 bad_args", resp.StatusCode, resp.Header.Get("Toolgate-Status"))
		}
	})
}

// TestUnknownRoutesNameTheRoute: an unknown route's message says what was
// asked for; the envelope names no tool.
func TestUnknownRoutesNameTheRoute(t *testing.T) {
	for _, transparent := range []bool{false, true} {
		env := mcptest.NewEnv(t, nil)
		if transparent {
			env = browserEnv(t, "")
		}
		for _, tc := range []struct{ method, path, want string }{
			{http.MethodGet, "/nothing/here", "GET /nothing/here"},
			{http.MethodDelete, "/v1/tools", "DELETE /v1/tools"},
		} {
			t.Run(fmt.Sprintf("transparent %v/%s", transparent, tc.want), func(t *testing.T) {
				req, _ := http.NewRequest(tc.method, env.Server.URL+tc.path, nil)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				e, err := contracts.DecodeEnvelope([]byte(strings.TrimSpace(string(body))))
				if err != nil || e.Status != contracts.StatusNotFound || e.Tool != "" {
					t.Fatalf("want not_found naming no tool: %v %s", err, body)
				}
				if !strings.Contains(e.Message, tc.want) || strings.Contains(e.Message, " ;") {
					t.Errorf("message %q does not name %s", e.Message, tc.want)
				}
			})
		}
	}
}
