package proxy_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/internal/testkit/mcptest"
	"github.com/toolgate/toolgate/internal/testkit/proxytest"
	"github.com/toolgate/toolgate/proxy"
	"github.com/toolgate/toolgate/proxy/mcpfront"
)

// requestLineBackend is a raw TCP backend: it logs the request line of
// every request exactly as it came over the wire (no HTTP library
// normalises it first) and answers 200 {"a":1}.
type requestLineBackend struct {
	ln    net.Listener
	mu    sync.Mutex
	lines []string
}

func newRequestLineBackend(t *testing.T) *requestLineBackend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &requestLineBackend{ln: ln}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { b.serve(conn) })
		}
	})
	return b
}

func (b *requestLineBackend) serve(conn net.Conn) {
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(conn)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return
		}
		b.mu.Lock()
		b.lines = append(b.lines, strings.TrimRight(line, "\r\n"))
		b.mu.Unlock()
		for { // the headers; the tools here send no body
			h, err := br.ReadString('\n')
			if err != nil {
				return
			}
			if h == "\r\n" || h == "\n" {
				break
			}
		}
		if _, err := io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 7\r\n\r\n{\"a\":1}"); err != nil {
			return
		}
	}
}

// take returns the request lines logged since the last take.
func (b *requestLineBackend) take() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	lines := b.lines
	b.lines = nil
	return lines
}

const dotSegmentPolicy = `
version: 1
server: {transparent: true}
upstreams:
  reports: {url: "http://%s", timeout: 2s}
tools:
  get_report:
    description: Read one report.
    upstream: reports
    args:
      type: object
      required: [year, name]
      additionalProperties: false
      properties: {year: {type: string}, name: {type: string}}
    request: {method: GET, path: "/reports/{year}/{name}"}
`

// TestDotSegmentPathValuesAreNeverSent: a path argument that a server may
// read as "." or ".." (RFC 3986 makes %2E%2E the same segment as "..";
// behind nginx, /reports/{year}/{name} with year ".." and name "admin"
// reaches /admin) is bad_args naming the argument, on the tool endpoint,
// over MCP and on the transparent route, and the backend receives
// nothing. The backend logs raw request lines, so nothing on the wire can
// hide a dot segment.
func TestDotSegmentPathValuesAreNeverSent(t *testing.T) {
	backend := newRequestLineBackend(t)
	core, err := proxy.NewCore(proxytest.Snapshot(t, fmt.Sprintf(dotSegmentPolicy, backend.ln.Addr())), proxy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(mcptest.AgentHandler(core, mcpfront.Options{}))
	t.Cleanup(func() { front.Close(); core.Close() })
	refused := []string{"..", ".", "%2e%2E", "%2E%2e", ".%2E", "%2e.", "%252e%252e", "%u002e%u002e", "..;x", "../admin", "..\\admin", "．．", "%c0%ae%c0%ae"}

	post := func(t *testing.T, args map[string]string) (*http.Response, *contracts.Envelope) {
		t.Helper()
		body, _ := json.Marshal(args)
		resp, env, err := proxytest.PostCall(front.Client(), front.URL, "get_report", string(body), nil)
		if err != nil {
			t.Fatal(err)
		}
		return resp, env
	}
	wantRefused := func(t *testing.T, status contracts.Status, message string) {
		t.Helper()
		if status != contracts.StatusBadArgs || !strings.Contains(message, "Argument year must not be empty, \".\" or \"..\"") {
			t.Errorf("%s: %s", status, message)
		}
		if sent := backend.take(); len(sent) > 0 {
			t.Errorf("the backend received %q", sent)
		}
	}

	t.Run("a plain value reaches the backend as sent", func(t *testing.T) {
		_, env := post(t, map[string]string{"year": "2024", "name": "q1.json"})
		if sent := backend.take(); env.Status != contracts.StatusOK || !slices.Equal(sent, []string{"GET /reports/2024/q1.json HTTP/1.1"}) {
			t.Fatalf("%s: %s; backend saw %q", env.Status, env.Message, sent)
		}
	})
	for _, year := range refused {
		t.Run("tool endpoint: year "+year, func(t *testing.T) {
			resp, env := post(t, map[string]string{"year": year, "name": "admin"})
			if resp.StatusCode != http.StatusBadRequest {
				t.Errorf("HTTP %d", resp.StatusCode)
			}
			wantRefused(t, env.Status, env.Message)
		})
	}
	cs := mcptest.Connect(t, front.URL+"/mcp", mcptest.Revisions[len(mcptest.Revisions)-1], nil)
	for _, year := range refused {
		t.Run("MCP: year "+year, func(t *testing.T) {
			res := mcptest.ResultOf(t, mcptest.CallTool(t, cs, "get_report", map[string]any{"year": year, "name": "admin"}))
			wantRefused(t, res.Status, res.Text)
		})
	}
	// A legacy client's path is decoded once into the arguments; these
	// decode to a value that reads as ".." at a server that decodes again
	// or normalises Unicode. (A literal or %2E dot segment never gets this
	// far: the agent port's router redirects it to the clean path.)
	for _, target := range []string{"/reports/%252e%252E/admin", "/reports/%25u002e%25u002e/admin", "/reports/%EF%BC%8E%EF%BC%8E/admin", "/reports/..%3Bx/admin"} {
		t.Run("transparent route: "+target, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodGet, front.URL+target, nil)
			resp, err := front.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var env contracts.Envelope
			if err := json.NewDecoder(resp.Body).Decode(&env); err != nil {
				t.Fatalf("HTTP %d: %v", resp.StatusCode, err)
			}
			if env.Tool != "get_report" {
				t.Errorf("tool %q", env.Tool)
			}
			wantRefused(t, env.Status, env.Message)
		})
	}
}
