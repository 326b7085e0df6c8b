package proxy

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/contracts"
)

const transparentPolicy = `
version: 1
server:
  transparent: true
  passthrough:
    - {prefix: /health, upstream: legacy}
    - {prefix: /admin/, upstream: legacy}
upstreams:
  legacy: {url: "{{url}}", timeout: 2s}
tools:
  search:
    description: Search.
    upstream: legacy
    args:
      type: object
      required: [q]
      properties:
        q: {type: string, minLength: 1}
        limit: {type: integer, minimum: 1, maximum: 20, default: 10}
        tags: {type: array, items: {type: string}}
        exact: {type: boolean}
    request: {method: GET, path: /api/search, query: {q: q, limit: limit, tag: tags, exact: exact}}
  get_item:
    description: Get an item by number.
    upstream: legacy
    args: {type: object, required: [id], properties: {id: {type: integer}}}
    request: {method: GET, path: "/api/items/{id}"}
  get_latest:
    description: Get the latest item.
    upstream: legacy
    request: {method: GET, path: /api/items/latest}
  get_report:
    description: Get a report file.
    upstream: legacy
    args: {type: object, required: [name], properties: {name: {type: string}}}
    request: {method: GET, path: "/reports/{name}.json"}
  notify:
    description: Notify a user.
    upstream: legacy
    side_effect: true
    args: {type: object, required: [user, text], additionalProperties: false, properties: {user: {type: string}, text: {type: string}}}
    request: {method: POST, path: "/v1/users/{user}/notifications", body: {text: text}}
`

// echoBackend answers with what it received, so tests see what toolgate
// sent; /health streams its answer in chunks.
type echoBackend struct {
	mu   sync.Mutex
	reqs []string
}

func (e *echoBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	e.mu.Lock()
	e.reqs = append(e.reqs, r.Method+" "+r.URL.RequestURI()+" "+string(body)+" caller="+r.Header.Get("X-Toolgate-Caller"))
	e.mu.Unlock()
	if strings.HasPrefix(r.URL.Path, "/health") || strings.HasPrefix(r.URL.Path, "/admin/") {
		w.Header().Set("Content-Type", "text/plain")
		fl := w.(http.Flusher)
		for i := range 3 {
			fmt.Fprintf(w, "chunk %d\n", i)
			fl.Flush()
			time.Sleep(10 * time.Millisecond)
		}
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"uri": r.URL.RequestURI(), "body": string(body)})
}

