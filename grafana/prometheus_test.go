package grafana

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/yaml"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/examples"
	"github.com/toolgate/toolgate/internal/testkit/proxytest"
	"github.com/toolgate/toolgate/proxy"
)

// TestARealPrometheusAnswersEveryPanel is the end-to-end test: a toolgate
// (the example policy in front of the example backends) runs in-process on
// loopback listeners, a real Prometheus (the Debian package) scrapes its
// admin port every second and evaluates deploy/'s alert rules, the test
// drives calls of every status through the agent port, and then asks
// Prometheus' HTTP API every query of the dashboard, as Grafana would.
func TestARealPrometheusAnswersEveryPanel(t *testing.T) {
	bin := prometheusBinary(t)
	start := time.Now()
	tg := startToolgate(t)
	prom := startPrometheus(t, bin, tg.admin, alertRulesFile(t))
	prom.waitFor(t, `toolgate_build_info{job="toolgate"}`, func(r []sample) bool { return len(r) > 0 })
	t.Logf("toolgate scraped after %v", time.Since(start).Round(time.Millisecond))

	// Two rounds, each followed by a scrape: a series that appears during
	// the first round has a sample to grow from in the second, so every
	// rate() below sees an increase.
	var seen observed
	for round := 1; round <= 2; round++ {
		tg.driveRound(t, round, &seen)
		prom.waitScraped(t, tg)
	}
	tg.openBreaker(t)
	prom.waitScraped(t, tg)
	t.Logf("features the drive saw working: %+v", seen)
	t.Logf("calls driven and scraped after %v", time.Since(start).Round(time.Millisecond))

	d := loadDashboard(t)
	all := strings.NewReplacer(`"$namespace"`, `".*"`, `"$job"`, `".*"`, `"$instance"`, `".*"`, `"$tool"`, `".*"`, `"$caller"`, `".*"`, "$__rate_interval", "1m")
	for _, q := range d.queries() {
		t.Run(q.where, func(t *testing.T) {
			res := prom.query(t, all.Replace(q.expr))
			why, mayBeEmpty := seen.mayBeEmpty(q)
			if len(res) == 0 {
				if !mayBeEmpty {
					t.Fatalf("no data for %s", q.expr)
				}
				t.Logf("no data, allowed: %s", why)
				return
			}
			for _, label := range legendLabels(q.legend) {
				if !slices.ContainsFunc(res, func(s sample) bool { _, ok := s.Metric[label]; return ok }) {
					t.Errorf("legend {{%s}} names a label no series of the result has: %v", label, res)
				}
			}
			if !slices.ContainsFunc(res, func(s sample) bool { return s.Value != 0 && !math.IsNaN(s.Value) }) && !mayBeEmpty {
				t.Errorf("only zero or NaN values for %s: %v", q.expr, res)
			}
		})
	}

	// Panels whose data the drive guarantees, in detail.
	t.Run("every status has a rate", func(t *testing.T) {
		res := prom.query(t, `sum by (status) (rate(toolgate_tool_calls_total[1m]))`)
		for _, st := range contracts.Statuses() {
			if !slices.ContainsFunc(res, func(s sample) bool { return s.Metric["status"] == string(st) && s.Value > 0 }) {
				t.Errorf("no calls with status %s: %v", st, res)
			}
		}
	})
	t.Run("the breaker shows open", func(t *testing.T) {
		res := prom.query(t, `max by (upstream) (toolgate_circuit_state)`)
		if !slices.ContainsFunc(res, func(s sample) bool { return s.Metric["upstream"] == "search" && s.Value == 2 }) {
			t.Errorf("search's breaker is not open (2): %v", res)
		}
	})
	t.Run("upstream codes show failures and refusals", func(t *testing.T) {
		res := prom.query(t, `sum by (code) (rate(toolgate_upstream_requests_total[1m])) > 0`)
		for _, code := range []string{"200", "500", "timeout", "circuit_open"} {
			if !slices.ContainsFunc(res, func(s sample) bool { return s.Metric["code"] == code }) {
				t.Errorf("no upstream code %s: %v", code, res)
			}
		}
	})
	t.Run("access rejections by reason", func(t *testing.T) {
		res := prom.query(t, `sum by (reason) (rate(toolgate_access_rejections_total[1m])) > 0`)
		for reason, happened := range map[string]bool{"denied": seen.denied, "rate": seen.rateLimited, "budget": seen.budgetSpent} {
			got := slices.ContainsFunc(res, func(s sample) bool { return s.Metric["reason"] == reason })
			if happened && !got {
				t.Errorf("a call was rejected for %s, but the panel shows none: %v", reason, res)
			}
		}
	})

	// The template variables as Grafana resolves them.
	t.Run("template variables", func(t *testing.T) {
		for name, want := range map[string][]string{
			"namespace": {e2eNamespace},
			"job":       {"toolgate"},
			"instance":  {tg.admin},
			"tool":      {"search_articles", "send_notification"},
			"caller":    {"ops-agent", "research-agent", "unknown"},
		} {
			selector, label, _ := d.variable(name).labelValues()
			selector = all.Replace(selector)
			got := prom.labelValues(t, label, selector)
			for _, w := range want {
				if !slices.Contains(got, w) {
					t.Errorf("variable %s: %v lacks %s", name, got, w)
				}
			}
		}
	})
	// One concrete selection, as a user picks a tool and a caller: every
	// query still runs.
	t.Run("queries with one tool and caller selected", func(t *testing.T) {
		one := strings.NewReplacer(`"$namespace"`, `"`+e2eNamespace+`"`, `"$job"`, `"toolgate"`, `"$instance"`, `"`+tg.admin+`"`,
			`"$tool"`, `"search_articles"`, `"$caller"`, `"ops-agent"`, "$__rate_interval", "1m")
		res := prom.query(t, one.Replace(d.queries()[0].expr))
		if len(res) == 0 {
			t.Errorf("no data for search_articles and ops-agent")
		}
		for _, q := range d.queries() {
			prom.query(t, one.Replace(q.expr))
		}
	})

	// The alert rules run on the same data: all evaluate without error,
	// and the open breaker makes ToolgateCircuitOpen pending.
	t.Run("alert rules", func(t *testing.T) {
		prom.waitRulesEvaluated(t)
		alerts := prom.waitAlert(t, "ToolgateCircuitOpen")
		t.Logf("active alerts: %v", alerts)
	})
	t.Logf("whole test %v", time.Since(start).Round(time.Millisecond))
}

