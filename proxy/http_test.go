package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/internal/testkit/proxytest"
)

func TestRequestBodyLimit(t *testing.T) {
	doc := strings.Replace(harnessPolicy, "max_response_bytes: 2048", "max_response_bytes: 2048\n  max_request_bytes: 100", 1)
	h := newHarness(t, doc)
	big := `{"mode":"ok","pad":"` + strings.Repeat("x", 200) + `"}`
	t.Run("an honest large Content-Length is refused", func(t *testing.T) {
		resp, env := h.call(t, "read", big, nil)
		if resp.StatusCode != 413 || env.Status != contracts.StatusBadArgs || env.Retryable {
			t.Fatalf("%d %+v", resp.StatusCode, env)
		}
	})
	for name, header := range map[string]string{
		"a lying small Content-Length": fmt.Sprintf("Content-Length: %d\r\n", 10),
		"a chunked body":               "Transfer-Encoding: chunked\r\n",
	} {
		t.Run(name+" gets a clear answer", func(t *testing.T) {
			conn, err := net.Dial("tcp", strings.TrimPrefix(h.server.URL, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			body := big
			if strings.Contains(header, "chunked") {
				body = fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(big), big)
			}
			fmt.Fprintf(conn, "POST /v1/tools/read HTTP/1.1\r\nHost: localhost\r\n%s\r\n%s", header, body)
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			env, _, err := proxytest.ReadEnvelope(resp)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(header, "chunked") {
				if resp.StatusCode != 413 || env.Status != contracts.StatusBadArgs {
					t.Errorf("%d %s", resp.StatusCode, env.Status)
				}
			} else if env.Status != contracts.StatusBadArgs {
				// The server reads exactly Content-Length bytes: a truncated
				// document, which is not JSON.
				t.Errorf("%d %s", resp.StatusCode, env.Status)
			}
		})
	}
	if got := testutil.ToFloat64(h.core.Metrics().ContractViolations.WithLabelValues("read", ViolationSize)); got < 2 {
		t.Errorf("size violations = %v", got)
	}
}

func TestHTTPFront(t *testing.T) {
	h := newHarness(t, harnessPolicy)
	t.Run("X-Request-Id becomes call_id and reaches the backend", func(t *testing.T) {
		_, env := h.call(t, "read", `{"mode":"ok"}`, map[string]string{"X-Request-Id": "req-42"})
		if env.CallID != "req-42" {
			t.Errorf("call_id = %q", env.CallID)
		}
	})
	t.Run("an unsafe X-Request-Id is replaced", func(t *testing.T) {
		_, env := h.call(t, "read", `{"mode":"ok"}`, map[string]string{"X-Request-Id": "has space"})
		if env.CallID == "has space" || len(env.CallID) != 26 {
			t.Errorf("call_id = %q", env.CallID)
		}
	})
	t.Run("invalid JSON is bad_args", func(t *testing.T) {
		for _, body := range []string{`{"mode":`, `[1,2]`, `{"mode":"ok"} {}`, `{"mode":"ok","mode":"x"}`, "{\"mode\":\"\xff\"}", strings.Repeat("[", 10000)} {
			resp, env := h.call(t, "read", body, nil)
			if env.Status != contracts.StatusBadArgs || resp.StatusCode != 400 {
				t.Errorf("%q: %d %s", body[:min(len(body), 20)], resp.StatusCode, env.Status)
			}
		}
	})
	t.Run("an empty body is an empty argument object", func(t *testing.T) {
		_, env := h.call(t, "read_refused", ``, nil)
		if env.Status == contracts.StatusBadArgs {
			t.Errorf("empty body refused: %s", env.Message)
		}
	})
	t.Run("GET /v1/tools lists tools for function calling", func(t *testing.T) {
		resp, err := h.server.Client().Get(h.server.URL + "/v1/tools")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var list struct {
			Tools []struct {
				Name        string          `json:"name"`
				Description string          `json:"description"`
				Parameters  json.RawMessage `json:"parameters"`
				SideEffect  bool            `json:"side_effect"`
			} `json:"tools"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
			t.Fatal(err)
		}
		if len(list.Tools) != 6 || list.Tools[0].Name != "read" {
			t.Fatalf("tools = %+v", list.Tools)
		}
		for _, tool := range list.Tools {
			if tool.SideEffect != strings.Contains(string(tool.Parameters), "idempotency_key") {
				t.Errorf("%s: side_effect=%v but parameters %s", tool.Name, tool.SideEffect, tool.Parameters)
			}
		}
	})
	t.Run("the agent port serves no admin path", func(t *testing.T) {
		for _, path := range []string{"/metrics", "/healthz", "/readyz", "/-/reload", "/v1/config"} {
			resp, err := h.server.Client().Get(h.server.URL + path)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 404 || strings.Contains(string(b), "toolgate_") {
				t.Errorf("%s: %d %s", path, resp.StatusCode, b)
			}
		}
	})
}

func TestAlways200Mode(t *testing.T) {
	doc := strings.Replace(harnessPolicy, "max_response_bytes: 2048", "max_response_bytes: 2048\n  http_status: always_200", 1)
	h := newHarness(t, doc)
	resp, env := h.call(t, "read", `{"mode":"500"}`, nil)
	if resp.StatusCode != 200 || env.Status != contracts.StatusUpstream || resp.Header.Get("Toolgate-Status") != "upstream" {
		t.Fatalf("%d %s", resp.StatusCode, env.Status)
	}
}

func TestAdminHandler(t *testing.T) {
	h := newHarness(t, harnessPolicy)
	h.call(t, "read", `{"mode":"ok"}`, nil)
	ready := error(nil)
	admin := httptest.NewServer(AdminHandler(AdminOptions{
		Gatherer: h.reg,
		Ready:    func(ctx context.Context) error { return ready },
		Reload:   func() error { return fmt.Errorf("policy.yaml:3:1: broken") },
		Config:   func() any { return map[string]any{"generation": 1} },
	}))
	defer admin.Close()
	get := func(path string) (int, string) {
		resp, err := admin.Client().Get(admin.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/metrics"); code != 200 || !strings.Contains(body, `toolgate_tool_calls_total{caller="unknown",status="ok",tool="read"} 1`) {
		t.Errorf("/metrics: %d\n%s", code, body)
	}
	if code, _ := get("/healthz"); code != 200 {
		t.Errorf("/healthz: %d", code)
	}
	if code, _ := get("/readyz"); code != 200 {
		t.Errorf("/readyz: %d", code)
	}
	ready = fmt.Errorf("draining")
	if code, body := get("/readyz"); code != 503 || !strings.Contains(body, "draining") {
		t.Errorf("/readyz while draining: %d %s", code, body)
	}
	resp, err := admin.Client().Post(admin.URL+"/-/reload", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(string(b), "policy.yaml:3:1") {
		t.Errorf("/-/reload: %d %s", resp.StatusCode, b)
	}
}

// TestHeaderNamesAreCanonical: headerValue reads what h.Get reads only for
// a name in canonical form, so every name it is given is one, and it
// agrees with h.Get on headers present, repeated, empty and absent.
func TestHeaderNamesAreCanonical(t *testing.T) {
	names := []string{headerRequestID, headerIdempotencyKey, headerTraceParent, headerTraceState,
		headerOrigin, headerSecFetchSite, headerSecFetchMode, headerContentType, headerRetryAfter, headerContentLength}
	for _, name := range names {
		if canonical := http.CanonicalHeaderKey(name); canonical != name {
			t.Errorf("header name %q is not canonical (%q)", name, canonical)
		}
		for _, h := range []http.Header{
			{},
			{name: {"one"}},
			{name: {"first", "second"}},
			{name: {}},
			{name: {""}},
			{strings.ToLower(name): {"lower case, not read by Get"}},
		} {
			if got, want := headerValue(h, name), h.Get(name); got != want {
				t.Errorf("headerValue(%v, %q) = %q, h.Get %q", h, name, got, want)
			}
		}
	}
}