func newTransparentHarness(t *testing.T) (*httptest.Server, *echoBackend, *Core) {
	t.Helper()
	eb := &echoBackend{}
	backend := httptest.NewServer(eb)
	t.Cleanup(backend.Close)
	snap, err := config.CompileSource("transparent.yaml", []byte(strings.ReplaceAll(transparentPolicy, "{{url}}", backend.URL)), config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	core, err := NewCore(snap, Options{})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(core.Handler())
	t.Cleanup(func() { front.Close(); core.Close() })
	return front, eb, core
}

func TestTransparentRoutes(t *testing.T) {
	front, eb, _ := newTransparentHarness(t)
	tests := []struct {
		name, method, target, body string
		hdr                        map[string]string
		wantTool                   string
		wantStatus                 contracts.Status
		wantSent                   string // what the backend received
		wantMsg                    string
	}{
		{name: "a legacy search call is the search tool", method: "GET", target: "/api/search?q=go&limit=3",
			wantTool: "search", wantStatus: contracts.StatusOK, wantSent: "GET /api/search?limit=3&q=go "},
		{name: "query values are coerced by the schema (default applied)", method: "GET", target: "/api/search?q=go&exact=true&_=123",
			wantTool: "search", wantStatus: contracts.StatusOK, wantSent: "GET /api/search?exact=true&limit=10&q=go "},
		{name: "repeated parameters become an array", method: "GET", target: "/api/search?q=go&tag=a&tag=b%20c",
			wantTool: "search", wantStatus: contracts.StatusOK, wantSent: "GET /api/search?limit=10&q=go&tag=a&tag=b+c "},
		{name: "a value that does not fit its type is bad_args naming it", method: "GET", target: "/api/search?q=go&limit=abc",
			wantTool: "search", wantStatus: contracts.StatusBadArgs, wantMsg: "Argument limit must be an integer"},
		{name: "a scalar given twice is bad_args", method: "GET", target: "/api/search?q=a&q=b",
			wantTool: "search", wantStatus: contracts.StatusBadArgs, wantMsg: "Argument q"},
		{name: "the schema still applies", method: "GET", target: "/api/search?q=go&limit=50",
			wantTool: "search", wantStatus: contracts.StatusBadArgs, wantMsg: "between 1 and 20"},
		{name: "a placeholder matches one segment and is coerced", method: "GET", target: "/api/items/42",
			wantTool: "get_item", wantStatus: contracts.StatusOK, wantSent: "GET /api/items/42 "},
		{name: "a literal route wins over a placeholder", method: "GET", target: "/api/items/latest",
			wantTool: "get_latest", wantStatus: contracts.StatusOK, wantSent: "GET /api/items/latest "},
		{name: "a placeholder inside a segment", method: "GET", target: "/reports/q3%20sales.json",
			wantTool: "get_report", wantStatus: contracts.StatusOK, wantSent: "GET /reports/q3%20sales.json "},
		{name: "an encoded slash stays in its segment", method: "GET", target: "/reports/a%2Fb.json",
			wantTool: "get_report", wantStatus: contracts.StatusOK, wantSent: "GET /reports/a%2Fb.json "},
		{name: "a body call takes its fields from the JSON body", method: "POST", target: "/v1/users/alice/notifications", body: `{"text":"hi"}`,
			hdr: map[string]string{"Idempotency-Key": "t-1"}, wantTool: "notify", wantStatus: contracts.StatusOK, wantSent: `POST /v1/users/alice/notifications {"text":"hi"}`},
		{name: "a body field the contract does not know is refused", method: "POST", target: "/v1/users/alice/notifications", body: `{"text":"hi","cc":"bob"}`,
			hdr: map[string]string{"Idempotency-Key": "t-2"}, wantTool: "notify", wantStatus: contracts.StatusBadArgs, wantMsg: "Argument cc"},
		{name: "a side-effecting legacy call needs its key", method: "POST", target: "/v1/users/alice/notifications", body: `{"text":"hi"}`,
			wantTool: "notify", wantStatus: contracts.StatusBadArgs, wantMsg: "idempotency key"},
		{name: "a route no tool has is not_found", method: "GET", target: "/api/unknown",
			wantTool: "", wantStatus: contracts.StatusNotFound},
		{name: "the wrong method is not_found", method: "DELETE", target: "/api/search?q=go",
			wantTool: "", wantStatus: contracts.StatusNotFound},
		{name: "one segment too many is not_found", method: "GET", target: "/api/items/1/2",
			wantTool: "", wantStatus: contracts.StatusNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			eb.mu.Lock()
			eb.reqs = nil
			eb.mu.Unlock()
			req, _ := http.NewRequest(tt.method, front.URL+tt.target, strings.NewReader(tt.body))
			req.Header.Set("X-Toolgate-Caller", "agent-1")
			for k, v := range tt.hdr {
				req.Header.Set(k, v)
			}
			resp, err := front.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			env, err := contracts.DecodeEnvelope([]byte(strings.TrimSpace(string(b))))
			if err != nil {
				t.Fatalf("not an envelope: %s", b)
			}
			if env.Status != tt.wantStatus || env.Tool != tt.wantTool {
				t.Fatalf("envelope = %s %s (%s), want %s %s", env.Tool, env.Status, env.Message, tt.wantTool, tt.wantStatus)
			}
			if tt.wantMsg != "" && !strings.Contains(env.Message, tt.wantMsg) {
				t.Errorf("message %q lacks %q", env.Message, tt.wantMsg)
			}
			eb.mu.Lock()
			defer eb.mu.Unlock()
			if tt.wantSent == "" {
				if len(eb.reqs) != 0 {
					t.Errorf("backend received %q", eb.reqs)
				}
				return
			}
			if len(eb.reqs) != 1 || !strings.HasPrefix(eb.reqs[0], tt.wantSent) {
				t.Errorf("backend received %q, want %q", eb.reqs, tt.wantSent)
			}
			if strings.Contains(eb.reqs[0], "caller=agent-1") {
				t.Error("the caller header reached the backend")
			}
		})
	}
}

