// Package mcp_test runs toolgate's MCP front against the clients agents
// use and the official MCP conformance suite, all from npm and pinned in
// package-lock.json here: the TypeScript SDK clients 1.11, 1.17 and 1.32
// and the v2 client (clients.mjs), and LangChain's MCP adapters with a
// LangGraph ToolNode. Each test starts a real toolgate (core, agent
// handler, example backends) on a loopback port and runs a Node program
// against it.
//
// Without node and npm on PATH the tests skip, unless TOOLGATE_REQUIRE_NODE
// is set (make test sets it), in which case they fail. Under -short (make
// quick) they skip.
package mcp_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/examples"
	"github.com/toolgate/toolgate/internal/testkit/coretest"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/proxy"
)

var (
	depsOnce sync.Once
	depsErr  error
	depsOut  []byte
)

// requireNode skips or fails the test when Node.js is missing, then makes
// sure node_modules matches package-lock.json.
func requireNode(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("runs Node.js clients")
	}
	for _, bin := range []string{"node", "npm"} {
		if _, err := exec.LookPath(bin); err != nil {
			if os.Getenv("TOOLGATE_REQUIRE_NODE") != "" {
				t.Fatalf("%s is not on PATH and TOOLGATE_REQUIRE_NODE is set", bin)
			}
			t.Skipf("%s is not on PATH; set TOOLGATE_REQUIRE_NODE=1 to make this a failure", bin)
		}
	}
	depsOnce.Do(func() {
		cmd := exec.Command("bash", "ensure-deps.sh")
		depsOut, depsErr = cmd.CombinedOutput()
	})
	if depsErr != nil {
		t.Fatalf("installing the Node test dependencies: %v\n%s", depsErr, depsOut)
	}
}

// startToolgate serves the example policy plus the conformance tools
// (conformance-tools.yaml) on a loopback port, as toolgate serve does, and
// returns its base URL and policy.
func startToolgate(t *testing.T) (string, *policy.Snapshot) {
	t.Helper()
	search := httptest.NewServer(examples.NewSearchBackend(examples.SearchOptions{SlowDelay: 2 * time.Second}))
	t.Cleanup(search.Close)
	notify := httptest.NewServer(examples.NewNotifyBackend(examples.NotifyOptions{}))
	t.Cleanup(notify.Close)
	fixture := httptest.NewServer(fixtureBackend())
	t.Cleanup(fixture.Close)

	dir := t.TempDir()
	example := strings.NewReplacer("http://127.0.0.1:7001", search.URL, "http://127.0.0.1:7002", notify.URL,
		// The clients call the failing backend on purpose, one after the
		// other; the breaker must not open between them.
		"consecutive_failures: 5,", "consecutive_failures: 1000,", "min_requests: 20,", "min_requests: 1000,",
		// A bound the example searches exceed, so the clients see data cut.
		"observation_max_chars: 1800", "observation_max_chars: 600").Replace(string(examples.Policy()))
	tools, err := os.ReadFile("conformance-tools.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"example.yaml": []byte(example), "conformance-tools.yaml": tools} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	snap, err := config.Load(dir, config.Options{LookupEnv: func(name string) (string, bool) {
		if name == "FIXTURE_URL" {
			return fixture.URL, true
		}
		return "", false
	}})
	if err != nil {
		t.Fatal(err)
	}
	srv, _ := coretest.Serve(t, snap, proxy.Options{})
	return srv.URL, snap
}

// fixtureBackend is the backend of the conformance tools.
func fixtureBackend() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /simple-text", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"text":"This is a simple text response for testing."}`)
	})
	mux.HandleFunc("GET /error", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "This tool intentionally returns an error for testing", http.StatusInternalServerError)
	})
	mux.HandleFunc("POST /echo", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.Copy(w, r.Body)
	})
	return mux
}

// runNode runs a Node program in this directory with TOOLGATE_URL and
// OBSERVATION_MAX_CHARS set and fails the test with its output if it
// fails.
func runNode(t *testing.T, baseURL string, snap *policy.Snapshot, timeout time.Duration, name string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), "TOOLGATE_URL="+baseURL, "NO_COLOR=1", "FORCE_COLOR=0",
		"OBSERVATION_MAX_CHARS="+strconv.Itoa(snap.Server.ObservationMaxChars))
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v after %s\n%s", name, strings.Join(args, " "), err, time.Since(start).Round(time.Millisecond), out)
	}
	t.Logf("%s %s: ok in %s\n%s", name, strings.Join(args, " "), time.Since(start).Round(time.Millisecond), out)
}

func TestTypeScriptSDKClient(t *testing.T) {
	requireNode(t)
	base, snap := startToolgate(t)
	runNode(t, base, snap, 2*time.Minute, "node", "--test", "--test-reporter=spec", "client.test.mjs")
}

// TestTypeScriptClientEras runs the SDK clients 1.11, 1.17 and 1.32 and the
// v2 client (legacy and automatic negotiation): each lists and calls every
// example tool at the revision it negotiates. Its log ends with the table
// client | revision | result.
func TestTypeScriptClientEras(t *testing.T) {
	requireNode(t)
	base, snap := startToolgate(t)
	runNode(t, base, snap, 2*time.Minute, "node", "--test", "--test-reporter=spec", "clients.test.mjs")
}

// TestLangChainAdapter runs LangChain's MCP adapters with a LangGraph
// ToolNode: the model reads each outcome's whole observation and at most
// observation_max_chars plus the status fields.
func TestLangChainAdapter(t *testing.T) {
	requireNode(t)
	base, snap := startToolgate(t)
	runNode(t, base, snap, 2*time.Minute, "node", "--test", "--test-reporter=spec", "langchain.test.mjs")
}

func TestConformanceSuite(t *testing.T) {
	requireNode(t)
	base, snap := startToolgate(t)
	runNode(t, base, snap, 5*time.Minute, filepath.Join("node_modules", ".bin", "conformance"),
		"server", "--url", base+"/mcp", "--suite", "all", "--expected-failures", "conformance-baseline.yaml")
}
