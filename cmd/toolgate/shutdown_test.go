package main

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/examples"
	"github.com/toolgate/toolgate/internal/testkit/policytest"
	"github.com/toolgate/toolgate/internal/testkit/proxytest"
)

// buildToolgate builds this command into a temporary directory, with the
// race detector when the tests have it.
func buildToolgate(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds toolgate and runs it as a process")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go tool is needed to build toolgate: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "toolgate")
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	out, err := exec.Command(goTool, append(args, ".")...).CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// process is a toolgate process started by a test.
type process struct {
	t      *testing.T
	cmd    *exec.Cmd
	logs   *proxytest.LogBuffer
	agent  string // host:port of serve's agent port, or of extproc's gRPC port
	admin  string // host:port
	client *http.Client
}

// startProcess runs `toolgate serve` (or, with "extproc" first in args,
// `toolgate extproc`) and waits for its "toolgate started" ("toolgate
// extproc started") log line, which names the ports it listens on.
func startProcess(t *testing.T, bin string, args ...string) *process {
	t.Helper()
	p := &process{t: t, logs: &proxytest.LogBuffer{}}
	started := "toolgate started"
	if len(args) > 0 && args[0] == "extproc" {
		started = "toolgate extproc started"
	} else {
		args = append([]string{"serve"}, args...)
	}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stderr = p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.client = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{}}
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
			_ = p.cmd.Wait()
		}
		p.client.CloseIdleConnections()
		if t.Failed() {
			t.Logf("toolgate's log:\n%s", p.logs.String())
		}
	})
	policytest.Eventually(t, "toolgate to start", func() bool {
		for _, line := range strings.Split(p.logs.String(), "\n") {
			var rec struct{ Msg, Listen, Admin string }
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == started {
				p.agent, p.admin = rec.Listen, rec.Admin
				return true
			}
		}
		if p.cmd.ProcessState != nil {
			t.Fatalf("toolgate exited: %s", p.logs.String())
		}
		return false
	})
	return p
}

func (p *process) signal(sig syscall.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatal(err)
	}
}

// getStatus fetches an admin path on a fresh connection; 0 when the
// connection failed.
func (p *process) getStatus(path string) int {
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get("http://" + p.admin + path)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

func (p *process) config() configView {
	p.t.Helper()
	resp, err := p.client.Get("http://" + p.admin + "/v1/config")
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	var v configView
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		p.t.Fatal(err)
	}
	return v
}

// TestSIGTERMDrainsCallsInFlight runs a real toolgate process, reloads it
// with SIGHUP, then stops it with SIGTERM while slow calls are in flight:
// /readyz fails at once, new calls are still served during the drain delay,
// new connections are refused after it, every call in flight gets its
// envelope, and the process exits 0.
func TestSIGTERMDrainsCallsInFlight(t *testing.T) {
	bin := buildToolgate(t)
	held := func(r *http.Request) bool {
		return r.URL.Query().Get("q") == examples.QuerySlow || strings.HasPrefix(r.URL.Path, "/v1/users/carol/")
	}
	search := newGatedBackend(examples.NewSearchBackend(examples.SearchOptions{SlowDelay: -1}), held)
	notify := newGatedBackend(examples.NewNotifyBackend(examples.NotifyOptions{}), held)
	searchSrv, notifySrv := httptest.NewServer(search), httptest.NewServer(notify)
	defer searchSrv.Close()
	defer notifySrv.Close()
	released := false
	release := func() {
		if !released {
			released = true
			close(search.release)
			close(notify.release)
		}
	}
	defer release()

	params := policyParams{Search: searchSrv.URL, Notify: notifySrv.URL, SlowTimeout: "30s"}
	path := filepath.Join(t.TempDir(), "policy.yaml")
	policytest.WriteFile(t, path, testPolicy(params))
	p := startProcess(t, bin, "-config", path, "-drain-delay", "3s", "-grace", "20s", "-watch=false")
	policytest.Eventually(t, "/readyz to pass", func() bool { return p.getStatus("/readyz") == http.StatusOK })

	// SIGHUP reloads (the watcher is off, so nothing else does).
	params.Extra = true
	policytest.WriteFile(t, path, testPolicy(params))
	p.signal(syscall.SIGHUP)
	policytest.Eventually(t, "the SIGHUP reload", func() bool { return p.config().Generation == 2 })
	agentURL := "http://" + p.agent
	if _, err := callTool(p.client, agentURL, "find_articles", `{"q":"go"}`); err != nil {
		t.Fatal(err)
	}

	// Slow calls in flight, held at the backends.
	type result struct {
		a   answer
		err error
	}
	const slowCalls = 4
	results := make(chan result, slowCalls+1)
	for range slowCalls {
		go func() {
			a, err := callTool(p.client, agentURL, "slow_search", `{"q":"slow"}`)
			results <- result{a, err}
		}()
	}
	go func() {
		a, err := callTool(p.client, agentURL, "send_notification", `{"user_id":"carol","text":"hi"}`, "Idempotency-Key", "drain-1")
		results <- result{a, err}
	}()
	policytest.Eventually(t, "the calls to reach the backends", func() bool {
		return search.arrived.Load() == slowCalls && notify.arrived.Load() == 1
	})

	p.signal(syscall.SIGTERM)
	policytest.Eventually(t, "/readyz to fail", func() bool { return p.getStatus("/readyz") == http.StatusServiceUnavailable })
	// The drain delay: a new connection is still served.
	fresh := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	if a, err := callTool(fresh, agentURL, "search_articles", `{"q":"go"}`); err != nil || a.env.Status != contracts.StatusOK {
		t.Errorf("a call during the drain delay: %v %s", err, a.raw)
	}
	// After it, new connections are refused.
	policytest.Eventually(t, "the agent port to refuse connections", func() bool {
		conn, err := net.DialTimeout("tcp", p.agent, time.Second)
		if err == nil {
			conn.Close()
			return false
		}
		return errors.Is(err, syscall.ECONNREFUSED)
	})
	if code := p.getStatus("/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz while calls finish: %d, want 503", code)
	}

	release()
	for range slowCalls + 1 {
		r := <-results
		if r.err != nil {
			t.Errorf("a call in flight: %v", r.err)
			continue
		}
		if r.a.env.Status != contracts.StatusOK {
			t.Errorf("a call in flight answered %s", r.a.raw)
		}
		if r.a.env.Tool == "send_notification" && r.a.env.SideEffect != contracts.SideEffectDone {
			t.Errorf("the notification in flight answered %s", r.a.raw)
		}
	}
	err := p.cmd.Wait()
	if code := p.cmd.ProcessState.ExitCode(); err != nil || code != 0 {
		t.Errorf("toolgate exited with %d (%v), want 0", code, err)
	}
	logs := p.logs.String()
	for _, want := range []string{`"msg":"policy reloaded"`, `"msg":"shutting down: draining"`, `"msg":"toolgate stopped"`} {
		if !strings.Contains(logs, want) {
			t.Errorf("the log lacks %s", want)
		}
	}
	if t.Failed() {
		t.Logf("backend arrivals: search %d, notify %d", search.arrived.Load(), notify.arrived.Load())
	}
}