func TestPassthroughStreamsUntouched(t *testing.T) {
	front, eb, _ := newTransparentHarness(t)
	req, _ := http.NewRequest("GET", front.URL+"/health/deep?x=1", nil)
	req.Header.Set("X-Toolgate-Caller", "agent-1")
	resp, err := front.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.Header.Get("Toolgate-Status") != "" || resp.Header.Get("Content-Type") != "text/plain" {
		t.Errorf("passthrough was wrapped: %v", resp.Header)
	}
	// The first chunk arrives before the backend has finished writing.
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || line != "chunk 0\n" {
		t.Fatalf("first chunk = %q %v", line, err)
	}
	eb.mu.Lock()
	got := eb.reqs[0]
	eb.mu.Unlock()
	if !strings.HasPrefix(got, "GET /health/deep?x=1") || strings.Contains(got, "caller=agent-1") {
		t.Errorf("backend received %q", got)
	}
	// A prefix with a trailing slash does not take a sibling path.
	resp2, err := front.Client().Get(front.URL + "/administrator")
	if err != nil {
		t.Fatal(err)
	}
	resp2.Body.Close()
	if resp2.Header.Get("Toolgate-Status") != "not_found" {
		t.Errorf("/administrator: %v", resp2.Header)
	}
}

func TestTransparentModeOffServesNoLegacyRoute(t *testing.T) {
	eb := &echoBackend{}
	backend := httptest.NewServer(eb)
	defer backend.Close()
	doc := strings.Replace(strings.ReplaceAll(transparentPolicy, "{{url}}", backend.URL), "transparent: true", "transparent: false", 1)
	snap, err := config.CompileSource("t.yaml", []byte(doc), config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	core, _ := NewCore(snap, Options{})
	front := httptest.NewServer(core.Handler())
	defer front.Close()
	resp, err := front.Client().Get(front.URL + "/api/search?q=go")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 || len(eb.reqs) != 0 {
		t.Errorf("%d %v", resp.StatusCode, eb.reqs)
	}
}

func TestRouteConflicts(t *testing.T) {
	snap, err := config.Load("../config/testdata/invalid/ambiguous_routes.yaml", config.Options{})
	if err == nil {
		t.Fatalf("ambiguous routes loaded: %v", snap.ToolNames)
	}
	doc := strings.Replace(transparentPolicy, "transparent: true", "transparent: false", 1)
	doc = strings.ReplaceAll(doc, "{{url}}", "http://127.0.0.1:1")
	doc += `
  get_item_by_name:
    description: Same route as get_item.
    upstream: legacy
    args: {type: object, properties: {name: {type: string}}}
    request: {method: GET, path: "/api/items/{name}"}
`
	s, err := config.CompileSource("t.yaml", []byte(doc), config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := RouteConflicts(s); len(got) != 1 || got[0] != "get_item and get_item_by_name" {
		t.Errorf("conflicts = %v", got)
	}
}

// FuzzTransparentArgs: whatever path and query a legacy client sends,
// extraction never panics, and what it extracts either validates or is
// refused with an argument error.
func FuzzTransparentArgs(f *testing.F) {
	snap, err := config.CompileSource("t.yaml", []byte(strings.ReplaceAll(transparentPolicy, "{{url}}", "http://127.0.0.1:1")), config.Options{})
	if err != nil {
		f.Fatal(err)
	}
	core, err := NewCore(snap, Options{})
	if err != nil {
		f.Fatal(err)
	}
	st := core.state.Load()
	for _, s := range []string{"/api/search?q=go&limit=3", "/api/items/%2e%2e", "/reports/.json", "/api/search?q=%zz", "/api/search?tag=a&tag=b&limit=-0", "/v1/users/%0d%0a/notifications"} {
		f.Add(s, `{"text":"x"}`)
	}
	f.Fuzz(func(t *testing.T, target, body string) {
		u, err := url.Parse(target)
		if err != nil {
			return
		}
		for _, method := range []string{"GET", "POST"} {
			tl, vals := st.router.match(method, u.EscapedPath())
			if tl == nil {
				continue
			}
			args, err := extractArgs(tl.contract, vals, u.RawQuery, []byte(body))
			if err != nil {
				if _, ok := err.(*contracts.ArgError); !ok {
					t.Fatalf("extraction error %T is not an argument error", err)
				}
				continue
			}
			delete(args, contracts.IdempotencyKeyArg)
			if err := tl.contract.Schema.Validate(args); err != nil {
				continue
			}
			bound, err := tl.contract.Binding.Bind(args)
			if err != nil {
				continue
			}
			if strings.ContainsAny(bound.Path+bound.Query, "\r\n") {
				t.Fatalf("CR/LF in the bound request: %q", bound.Path+bound.Query)
			}
		}
	})
}
