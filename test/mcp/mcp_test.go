// Package mcp_test runs toolgate's MCP front against the official
// TypeScript SDK client and the official MCP conformance suite, both from
// npm and pinned in package-lock.json here. Each test starts a real
// toolgate (core, agent handler, example backends) on a loopback port and
// runs a Node program against it.
//
// Without node and npm on PATH the tests skip, unless TOOLGATE_REQUIRE_NODE
// is set (make test sets it), in which case they fail.
package mcp_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/examples"
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
// (conformance-tools.yaml) on a loopback port and returns its base URL.
func startToolgate(t *testing.T) string {
	t.Helper()
	search := httptest.NewServer(examples.NewSearchBackend(examples.SearchOptions{SlowDelay: 2 * time.Second}))
	t.Cleanup(search.Close)
	notify := httptest.NewServer(examples.NewNotifyBackend(examples.NotifyOptions{}))
	t.Cleanup(notify.Close)
	fixture := httptest.NewServer(fixtureBackend())
	t.Cleanup(fixture.Close)

	dir := t.TempDir()
	example := strings.NewReplacer("http://127.0.0.1:7001", search.URL, "http://127.0.0.1:7002", notify.URL).Replace(string(examples.Policy()))
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
	core, err := proxy.NewCore(snap, proxy.Options{Registry: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", core.MCPHandler(proxy.MCPOptions{}))
	mux.Handle("/", core.Handler())
	srv := httptest.NewServer(mux)
	t.Cleanup(func() {
		srv.Close()
		core.Close()
	})
	return srv.URL
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

// runNode runs a Node program in this directory with TOOLGATE_URL set and
// fails the test with its output if it fails.
func runNode(t *testing.T, baseURL string, timeout time.Duration, name string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), "TOOLGATE_URL="+baseURL, "NO_COLOR=1", "FORCE_COLOR=0")
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v after %s\n%s", name, strings.Join(args, " "), err, time.Since(start).Round(time.Millisecond), out)
	}
	t.Logf("%s %s: ok in %s\n%s", name, strings.Join(args, " "), time.Since(start).Round(time.Millisecond), out)
}

func TestTypeScriptSDKClient(t *testing.T) {
	requireNode(t)
	base := startToolgate(t)
	runNode(t, base, 2*time.Minute, "node", "--test", "--test-reporter=spec", "client.test.mjs")
}

func TestConformanceSuite(t *testing.T) {
	requireNode(t)
	base := startToolgate(t)
	runNode(t, base, 5*time.Minute, filepath.Join("node_modules", ".bin", "conformance"),
		"server", "--url", base+"/mcp", "--suite", "all", "--expected-failures", "conformance-baseline.yaml")
}
