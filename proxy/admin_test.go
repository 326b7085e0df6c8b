package proxy_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/proxy"
)

// adminEnv is an admin handler on a test server with every route on, and
// a count of the reloads it ran.
type adminEnv struct {
	srv     *httptest.Server
	reloads atomic.Int64
}

func newAdminEnv(t *testing.T, server *policy.Server) *adminEnv {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "toolgate_test_total", Help: "A test counter."}))
	env := &adminEnv{}
	opts := proxy.AdminOptions{
		Gatherer: reg,
		Reload:   func() error { env.reloads.Add(1); return nil },
		Config:   func() any { return map[string]string{"upstream": "http://billing.internal:8080"} },
		Learn: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.WriteString(w, `{"routes":[{"path":"/v1/users/{user_id}"}]}`)
		}),
	}
	if server != nil {
		opts.Server = func() *policy.Server { return server }
	}
	env.srv = httptest.NewServer(proxy.AdminHandler(opts))
	t.Cleanup(env.srv.Close)
	return env
}

// do sends method path with the Host and headers given and returns the
// status and body.
func (e *adminEnv) do(t *testing.T, method, path, host string, header map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, e.srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

var adminRoutes = []struct{ method, path string }{
	{"GET", "/metrics"}, {"GET", "/healthz"}, {"GET", "/readyz"}, {"GET", "/v1/config"}, {"GET", "/v1/learn"}, {"POST", "/-/reload"},
}

// TestAdminPortRefusesDNSRebinding: a page that rebinds its own name to
// the admin address sends its name as Host; no admin route answers it, so
// it reads neither /v1/learn (routes, field names, upstream URLs),
// /v1/config nor /metrics, and cannot reload.
func TestAdminPortRefusesDNSRebinding(t *testing.T) {
	env := newAdminEnv(t, &policy.Server{AdminListen: ":9090"})
	for _, host := range []string{"rebind.evil.example", "rebind.evil.example:9090", "127.0.0.1.nip.io:9090", "LOCALHOST.evil.example"} {
		for _, r := range adminRoutes {
			t.Run(r.method+" "+r.path+" with Host "+host, func(t *testing.T) {
				code, body := env.do(t, r.method, r.path, host, nil)
				if code != http.StatusForbidden || !strings.Contains(body, "is not a name of this server") {
					t.Errorf("HTTP %d: %.200s", code, body)
				}
				if strings.Contains(body, "billing.internal") || strings.Contains(body, "user_id") || strings.Contains(body, "toolgate_test_total") {
					t.Errorf("the answer leaks admin data: %.200s", body)
				}
			})
		}
	}
	if n := env.reloads.Load(); n != 0 {
		t.Errorf("%d reloads ran", n)
	}
}

// TestAdminPortRefusesCrossSiteRequests: no web page may POST /-/reload
// (nor read any admin route) from another origin, whether the browser says
// so with Sec-Fetch-Site or only with Origin; a loopback origin is another
// site too. A page of the admin port itself, or a URL the user typed,
// still works.
func TestAdminPortRefusesCrossSiteRequests(t *testing.T) {
	env := newAdminEnv(t, nil)
	host := env.srv.Listener.Addr().String()
	for _, c := range []struct {
		name   string
		header map[string]string
	}{
		{"an Origin of another site", map[string]string{"Origin": "https://evil.example"}},
		{"a loopback Origin on another port", map[string]string{"Origin": "http://localhost:3000"}},
		{"an opaque Origin", map[string]string{"Origin": "null"}},
		{"Sec-Fetch-Site cross-site", map[string]string{"Sec-Fetch-Site": "cross-site"}},
		{"Sec-Fetch-Site same-site", map[string]string{"Sec-Fetch-Site": "same-site"}},
		{"Sec-Fetch-Site cross-site with the admin port's own Origin", map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "http://" + host}},
		{"a form post from another site", map[string]string{"Origin": "https://evil.example", "Content-Type": "application/x-www-form-urlencoded", "Sec-Fetch-Mode": "navigate"}},
	} {
		t.Run("POST /-/reload with "+c.name+" is refused", func(t *testing.T) {
			if code, body := env.do(t, "POST", "/-/reload", "", c.header); code != http.StatusForbidden {
				t.Errorf("HTTP %d: %s", code, body)
			}
		})
		t.Run("GET /v1/learn with "+c.name+" is refused", func(t *testing.T) {
			if code, body := env.do(t, "GET", "/v1/learn", "", c.header); code != http.StatusForbidden || strings.Contains(body, "user_id") {
				t.Errorf("HTTP %d: %s", code, body)
			}
		})
	}
	if n := env.reloads.Load(); n != 0 {
		t.Fatalf("%d reloads ran", n)
	}
	for _, c := range []struct {
		name   string
		header map[string]string
	}{
		{"the admin port's own Origin", map[string]string{"Origin": "http://" + host, "Sec-Fetch-Site": "same-origin"}},
		{"a URL the user typed", map[string]string{"Sec-Fetch-Site": "none"}},
		{"no browser headers (curl)", nil},
	} {
		t.Run("POST /-/reload with "+c.name+" reloads", func(t *testing.T) {
			if code, body := env.do(t, "POST", "/-/reload", "", c.header); code != http.StatusOK || body != "reloaded\n" {
				t.Errorf("HTTP %d: %s", code, body)
			}
		})
	}
	if n := env.reloads.Load(); n != 3 {
		t.Errorf("%d reloads ran, want 3", n)
	}
}

