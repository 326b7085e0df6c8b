package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/examples"
	"github.com/toolgate/toolgate/internal/testkit/proxytest"
)

// These tests run the daemon `toolgate serve` builds (newDaemon) against
// hostile connections: they check its HTTP settings, and that slow or
// oversized headers cost a well-behaved caller nothing.

// hostileServer is the daemon of toolgate serve listening on loopback
// ports, serving until the test ends.
type hostileServer struct {
	*daemon
	// agent is the agent port's server.
	agent              *http.Server
	agentURL, adminURL string
	// searches counts the requests the search backend received.
	searches *atomic.Int64
}

// hostileOptions change startHostile's server.
type hostileOptions struct {
	server  string             // extra keys of the server section, each line indented two spaces
	timeout time.Duration      // the search upstream's timeout; zero means 2s
	tune    func(*http.Server) // changes the agent server before listening
}

func startHostileServer(t *testing.T, tune func(*http.Server)) *hostileServer {
	t.Helper()
	return startHostile(t, hostileOptions{tune: tune})
}

func startHostile(t *testing.T, opts hostileOptions) *hostileServer {
	t.Helper()
	searches := &atomic.Int64{}
	backend := examples.NewSearchBackend(examples.SearchOptions{})
	search := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		searches.Add(1)
		backend.ServeHTTP(w, r)
	}))
	t.Cleanup(search.Close)
	doc := fmt.Sprintf(`version: 1
server:
  listen: "127.0.0.1:0"
  admin_listen: "127.0.0.1:00"
%supstreams:
  search: {url: %q, timeout: %s}
tools:
  search_articles:
    description: Search articles.
    upstream: search
    args: {type: object, required: [q], properties: {q: {type: string}}}
    request: {method: GET, path: /api/search, query: {q: q}}
`, opts.server, search.URL, cmp.Or(opts.timeout, 2*time.Second))
	snap, err := config.CompileSource("hostile.yaml", []byte(doc), config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	d, err := newDaemon(snap, daemonOptions{name: "toolgate", logger: slog.New(slog.DiscardHandler), front: newAgentFront, grace: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	agent := d.front.(*agentFront).srv
	if opts.tune != nil {
		opts.tune(agent)
	}
	if err := d.listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- d.run(ctx, nil) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("run: %v", err)
		}
	})
	return &hostileServer{daemon: d, agent: agent, agentURL: "http://" + d.frontAddr(), adminURL: "http://" + d.adminAddr(), searches: searches}
}

// politeCaller calls search_articles until stopped and counts calls that
// did not answer ok within the deadline (2s) plus a margin.
func politeCaller(t *testing.T, agentURL string) (stop func()) {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{}, Timeout: 10 * time.Second}
	var calls, failed atomic.Int64
	var firstErr atomic.Value
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		defer client.CloseIdleConnections()
		for {
			select {
			case <-quit:
				return
			default:
			}
			start := time.Now()
			err := politeCall(client, agentURL)
			if err == nil && time.Since(start) > 3*time.Second {
				err = fmt.Errorf("answered after %v", time.Since(start))
			}
			calls.Add(1)
			if err != nil {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, err.Error())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(quit)
			<-done
			if calls.Load() == 0 || failed.Load() > 0 {
				t.Errorf("the well-behaved caller: %d of %d calls failed: %v", failed.Load(), calls.Load(), firstErr.Load())
			}
		})
	}
}

func politeCall(client *http.Client, agentURL string) error {
	_, env, err := proxytest.PostCall(client, agentURL, "search_articles", `{"q":"go"}`, nil)
	if err != nil {
		return err
	}
	if env.Status != contracts.StatusOK {
		return fmt.Errorf("status %s", env.Status)
	}
	return nil
}

func TestServerHTTPSettingsBoundHostileClients(t *testing.T) {
	s := startHostileServer(t, nil)
	for name, srv := range map[string]*http.Server{"agent": s.agent, "admin": s.admin} {
		if srv.ReadHeaderTimeout <= 0 || srv.ReadHeaderTimeout > 10*time.Second {
			t.Errorf("%s: ReadHeaderTimeout = %v, want a bound of at most 10s", name, srv.ReadHeaderTimeout)
		}
		if srv.IdleTimeout <= 0 {
			t.Errorf("%s: IdleTimeout = %v, idle connections would be kept forever", name, srv.IdleTimeout)
		}
	}
	if s.agent.MaxHeaderBytes <= 0 || s.agent.MaxHeaderBytes > 1<<20 {
		t.Errorf("agent: MaxHeaderBytes = %d", s.agent.MaxHeaderBytes)
	}
	// The agent port bounds bodies and each write per request
	// (boundedHandler); a whole-request ReadTimeout or WriteTimeout would
	// cut a long tool call.
	if s.agent.ReadTimeout != 0 || s.agent.WriteTimeout != 0 {
		t.Errorf("agent: ReadTimeout %v, WriteTimeout %v: they would bound the call itself", s.agent.ReadTimeout, s.agent.WriteTimeout)
	}
	if _, ok := s.agent.Handler.(boundedHandler); !ok {
		t.Errorf("agent: handler %T does not bound bodies and writes", s.agent.Handler)
	}
	if s.admin.ReadTimeout <= 0 || s.admin.WriteTimeout <= 0 || s.admin.MaxHeaderBytes <= 0 {
		t.Errorf("admin: ReadTimeout %v, WriteTimeout %v, MaxHeaderBytes %d", s.admin.ReadTimeout, s.admin.WriteTimeout, s.admin.MaxHeaderBytes)
	}
	t.Run("headers over MaxHeaderBytes are refused with 431", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodPost, s.agentURL+"/v1/tools/search_articles", strings.NewReader(`{"q":"go"}`))
		req.Header.Set("X-Padding", strings.Repeat("p", s.agent.MaxHeaderBytes+4096))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return // a reset while the client was still writing: a clean close
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
			t.Errorf("HTTP %d", resp.StatusCode)
		}
	})
}

