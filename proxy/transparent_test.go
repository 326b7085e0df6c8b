package proxy

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/internal/testkit/proxytest"
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
	core := newTestCore(t, strings.ReplaceAll(transparentPolicy, "{{url}}", backend.URL), Options{})
	front := httptest.NewServer(agentHandler(core))
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
			wantTool: "search", wantStatus: contracts.StatusOK, wantSent: "GET /api/search?q=go&limit=3 "},
		{name: "query values are coerced by the schema (default applied)", method: "GET", target: "/api/search?q=go&exact=true&_=123",
			wantTool: "search", wantStatus: contracts.StatusOK, wantSent: "GET /api/search?q=go&limit=10&exact=true "},
		{name: "repeated parameters become an array", method: "GET", target: "/api/search?q=go&tag=a&tag=b%20c",
			wantTool: "search", wantStatus: contracts.StatusOK, wantSent: "GET /api/search?q=go&limit=10&tag=a&tag=b+c "},
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
			env, _, err := proxytest.ReadEnvelope(resp)
			if err != nil {
				t.Fatal(err)
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
	front := httptest.NewServer(agentHandler(core))
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
	if _, err := config.CompileSource("t.yaml", []byte(doc), config.Options{}); err != nil {
		t.Fatal(err)
	}
	// Where calls are identified by their route, config refuses the pair
	// (config/routes.go, the one home of route ambiguity).
	_, err = config.CompileSource("t.yaml", []byte(doc), config.Options{ByRoute: true})
	if err == nil || !strings.Contains(err.Error(), "tools.get_item_by_name.request.path") || !strings.Contains(err.Error(), "ambiguous with tool get_item ") {
		t.Errorf("conflict = %v", err)
	}
}