// TestAdminPortServesProbesAndScrapes: the kubelet's probes send the pod
// IP as Host, Prometheus the target's address; loopback names, the host
// of admin_listen and admin_allowed_hosts are served too.
func TestAdminPortServesProbesAndScrapes(t *testing.T) {
	env := newAdminEnv(t, &policy.Server{AdminListen: "toolgate-admin.internal:9090", AdminAllowedHosts: []string{"toolgate.agents.svc.cluster.local", "*.pods.example"}})
	for _, host := range []string{"10.244.1.17:9090", "10.244.1.17", "[fd00::17]:9090", "127.0.0.1:9090", "[::1]:9090", "localhost:9090", "toolgate.localhost",
		"toolgate-admin.internal:9090", "Toolgate-Admin.Internal.:9090", "toolgate.agents.svc.cluster.local:9090", "a.pods.example"} {
		t.Run("probes with Host "+host, func(t *testing.T) {
			for _, path := range []string{"/healthz", "/readyz"} {
				// The kubelet's HTTP probe: its User-Agent and Accept, no Origin.
				code, body := env.do(t, "GET", path, host, map[string]string{"User-Agent": "kube-probe/1.33", "Accept": "*/*"})
				if code != http.StatusOK {
					t.Errorf("%s: HTTP %d: %s", path, code, body)
				}
			}
		})
		t.Run("a Prometheus scrape with Host "+host, func(t *testing.T) {
			code, body := env.do(t, "GET", "/metrics", host, map[string]string{
				"User-Agent":                          "Prometheus/3.5.0",
				"Accept":                              "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,application/openmetrics-text;version=0.0.1;q=0.5,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2",
				"X-Prometheus-Scrape-Timeout-Seconds": "10",
			})
			if code != http.StatusOK || !strings.Contains(body, "toolgate_test_total") {
				t.Errorf("HTTP %d: %.200s", code, body)
			}
		})
	}
	t.Run("a name in no list is refused", func(t *testing.T) {
		for _, host := range []string{"pods.example", "toolgate.agents.svc.cluster.local.evil.example", "admin.internal"} {
			if code, _ := env.do(t, "GET", "/metrics", host, nil); code != http.StatusForbidden {
				t.Errorf("Host %s: HTTP %d", host, code)
			}
		}
	})
	t.Run("without the policy's settings, only names no rebinding can send", func(t *testing.T) {
		bare := newAdminEnv(t, nil)
		if code, _ := bare.do(t, "GET", "/metrics", "10.0.0.1:9090", nil); code != http.StatusOK {
			t.Errorf("an IP literal: HTTP %d", code)
		}
		if code, _ := bare.do(t, "GET", "/metrics", "toolgate-admin.internal:9090", nil); code != http.StatusForbidden {
			t.Errorf("a name: HTTP %d", code)
		}
	})
}