func TestSlowHeaderClientsAreCutOff(t *testing.T) {
	// The real server with its ReadHeaderTimeout shortened from 10s, so the
	// test does not wait; TestServerHTTPSettingsBoundHostileClients checks
	// the real value.
	const timeout = 300 * time.Millisecond
	s := startHostileServer(t, func(agent *http.Server) { agent.ReadHeaderTimeout = timeout })
	stop := politeCaller(t, s.agentURL)
	defer stop()
	const n = 200
	var wg sync.WaitGroup
	var slow atomic.Int64
	var firstErr atomic.Value
	for i := range n {
		wg.Go(func() {
			conn, err := net.DialTimeout("tcp", s.frontAddr(), 5*time.Second)
			if err != nil {
				firstErr.CompareAndSwap(nil, err.Error())
				slow.Add(1)
				return
			}
			defer conn.Close()
			start := time.Now()
			_, _ = fmt.Fprintf(conn, "POST /v1/tools/search_articles HTTP/1.1\r\nHost: x\r\nX-Slow-%d: ", i)
			// Drip a header one byte at a time and never finish it; the
			// server must close the connection once its header timeout
			// passes, whatever arrives in between.
			closed := make(chan struct{})
			go func() {
				defer close(closed)
				br := bufio.NewReader(conn)
				_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
				if resp, err := http.ReadResponse(br, nil); err == nil {
					resp.Body.Close() // 408 Request Timeout, then close
					_, _ = br.ReadByte()
				}
			}()
			tick := time.NewTicker(50 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-closed:
					if took := time.Since(start); took > timeout+2*time.Second {
						slow.Add(1)
						firstErr.CompareAndSwap(nil, fmt.Sprintf("closed after %v", took))
					}
					return
				case <-tick.C:
					_ = conn.SetWriteDeadline(time.Now().Add(time.Second))
					_, _ = conn.Write([]byte("a"))
				}
			}
		})
	}
	wg.Wait()
	if slow.Load() > 0 {
		t.Errorf("%d of %d slow-header connections were not cut off in time: %v", slow.Load(), n, firstErr.Load())
	}
	stop()
}

func TestAdminPortIsSeparate(t *testing.T) {
	s := startHostileServer(t, nil)
	if s.frontAddr() == s.adminAddr() {
		t.Fatalf("agent and admin share %s", s.frontAddr())
	}
	adminPaths := []string{"/metrics", "/healthz", "/readyz", "/-/reload", "/v1/config", "/debug/pprof/"}
	t.Run("the agent port serves no admin path", func(t *testing.T) {
		for _, path := range adminPaths {
			for _, method := range []string{http.MethodGet, http.MethodPost} {
				req, _ := http.NewRequest(method, s.agentURL+path, nil)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				raw, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				env, err := contracts.DecodeEnvelope(bytes.TrimSpace(raw))
				switch {
				case err != nil:
					t.Errorf("%s %s on the agent port: HTTP %d without an envelope: %.200s", method, path, resp.StatusCode, raw)
				case env.Status != contracts.StatusNotFound || resp.StatusCode != http.StatusNotFound:
					t.Errorf("%s %s on the agent port: HTTP %d %s", method, path, resp.StatusCode, env.Status)
				case strings.Contains(string(raw), "toolgate_") || strings.Contains(string(raw), "checksum"):
					t.Errorf("%s %s on the agent port leaks admin data: %.200s", method, path, raw)
				}
			}
		}
	})
	t.Run("the admin port serves its paths and no tool", func(t *testing.T) {
		resp, err := http.Get(s.adminURL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(raw), "toolgate_build_info") {
			t.Errorf("/metrics on the admin port: HTTP %d", resp.StatusCode)
		}
		resp, err = http.Post(s.adminURL+"/v1/tools/search_articles", "application/json", strings.NewReader(`{"q":"go"}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound && resp.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("a tool call on the admin port: HTTP %d", resp.StatusCode)
		}
		for _, path := range []string{"/debug/pprof/", "/debug/vars"} {
			resp, err := http.Get(s.adminURL + path)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				t.Errorf("%s is served on the admin port", path)
			}
		}
	})
}

// TestAdminPortHostsFollowThePolicy: the running daemon's admin port
// serves the names server.admin_allowed_hosts lists, and refuses a
// rebinding name and a cross-site reload.
func TestAdminPortHostsFollowThePolicy(t *testing.T) {
	s := startHostile(t, hostileOptions{server: "  admin_allowed_hosts: [toolgate.agents.svc.cluster.local]\n"})
	for _, c := range []struct {
		name, method, path, host, origin string
		want                             int
	}{
		{"a listed name is served", "GET", "/metrics", "toolgate.agents.svc.cluster.local:9090", "", http.StatusOK},
		{"an IP literal is served", "GET", "/readyz", "10.1.2.3:9090", "", http.StatusOK},
		{"a rebinding name is refused", "GET", "/v1/config", "rebind.evil.example:9090", "", http.StatusForbidden},
		{"a cross-site reload is refused", "POST", "/-/reload", "", "https://evil.example", http.StatusForbidden},
	} {
		t.Run(c.name, func(t *testing.T) {
			req, _ := http.NewRequest(c.method, s.adminURL+c.path, nil)
			if c.host != "" {
				req.Host = c.host
			}
			if c.origin != "" {
				req.Header.Set("Origin", c.origin)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != c.want {
				t.Errorf("HTTP %d, want %d", resp.StatusCode, c.want)
			}
		})
	}
}