// prometheusBinary finds the prometheus server. Without it the test is
// skipped, unless TOOLGATE_REQUIRE_PROMETHEUS is set.
func prometheusBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("starts Prometheus")
	}
	path, err := exec.LookPath("prometheus")
	if err != nil {
		if os.Getenv("TOOLGATE_REQUIRE_PROMETHEUS") != "" {
			t.Fatalf("prometheus not found and TOOLGATE_REQUIRE_PROMETHEUS is set (install the Debian package prometheus): %v", err)
		}
		t.Skip("prometheus not found; set TOOLGATE_REQUIRE_PROMETHEUS to make this a failure")
	}
	return path
}

// observed records which features the drive saw working, so panels that
// depend on them are required to show data exactly when they did.
type observed struct {
	replayed, mismatch, missingKey   bool
	denied, rateLimited, budgetSpent bool
}

// mayBeEmpty says whether a query may legitimately return no data, or only
// zeros, after the drive, and why. Everything not listed must show data.
func (o *observed) mayBeEmpty(q query) (string, bool) {
	switch {
	case strings.Contains(q.expr, "toolgate_idempotency_store_errors_total"):
		// The memory store does not fail; the Redis store's failures are
		// tested in policy/. The series exist, at zero.
		return "the memory store has no errors", true
	case strings.Contains(q.expr, "toolgate_config_reloads_total"),
		strings.Contains(q.expr, "changes(toolgate_config_generation"):
		// The reload loop lives in cmd/toolgate; this test runs the core
		// without it, so nothing reloads.
		return "no reload happens in this test", true
	case strings.Contains(q.expr, `kind="response"`):
		// The example policy declares no response.schema; the count is
		// tested in proxy/ (answers_test.go) and examples/zoo.
		return "the example policy declares no response.schema", true
	case strings.Contains(q.expr, "toolgate_access_rejections_total"):
		if o.denied || o.rateLimited || o.budgetSpent {
			return "", false
		}
		return "no call was rejected by access control, rate limit or budget", true
	case strings.Contains(q.expr, "toolgate_idempotency_events_total"):
		if o.replayed || o.mismatch || o.missingKey {
			return "", false
		}
		return "no idempotency event happened (no replay, mismatch or missing key)", true
	}
	return "", false
}

var legendLabelRE = regexp.MustCompile(`\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}`)

