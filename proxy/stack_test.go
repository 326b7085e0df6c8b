package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/toolgate/toolgate/examples"
)

// TestACallStaysWithinASmallStack: a call in flight holds the goroutine of
// the agent's connection, and that goroutine's stack is the largest part
// of what the call costs while it waits. Go doubles a stack that runs out,
// and a stack grown past 8 KiB stays at 16 KiB while its call waits: one
// value too many on the call's path (an outcome returned by value through
// five stages, a request built on the stack) costs 8 KiB more for every
// call in flight (bench/RESULTS.md, the in-flight table).
//
// The calls run in a process of their own whose stacks may not grow past
// 8 KiB (debug.SetMaxStack): any goroutine that needs more ends the
// process with a stack overflow and the trace of the path that needed it,
// printed below (built without the race detector, whose frames are
// larger than toolgate's). Calls are logged at info, the default level (the
// log line is written on the call's stack too), and traced on a second
// core. Each front is called through a real HTTP server, on a
// new agent connection and backend connection (the dial's path) and again
// on both kept alive.
func TestACallStaysWithinASmallStack(t *testing.T) {
	if os.Getenv("TOOLGATE_TEST_SMALL_STACK") == "1" {
		callsWithinASmallStack(t)
		return
	}
	if testing.Short() {
		t.Skip("runs a process of its own")
	}
	bin := os.Args[0]
	if raceEnabled {
		// The race detector's frames are not the ones toolgate ships:
		// the process is this package's tests built without it.
		goTool, err := exec.LookPath("go")
		if err != nil {
			t.Skip("no go command to build the tests without -race")
		}
		bin = filepath.Join(t.TempDir(), "proxy.test")
		if out, err := exec.Command(goTool, "test", "-c", "-o", bin, ".").CombinedOutput(); err != nil {
			t.Fatalf("go test -c: %v\n%s", err, out)
		}
	}
	cmd := exec.Command(bin, "-test.run=^TestACallStaysWithinASmallStack$", "-test.count=1")
	cmd.Env = append(os.Environ(), "TOOLGATE_TEST_SMALL_STACK=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		text := string(out)
		if i := strings.Index(text, "fatal error: stack overflow"); i >= 0 {
			text = text[i:min(len(text), i+6000)]
		}
		t.Fatalf("the calls did not run within 8 KiB of stack: %v\n%s", err, text)
	}
}

// callsWithinASmallStack is the process TestACallStaysWithinASmallStack
// runs.
func callsWithinASmallStack(t *testing.T) {
	backend := httptest.NewServer(examples.NewSearchBackend(examples.SearchOptions{}))
	defer backend.Close()
	notifier := examples.NewNotifyBackend(examples.NotifyOptions{Users: []string{"u1", "u2"}})
	notify := httptest.NewServer(notifier)
	defer notify.Close()
	// The search upstream holds a credential, so that every answer is
	// scanned for it (redact.go) within the bound too.
	doc := strings.NewReplacer(
		"url: http://127.0.0.1:7001", "url: "+backend.URL+"\n    auth: {bearer: {token: stack-test-token-1}}",
		"url: http://127.0.0.1:7002", "url: "+notify.URL,
		"\naccess:\n", "\naccess:\n  shared_credentials: [search]\n",
		"\nserver:\n", "\nserver:\n  transparent: true\n",
	).Replace(string(examples.Policy()))
	mcpCall := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search_articles","arguments":{"q":"go","limit":5}}}`
	mcpSend := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"send_notification","arguments":{"user_id":"u1","text":"hi","idempotency_key":"stack-3"}}}`
	requests := []string{
		post("/v1/tools/search_articles", "application/json", `{"q":"go","limit":5}`),
		"GET /api/search?q=go&limit=5 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
		strings.Replace(post("/mcp", "application/json", mcpCall), "\r\n\r\n", "\r\nAccept: application/json, text/event-stream\r\n\r\n", 1),
		// A side-effecting call on the tool endpoint, on its legacy route
		// and over MCP, each sent twice on one connection: the second is
		// a replay of the stored record.
		strings.Replace(post("/v1/tools/send_notification", "application/json", `{"user_id":"u1","text":"hi"}`), "\r\n\r\n", "\r\nIdempotency-Key: stack-1\r\n\r\n", 1),
		strings.Replace(post("/v1/users/u2/notifications", "application/json", `{"text":"hi"}`), "\r\n\r\n", "\r\nIdempotency-Key: stack-2\r\n\r\n", 1),
		strings.Replace(post("/mcp", "application/json", mcpSend), "\r\n\r\n", "\r\nAccept: application/json, text/event-stream\r\n\r\n", 1),
	}
	// Logged at info, the default level; then traced as well, with spans
	// exported in batches as an OTLP exporter does.
	logger := slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo}))
	traced := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewInMemoryExporter()))
	defer func() { _ = traced.Shutdown(context.Background()) }()
	cores := []*Core{
		newTestCore(t, doc, Options{Logger: logger}),
		newTestCore(t, doc, Options{Logger: logger, TracerProvider: traced}),
	}
	var agents []*httptest.Server
	for _, core := range cores {
		agent := httptest.NewServer(agentHandler(core))
		defer agent.Close()
		agents = append(agents, agent)
	}

	// A first round warms what runs once in a process (encoders built on
	// first use, sync.Once); the second, on new connections, runs within
	// 8 KiB of stack per goroutine.
	for i, core := range cores {
		round(t, agents[i].Listener.Addr().String(), core, requests)
	}
	// New idempotency keys, so that the side-effecting calls send (the
	// claim, the send, the settle) and then replay within the bound too.
	fresh := make([]string, len(requests))
	for i, req := range requests {
		fresh[i] = strings.NewReplacer("Idempotency-Key: stack-", "Idempotency-Key: small-", `"idempotency_key":"stack-`, `"idempotency_key":"small-`).Replace(req)
	}
	old := debug.SetMaxStack(8 << 10)
	defer debug.SetMaxStack(old)
	for i, core := range cores {
		round(t, agents[i].Listener.Addr().String(), core, fresh)
	}
	debug.SetMaxStack(old)
	// Every side-effecting call was sent once per key (the backend
	// dedupes the second core's on the forwarded key), none refused.
	if got := notifier.Count(); got != 6 {
		t.Errorf("the notify backend performed %d sends, want 6 (three keys in each of two rounds)", got)
	}
}

// round sends each request twice on a new agent connection: the backend's
// connection is new for the first (the dial's path), then kept alive.
func round(t *testing.T, addr string, core *Core, requests []string) {
	for _, req := range requests {
		for _, up := range core.state.Load().upstreams {
			up.closeIdle()
		}
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(nc)
		for range 2 {
			if _, err := nc.Write([]byte(req)); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Errorf("%.40q: HTTP %d", req, resp.StatusCode)
			}
		}
		nc.Close()
	}
}

// post is an HTTP/1.1 POST of body, as an agent writes it.
func post(path, contentType, body string) string {
	return fmt.Sprintf("POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s", path, contentType, len(body), body)
}