// FuzzTransparentArgs: whatever path and query a legacy client sends,
// extraction never panics, and what it extracts either validates or is
// refused with an argument error.
func FuzzTransparentArgs(f *testing.F) {
	core := newTestCore(f, strings.ReplaceAll(transparentPolicy, "{{url}}", "http://127.0.0.1:1"), Options{})
	v := core.View()
	for _, s := range []string{"/api/search?q=go&limit=3", "/api/items/%2e%2e", "/reports/.json", "/api/search?q=%zz", "/api/search?tag=a&tag=b&limit=-0", "/v1/users/%0d%0a/notifications"} {
		f.Add(s, `{"text":"x"}`)
	}
	f.Fuzz(func(t *testing.T, target, body string) {
		u, err := url.Parse(target)
		if err != nil {
			return
		}
		for _, method := range []string{"GET", "POST"} {
			route, ok := v.MatchRoute(method, u.EscapedPath())
			if !ok {
				continue
			}
			tl := route.tool
			args, err := route.Args(u.RawQuery, nil, []byte(body))
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

// rawRequest sends one request over a raw connection, so the path goes out
// exactly as written (Go's client would normalise or refuse some of
// these), and returns the answer.
func rawRequest(t *testing.T, addr, method, target, body string) (*http.Response, string) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		method, target, addr, len(body), body)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp, string(raw)
}

// TestPassthroughNeverReachesAToolRoute: a path under a passthrough prefix
// that a backend could resolve to another path (an encoded dot segment, an
// encoded slash or backslash, a backslash, a dot segment with a
// ;parameter) is not passed through: it would reach a tool's route with no
// schema, key, access or budget. Each is answered by toolgate and the
// backend sees nothing.
func TestPassthroughNeverReachesAToolRoute(t *testing.T) {
	front, eb, _ := newTransparentHarness(t)
	addr := front.Listener.Addr().String()
	const body = `{"text":"transfer everything"}`
	for _, target := range []string{
		"/health/%2e%2e/v1/users/bob/notifications",
		"/health/%2E%2E/v1/users/bob/notifications",
		"/health/.%2e/v1/users/bob/notifications",
		"/health/%2e./v1/users/bob/notifications",
		"/health%2f..%2fv1/users/bob/notifications",
		"/health/x%2F..%2F..%2Fv1/users/bob/notifications",
		"/health/%5c..%5cv1/users/bob/notifications",
		"/health\\..\\v1/users/bob/notifications",
		"/health/..;/v1/users/bob/notifications",
		"/health/..;x=1/v1/users/bob/notifications",
		"/health/%2e%2e;/v1/users/bob/notifications",
		"/health/x/%2e/../../v1/users/bob/notifications",
		"/health/%00/../v1/users/bob/notifications",
		"/health/%zz",
		"/health/%c0%ae%c0%ae/v1/users/bob/notifications",
		"/health/%ef%bc%8e%ef%bc%8e/v1/users/bob/notifications",
		"/admin/%2e%2e/v1/users/bob/notifications",
	} {
		t.Run(target, func(t *testing.T) {
			eb.mu.Lock()
			eb.reqs = nil
			eb.mu.Unlock()
			resp, raw := rawRequest(t, addr, "POST", target, body)
			eb.mu.Lock()
			sent := slices.Clone(eb.reqs)
			eb.mu.Unlock()
			if len(sent) > 0 {
				t.Fatalf("the backend received %q", sent)
			}
			switch {
			case resp.StatusCode == http.StatusBadRequest && resp.Header.Get("Toolgate-Status") == "":
				// Refused by the HTTP server before any handler.
			case resp.StatusCode == http.StatusMovedPermanently || resp.StatusCode == http.StatusTemporaryRedirect:
				// A literal dot segment: the router redirects to the clean
				// path, which is a tool's route and runs its contract.
			case resp.Header.Get("Toolgate-Status") != string(contracts.StatusNotFound) || resp.StatusCode != http.StatusNotFound:
				t.Errorf("HTTP %d %s: %.300s", resp.StatusCode, resp.Header.Get("Toolgate-Status"), raw)
			}
		})
	}
}

// TestPassthroughPrefixesMatchWholeSegments pins what a prefix takes: the
// prefix itself and paths below it, never a sibling name; harmless escapes
// go through as they came.
func TestPassthroughPrefixesMatchWholeSegments(t *testing.T) {
	front, eb, _ := newTransparentHarness(t)
	addr := front.Listener.Addr().String()
	for _, tc := range []struct {
		target   string
		wantSent string // the request line the backend received; "" for none
	}{
		{"/health", "GET /health"},
		{"/health/", "GET /health/"},
		{"/health/deep/er?x=1", "GET /health/deep/er?x=1"},
		{"/health/a%20b", "GET /health/a%20b"},
		{"/health/%41", "GET /health/%41"},
		{"/health/file.json", "GET /health/file.json"},
		{"/health/..hidden", "GET /health/..hidden"},
		{"/healthz-admin", ""},
		{"/healthz", ""},
		{"/heal", ""},
		{"/admin/x", "GET /admin/x"},
		{"/admin", ""},
		{"/administrator", ""},
	} {
		t.Run(tc.target, func(t *testing.T) {
			eb.mu.Lock()
			eb.reqs = nil
			eb.mu.Unlock()
			resp, raw := rawRequest(t, addr, "GET", tc.target, "")
			eb.mu.Lock()
			sent := slices.Clone(eb.reqs)
			eb.mu.Unlock()
			if tc.wantSent == "" {
				if len(sent) > 0 || resp.Header.Get("Toolgate-Status") != string(contracts.StatusNotFound) {
					t.Errorf("HTTP %d %s, backend received %q: %.200s", resp.StatusCode, resp.Header.Get("Toolgate-Status"), sent, raw)
				}
				return
			}
			if len(sent) != 1 || !strings.HasPrefix(sent[0], tc.wantSent+" ") || resp.Header.Get("Toolgate-Status") != "" {
				t.Errorf("HTTP %d %s, backend received %q, want %q", resp.StatusCode, resp.Header.Get("Toolgate-Status"), sent, tc.wantSent)
			}
		})
	}
}

func TestCleanPassthroughPath(t *testing.T) {
	for _, tc := range []struct {
		escaped, want string
		ok            bool
	}{
		{"/health", "/health", true},
		{"/health/a%20b", "/health/a b", true},
		{"/health/%7e", "/health/~", true},
		{"/health/..x/x..", "/health/..x/x..", true},
		{"/", "/", true},
		{"health", "", false},
		{"", "", false},
		{"/health/%2e%2e/x", "", false},
		{"/health/%2Ex", "", false},
		{"/health/%2fx", "", false},
		{"/health/%5Cx", "", false},
		{"/health\\x", "", false},
		{"/health/%00", "", false},
		{"/health/%7F", "", false},
		{"/health/%", "", false},
		{"/health/%4", "", false},
		{"/health/%zz", "", false},
		{"/health/..", "", false},
		{"/health/.", "", false},
		{"/./health", "", false},
		{"/health/..;a=b", "", false},
		{"/health/.;", "", false},
		{"/health/%c0%ae%c0%ae/x", "", false},
		{"/health/%ff", "", false},
		{"/health/%ef%bc%8e%ef%bc%8e/x", "", false},
		{"/health/a%ef%bc%8fb", "", false},
		{"/health/%ef%bc%bc", "", false},
		{"/health/%e2%80%a5/x", "", false},
		{"/health/caf%c3%a9", "/health/café", true},
		{"/health/%e9%87%8f%e5%ad%90", "/health/量子", true},
	} {
		got, ok := cleanPassthroughPath(tc.escaped)
		if got != tc.want || ok != tc.ok {
			t.Errorf("cleanPassthroughPath(%q) = %q, %v; want %q, %v", tc.escaped, got, ok, tc.want, tc.ok)
		}
	}
}

// FuzzCleanPassthroughPath: a path the check lets through decodes to the
// path returned, keeps its segments (no encoded slash joins or splits
// them), and has no dot segment, backslash or control character, so the
// backend serves the path that was matched.
func FuzzCleanPassthroughPath(f *testing.F) {
	for _, s := range []string{"/health", "/health/%2e%2e/x", "/a%2fb", "/a/..;/b", "/caf%c3%a9", "/%c0%ae", "/%ef%bc%8e%ef%bc%8e", "/a b", "/%", "//x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, escaped string) {
		path, ok := cleanPassthroughPath(escaped)
		if !ok {
			return
		}
		if dec, err := url.PathUnescape(escaped); err != nil || dec != path {
			t.Fatalf("%q: returned %q, decodes to %q (%v)", escaped, path, dec, err)
		}
		if strings.Count(escaped, "/") != strings.Count(path, "/") {
			t.Fatalf("%q: decoding changed the segments: %q", escaped, path)
		}
		for _, seg := range strings.Split(path[1:], "/") {
			name, _, _ := strings.Cut(seg, ";")
			if name == "." || name == ".." {
				t.Fatalf("%q: dot segment in %q", escaped, path)
			}
		}
		for _, r := range path {
			if r == '\\' || r < 0x20 || r == 0x7f {
				t.Fatalf("%q: %q in %q", escaped, r, path)
			}
		}
	})
}