// TestExtprocSIGTERMDrainsStreamsInFlight runs a real `toolgate extproc`,
// reloads it with SIGHUP, then stops it with SIGTERM while calls are in
// flight between their request and response phases: the shutdown is
// serve's. /readyz and the gRPC health check fail at once, a new stream is
// still served during the drain delay, new connections are refused after
// it, the streams in flight finish with their envelopes, and the process
// exits 0.
func TestExtprocSIGTERMDrainsStreamsInFlight(t *testing.T) {
	bin := buildToolgate(t)
	// The tools' timeout outlasts the drain delay: the calls in flight
	// must be finished by their answers, not by their deadline.
	doc := strings.Replace(extprocPolicy, `legacy: {url: "http://127.0.0.1:9"}`, `legacy: {url: "http://127.0.0.1:9", timeout: 60s}`, 1)
	path := filepath.Join(t.TempDir(), "policy.yaml")
	policytest.WriteFile(t, path, doc)
	p := startProcess(t, bin, "extproc", "-config", path, "-listen", "127.0.0.1:0", "-drain-delay", "3s", "-grace", "20s", "-watch=false")
	policytest.Eventually(t, "/readyz to pass", func() bool { return p.getStatus("/readyz") == http.StatusOK })

	// SIGHUP reloads through the same reloader as serve's.
	policytest.WriteFile(t, path, doc+pageTool)
	p.signal(syscall.SIGHUP)
	policytest.Eventually(t, "the SIGHUP reload", func() bool { return p.config().Generation == 2 })

	conn := dialExtproc(t, p.agent)
	var inFlight []*extprocCall
	for _, route := range []string{"/docs/a", "/pages/1"} {
		call, resp := startExtprocCall(t, conn, route)
		if code := immediateStatus(resp); code != 0 {
			t.Fatalf("%s answered %d locally: %v", route, code, resp)
		}
		inFlight = append(inFlight, call)
	}

	p.signal(syscall.SIGTERM)
	policytest.Eventually(t, "/readyz to fail", func() bool { return p.getStatus("/readyz") == http.StatusServiceUnavailable })
	hc, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil || hc.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("gRPC health while draining: %v %v, want NOT_SERVING", hc, err)
	}
	// The drain delay: a new connection is still served.
	call, resp := startExtprocCall(t, dialExtproc(t, p.agent), "/nowhere")
	if code := immediateStatus(resp); code != http.StatusNotFound {
		t.Errorf("a stream during the drain delay: answered %d, want 404", code)
	}
	call.end()
	// After it, new connections are refused.
	policytest.Eventually(t, "the gRPC port to refuse connections", func() bool {
		c, err := net.DialTimeout("tcp", p.agent, time.Second)
		if err == nil {
			c.Close()
			return false
		}
		return errors.Is(err, syscall.ECONNREFUSED)
	})
	if code := p.getStatus("/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz while streams finish: %d, want 503", code)
	}

	for i, call := range inFlight {
		env := call.answer(200, `{"id":"a"}`)
		if !strings.Contains(env, `"status":"ok"`) {
			t.Errorf("call %d in flight answered %s", i, env)
		}
	}
	err = p.cmd.Wait()
	if code := p.cmd.ProcessState.ExitCode(); err != nil || code != 0 {
		t.Errorf("toolgate extproc exited with %d (%v), want 0", code, err)
	}
	logs := p.logs.String()
	for _, want := range []string{`"msg":"policy reloaded"`, `"msg":"shutting down: draining"`, `"msg":"toolgate extproc stopped"`} {
		if !strings.Contains(logs, want) {
			t.Errorf("the log lacks %s", want)
		}
	}
}