func legendLabels(legend string) []string {
	var out []string
	for _, m := range legendLabelRE.FindAllStringSubmatch(legend, -1) {
		out = append(out, m[1])
	}
	return out
}

// testPolicy is the example policy with its upstreams on the test's
// backends, a breaker that opens after three failures and stays open for
// the whole test, and two callers whose limits the drive exhausts.
func testPolicy(t *testing.T, searchURL, notifyURL string) []byte {
	t.Helper()
	p := string(examples.Policy())
	for _, r := range [][2]string{
		{"http://127.0.0.1:7001", searchURL},
		{"http://127.0.0.1:7002", notifyURL},
		{"consecutive_failures: 5", "consecutive_failures: 3"},
		{"open_for: 30s", "open_for: 10m"},
		{"  callers:\n", "  callers:\n" +
			"    budget-agent: {tools: [\"*\"], budget: {cost: 0.0015, per: 1h}}\n" +
			"    rate-agent: {tools: [\"*\"], rate: {rps: 0.01, burst: 1}}\n"},
	} {
		if strings.Count(p, r[0]) != 1 {
			t.Fatalf("examples/policy.yaml no longer has exactly one %q; update this test", r[0])
		}
		p = strings.Replace(p, r[0], r[1], 1)
	}
	return []byte(p)
}

type toolgate struct {
	agent    string // base URL
	admin    string // host:port
	registry *prometheus.Registry
	client   *http.Client
}

func startToolgate(t *testing.T) *toolgate {
	t.Helper()
	search := httptest.NewServer(examples.NewSearchBackend(examples.SearchOptions{SlowDelay: 3 * time.Second}))
	t.Cleanup(search.Close)
	notify := httptest.NewServer(examples.NewNotifyBackend(examples.NotifyOptions{}))
	t.Cleanup(notify.Close)

	snap, err := config.CompileSource("policy.yaml", testPolicy(t, search.URL, notify.URL), config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	core, err := proxy.NewCore(snap, proxy.Options{Registry: reg, Version: "e2e"})
	if err != nil {
		t.Fatal(err)
	}
	// As toolgate serve does at start.
	core.Metrics().ConfigGeneration.Set(1)
	core.Metrics().ConfigLastReloadOK.Set(1)

	agent := httptest.NewServer(core.Handler())
	t.Cleanup(agent.Close)
	admin := httptest.NewServer(proxy.AdminHandler(proxy.AdminOptions{Gatherer: reg}))
	t.Cleanup(admin.Close)
	return &toolgate{
		agent:    agent.URL,
		admin:    admin.Listener.Addr().String(),
		registry: reg,
		client:   &http.Client{Timeout: 10 * time.Second},
	}
}

// call makes one tool call and returns its envelope.
func (tg *toolgate) call(t *testing.T, caller, tool, body, key string) contracts.Envelope {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, tg.agent+"/v1/tools/"+tool, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if caller != "" {
		req.Header.Set("X-Toolgate-Caller", caller)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := tg.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var env contracts.Envelope
	if err := json.NewDecoder(resp.Body).Decode(&env); err != nil {
		t.Fatalf("%s %s: %v", tool, body, err)
	}
	return env
}

// expect makes a call whose status the core alone decides.
func (tg *toolgate) expect(t *testing.T, want contracts.Status, caller, tool, body string) {
	t.Helper()
	if env := tg.call(t, caller, tool, body, ""); env.Status != want {
		t.Fatalf("%s %s: status %s (%s), want %s", tool, body, env.Status, env.Message, want)
	}
}

// driveRound makes calls of every status, and the calls that exercise
// idempotency and access control. Failures of the search backend are
// separated by successes, so the breaker stays closed.
func (tg *toolgate) driveRound(t *testing.T, round int, seen *observed) {
	t.Helper()
	const ops = "ops-agent"
	tg.expect(t, contracts.StatusOK, ops, "search_articles", `{"q": "go"}`)
	tg.expect(t, contracts.StatusEmpty, ops, "search_articles", `{"q": "zzqqxxnothing"}`)
	tg.expect(t, contracts.StatusBadArgs, ops, "search_articles", `{}`)
	tg.expect(t, contracts.StatusBadArgs, ops, "search_articles", `{"q": "`+strings.Repeat("x", 70_000)+`"}`)
	tg.expect(t, contracts.StatusForbidden, ops, "search_articles", `{"q": "secret"}`)
	tg.expect(t, contracts.StatusNotFound, ops, "no_such_tool", `{}`)
	tg.expect(t, contracts.StatusUpstream, ops, "search_articles", `{"q": "crash"}`)
	tg.expect(t, contracts.StatusOK, "research-agent", "search_articles", `{"q": "go"}`)
	tg.expect(t, contracts.StatusTimeout, ops, "search_articles", `{"q": "slow"}`)
	tg.expect(t, contracts.StatusOK, "", "search_articles", `{"q": "go"}`)

	// Idempotency: stored, replayed, mismatch, missing key.
	key := fmt.Sprintf("e2e-%d", round)
	first := tg.call(t, ops, "send_notification", `{"user_id": "alice", "text": "hello"}`, key)
	if first.Status != contracts.StatusOK {
		t.Fatalf("send_notification: %s (%s)", first.Status, first.Message)
	}
	if again := tg.call(t, ops, "send_notification", `{"user_id": "alice", "text": "hello"}`, key); again.Replayed {
		seen.replayed = true
	}
	if other := tg.call(t, ops, "send_notification", `{"user_id": "alice", "text": "other"}`, key); other.Status == contracts.StatusBadArgs {
		seen.mismatch = true
	}
	if none := tg.call(t, ops, "send_notification", `{"user_id": "alice", "text": "no key"}`, ""); none.Status == contracts.StatusBadArgs {
		seen.missingKey = true
	}

	// Access: a tool the caller may not use, a rate limit, a budget.
	if env := tg.call(t, "research-agent", "send_notification", `{"user_id": "bob", "text": "hi"}`, key+"-denied"); env.Status == contracts.StatusForbidden {
		seen.denied = true
	}
	for range 2 {
		if env := tg.call(t, "rate-agent", "search_articles", `{"q": "go"}`, ""); env.Status == contracts.StatusUpstream {
			seen.rateLimited = true
		}
	}
	for range 3 {
		if env := tg.call(t, "budget-agent", "search_articles", `{"q": "go"}`, ""); env.Status == contracts.StatusForbidden {
			seen.budgetSpent = true
		}
	}
}

// openBreaker sends crashes to search until its breaker (three failures in
// a row) opens, then one call the open breaker refuses.
func (tg *toolgate) openBreaker(t *testing.T) {
	t.Helper()
	for range 3 {
		tg.call(t, "ops-agent", "search_articles", `{"q": "crash"}`, "")
	}
	env := tg.call(t, "ops-agent", "search_articles", `{"q": "go"}`, "")
	if env.Status != contracts.StatusUpstream || !env.Retryable {
		t.Fatalf("after the crashes: %s (%s), want upstream, retryable from the open breaker", env.Status, env.Message)
	}
}

// localCalls is the total of toolgate_tool_calls_total in the registry.
func (tg *toolgate) localCalls(t *testing.T) float64 {
	t.Helper()
	families, err := tg.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, f := range families {
		if f.GetName() == "toolgate_tool_calls_total" {
			for _, m := range f.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// alertRulesFile writes deploy/'s PrometheusRule groups as a rules file.
func alertRulesFile(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Spec struct {
			Groups []any `json:"groups"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	out, err := yaml.Marshal(map[string]any{"groups": doc.Spec.Groups})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// e2eNamespace is the namespace label the test's scrape gives toolgate's
// series, for the dashboard's namespace variable.
const e2eNamespace = "e2e"

type promServer struct {
	url    string
	client *http.Client
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startPrometheus runs prometheus on a free loopback port with a temporary
// storage directory, scraping target every second and evaluating rules
// every second. It is stopped when the test ends.
func startPrometheus(t *testing.T, bin, target, rules string) *promServer {
	t.Helper()
	dir := t.TempDir()
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files:
  - %s
scrape_configs:
  - job_name: toolgate
    static_configs:
      - targets: [%q]
        # As prometheus-operator's discovery labels a pod's series.
        labels: {namespace: %q}
`, rules, target, e2eNamespace)
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
	var logs proxytest.LogBuffer
	cmd := exec.Command(bin,
		"--config.file="+cfgPath,
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr,
		"--log.level=warn",
	)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("prometheus log:\n%s", logs.String())
		}
	})
	p := &promServer{url: "http://" + addr, client: &http.Client{Timeout: 5 * time.Second}}
	deadline := time.Now().Add(20 * time.Second)
	for {
		select {
		case <-done:
			t.Fatalf("prometheus exited:\n%s", logs.String())
		default:
		}
		resp, err := p.client.Get(p.url + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus not ready after 20s:\n%s", logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// sample is one series of an instant query's result.
type sample struct {
	Metric map[string]string
	Value  float64
}

func (s sample) String() string { return fmt.Sprintf("%v=%g", s.Metric, s.Value) }

// api calls a Prometheus HTTP API endpoint and decodes its data.
func (p *promServer) api(t *testing.T, path string, params url.Values, data any) {
	t.Helper()
	resp, err := p.client.Get(p.url + path + "?" + params.Encode())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var envelope struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &envelope); err != nil {
		t.Fatalf("%s: %v: %s", path, err, body)
	}
	if envelope.Status != "success" {
		t.Fatalf("%s %v: %s", path, params, envelope.Error)
	}
	if err := json.Unmarshal(envelope.Data, data); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// query runs an instant query; a query error fails the test.
func (p *promServer) query(t *testing.T, expr string) []sample {
	t.Helper()
	var data struct {
		ResultType string `json:"resultType"`
		Result     []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"`
		} `json:"result"`
	}
	p.api(t, "/api/v1/query", url.Values{"query": {expr}}, &data)
	if data.ResultType != "vector" {
		t.Fatalf("%s: result type %s, want vector", expr, data.ResultType)
	}
	var out []sample
	for _, r := range data.Result {
		s, _ := r.Value[1].(string)
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			t.Fatalf("%s: value %v", expr, r.Value)
		}
		out = append(out, sample{Metric: r.Metric, Value: v})
	}
	return out
}

func (p *promServer) labelValues(t *testing.T, label, selector string) []string {
	t.Helper()
	var values []string
	p.api(t, "/api/v1/label/"+label+"/values", url.Values{"match[]": {selector}}, &values)
	return values
}

// waitFor polls a query until ok accepts its result.
func (p *promServer) waitFor(t *testing.T, expr string, ok func([]sample) bool) []sample {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		res := p.query(t, expr)
		if ok(res) {
			return res
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited 15s for %s; last result %v", expr, res)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitScraped waits until Prometheus has scraped every call made so far.
func (p *promServer) waitScraped(t *testing.T, tg *toolgate) {
	t.Helper()
	want := tg.localCalls(t)
	p.waitFor(t, `sum(toolgate_tool_calls_total{job="toolgate"})`, func(r []sample) bool {
		return len(r) == 1 && r[0].Value == want
	})
}

// waitRulesEvaluated waits until every rule has been evaluated after the
// last scrape, and fails on any rule whose evaluation errs.
func (p *promServer) waitRulesEvaluated(t *testing.T) {
	t.Helper()
	since := time.Now()
	deadline := since.Add(15 * time.Second)
	for {
		var data struct {
			Groups []struct {
				Rules []struct {
					Name           string    `json:"name"`
					Health         string    `json:"health"`
					LastError      string    `json:"lastError"`
					LastEvaluation time.Time `json:"lastEvaluation"`
				} `json:"rules"`
			} `json:"groups"`
		}
		p.api(t, "/api/v1/rules", nil, &data)
		pending, n := 0, 0
		for _, g := range data.Groups {
			for _, r := range g.Rules {
				n++
				if r.LastEvaluation.Before(since) {
					pending++
					continue
				}
				if r.Health != "ok" || r.LastError != "" {
					t.Errorf("rule %s: health %s: %s", r.Name, r.Health, r.LastError)
				}
			}
		}
		if n == 0 {
			t.Fatal("Prometheus loaded no rules")
		}
		if pending == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d rules not evaluated after 15s", pending, n)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitAlert waits until the named alert is pending or firing and returns
// the names of the active alerts.
func (p *promServer) waitAlert(t *testing.T, name string) []string {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		var data struct {
			Alerts []struct {
				Labels map[string]string `json:"labels"`
				State  string            `json:"state"`
			} `json:"alerts"`
		}
		p.api(t, "/api/v1/alerts", nil, &data)
		var active []string
		found := false
		for _, a := range data.Alerts {
			active = append(active, a.Labels["alertname"]+"("+a.State+")")
			if a.Labels["alertname"] == name {
				found = true
			}
		}
		if found {
			return active
		}
		if time.Now().After(deadline) {
			t.Fatalf("alert %s not active after 15s; active: %v", name, active)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
