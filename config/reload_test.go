package config

import (
	"bytes"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/toolgate/toolgate/internal/testkit/policytest"
	"github.com/toolgate/toolgate/policy"
)

// reloadPolicy is a small valid policy; extra is appended (more tools, an
// access section, a server section).
func reloadPolicy(description, extra string) string {
	return `version: 1
upstreams:
  svc: {url: "http://127.0.0.1:1"}
tools:
  t:
    description: "` + description + `"
    upstream: svc
    request: {method: GET, path: /t}
` + extra
}

// reloadHarness is a Reloader over a policy file, with its metrics, its
// log and what its consumer was handed.
type reloadHarness struct {
	t       *testing.T
	path    string
	r       *Reloader
	m       ReloadMetrics
	logs    *bytes.Buffer
	swapped []*policy.Snapshot
	swapErr error
}

func newReloadHarness(t *testing.T, first string, opts Options) *reloadHarness {
	t.Helper()
	h := &reloadHarness{t: t, path: filepath.Join(t.TempDir(), "policy.yaml"), logs: &bytes.Buffer{}}
	policytest.WriteFile(t, h.path, first)
	opts.LookupEnv = noEnv
	// A settle window of a nanosecond: these tests write whole files.
	loader := NewLoader(h.path, LoaderOptions{Options: opts, Settle: time.Nanosecond})
	snap, err := loader.Load()
	if err != nil {
		t.Fatal(err)
	}
	h.m = ReloadMetrics{
		Reloads:              prometheus.NewCounterVec(prometheus.CounterOpts{Name: "reloads_total"}, []string{"result"}),
		LastReloadSuccessful: prometheus.NewGauge(prometheus.GaugeOpts{Name: "last_reload_successful"}),
		Generation:           prometheus.NewGauge(prometheus.GaugeOpts{Name: "generation"}),
	}
	logger := slog.New(slog.NewJSONHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	h.r = NewReloader(snap, ReloaderOptions{Source: loader, Metrics: h.m, Logger: logger, Swap: func(s *policy.Snapshot) error {
		if h.swapErr != nil {
			return h.swapErr
		}
		h.swapped = append(h.swapped, s)
		return nil
	}})
	return h
}

// reload writes doc (by rename, as editors save) and reloads.
func (h *reloadHarness) reload(doc string) error {
	h.t.Helper()
	policytest.ReplaceFile(h.t, h.path, doc)
	return h.r.Reload()
}

// state is the generation, the gauges and the counters, in one comparable
// value.
type reloadState struct {
	generation          int64
	generationGauge     float64
	lastOK              float64
	successes, failures float64
	swaps               int
}

func (h *reloadHarness) state() reloadState {
	return reloadState{
		generation:      h.r.Current().Generation,
		generationGauge: testutil.ToFloat64(h.m.Generation),
		lastOK:          testutil.ToFloat64(h.m.LastReloadSuccessful),
		successes:       testutil.ToFloat64(h.m.Reloads.WithLabelValues("success")),
		failures:        testutil.ToFloat64(h.m.Reloads.WithLabelValues("failure")),
		swaps:           len(h.swapped),
	}
}

func (h *reloadHarness) mustState(want reloadState) {
	h.t.Helper()
	if got := h.state(); got != want {
		h.t.Errorf("state %+v, want %+v", got, want)
	}
}

// TestReloaderCountsOnlyRealChanges: the generation (and its gauge) grows
// when the checksum changes; an unchanged policy is a successful reload
// that hands nothing to the consumer.
func TestReloaderCountsOnlyRealChanges(t *testing.T) {
	h := newReloadHarness(t, reloadPolicy("v1", ""), Options{})
	h.mustState(reloadState{generation: 1, generationGauge: 1, lastOK: 1})
	if err := h.r.Reload(); err != nil {
		t.Fatal(err)
	}
	h.mustState(reloadState{generation: 1, generationGauge: 1, lastOK: 1, successes: 1})
	if err := h.reload(reloadPolicy("v2", "")); err != nil {
		t.Fatal(err)
	}
	h.mustState(reloadState{generation: 2, generationGauge: 2, lastOK: 1, successes: 2, swaps: 1})
	if got := h.r.Current().Snapshot; got != h.swapped[0] || got.Tools["t"].Description != "v2" {
		t.Errorf("current snapshot is not the one handed to the consumer")
	}
	if !strings.Contains(h.logs.String(), `"msg":"policy reloaded"`) {
		t.Errorf("no log line for the reload:\n%s", h.logs)
	}
}

// TestReloaderKeepsTheRunningPolicy: every refusal keeps the running
// policy and its generation, counts a failure and clears
// last_reload_successful; the error says why.
func TestReloaderKeepsTheRunningPolicy(t *testing.T) {
	deny := "access:\n  default: deny\n"
	ambiguous := `  t2:
    description: "another route"
    upstream: svc
    args: {type: object, properties: {id: {type: string}}}
    request: {method: GET, path: "/{id}"}
  t3:
    description: "the same route"
    upstream: svc
    args: {type: object, properties: {n: {type: string}}}
    request: {method: GET, path: "/{n}"}
`
	for _, tc := range []struct {
		name   string
		opts   Options
		first  string
		next   string
		swap   error
		reason string
	}{
		{"a policy that does not load", Options{}, reloadPolicy("v1", ""), reloadPolicy("v1", "bogus: true\n"), nil, "policy.yaml:9:1: bogus: unknown key"},
		{"another state store", Options{}, reloadPolicy("v1", ""), reloadPolicy("v1", "state: {backend: memory, max_keys: 5}\n"), nil, "state: the state store cannot change on reload"},
		{"another listen address", Options{}, reloadPolicy("v1", ""), reloadPolicy("v1", "server: {listen: \":8081\"}\n"), nil, "server.listen cannot change on reload"},
		{"another admin address", Options{}, reloadPolicy("v1", ""), reloadPolicy("v1", "server: {admin_listen: \"127.0.0.1:9091\"}\n"), nil, "server.admin_listen cannot change on reload"},
		{"other connection bounds", Options{}, reloadPolicy("v1", ""), reloadPolicy("v1", "server: {max_connections: 7}\n"), nil, "server.max_connections cannot change on reload"},
		{"another tracing section", Options{}, reloadPolicy("v1", ""), reloadPolicy("v1", "server: {tracing: {endpoint: \"127.0.0.1:4317\"}}\n"), nil, "server.tracing cannot change on reload"},
		{"learning mode turned on", Options{}, reloadPolicy("v1", ""), reloadPolicy("v1", "server: {learn: {}}\n"), nil, "server.learn cannot change on reload"},
		{"access opened without saying so", Options{}, reloadPolicy("v1", deny), reloadPolicy("v2", ""), nil, "access: reload refused"},
		{"ambiguous routes under ext_proc", Options{ByRoute: true}, reloadPolicy("v1", ""), reloadPolicy("v1", ambiguous), nil,
			"policy.yaml:18:34: tools.t3.request.path: route GET /{n} is ambiguous with tool t2 (GET /{id}): toolgate extproc identifies every call by its route"},
		{"a consumer that refuses the snapshot", Options{}, reloadPolicy("v1", ""), reloadPolicy("v2", ""), errors.New("the core said no"), "the core said no"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newReloadHarness(t, tc.first, tc.opts)
			h.swapErr = tc.swap
			err := h.reload(tc.next)
			if err == nil || !strings.Contains(err.Error(), tc.reason) {
				t.Fatalf("reload error %v, want one saying %q", err, tc.reason)
			}
			h.mustState(reloadState{generation: 1, generationGauge: 1, lastOK: 0, failures: 1})
			if !strings.Contains(h.logs.String(), `"level":"ERROR","msg":"policy reload failed; keeping the last good policy"`) {
				t.Errorf("the refusal is not logged as an error:\n%s", h.logs)
			}
			if d := h.r.Current().Snapshot.Tools["t"].Description; d != "v1" {
				t.Errorf("the running policy changed to %q", d)
			}
		})
	}
}

// TestReloaderIgnoresAddressesGivenByFlags: with -listen and -admin the
// policy's addresses are not used, so changing them is no reason to
// refuse a reload.
func TestReloaderIgnoresAddressesGivenByFlags(t *testing.T) {
	h := newReloadHarness(t, reloadPolicy("v1", ""), Options{Listen: "127.0.0.1:0", AdminListen: "127.0.0.1:0"})
	if err := h.reload(reloadPolicy("v2", "server: {listen: \":8081\", admin_listen: \":9091\"}\n")); err != nil {
		t.Fatal(err)
	}
	h.mustState(reloadState{generation: 2, generationGauge: 2, lastOK: 1, successes: 1, swaps: 1})
	if s := h.r.Current().Snapshot.Server; s.Listen != "127.0.0.1:0" || s.AdminListen != "127.0.0.1:0" {
		t.Errorf("listen %q, admin %q: the flags no longer rule", s.Listen, s.AdminListen)
	}
}

// TestReloaderLogsARecoveryAtInfo: after a refused reload, the next good
// one says so at info, whether or not it changed the policy.
func TestReloaderLogsARecoveryAtInfo(t *testing.T) {
	for _, tc := range []struct {
		name, fixed, want string
	}{
		{"back to the running policy", reloadPolicy("v1", ""), `"level":"INFO","msg":"policy reload recovered; the policy files are valid again and unchanged from the running policy"`},
		{"on to a new policy", reloadPolicy("v2", ""), `"level":"INFO","msg":"policy reloaded","generation":2,`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newReloadHarness(t, reloadPolicy("v1", ""), Options{})
			if err := h.reload(reloadPolicy("v1", "bogus: true\n")); err == nil {
				t.Fatal("a broken policy was taken")
			}
			if err := h.reload(tc.fixed); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(h.logs.String(), tc.want) {
				t.Errorf("no %s in the log:\n%s", tc.want, h.logs)
			}
			if tc.name == "on to a new policy" && !strings.Contains(h.logs.String(), `"recovered":true`) {
				t.Errorf("the reload does not say it recovered:\n%s", h.logs)
			}
			if ok := testutil.ToFloat64(h.m.LastReloadSuccessful); ok != 1 {
				t.Errorf("last_reload_successful %v after the recovery", ok)
			}
		})
	}
}

func TestReloaderWithoutASource(t *testing.T) {
	snap, err := CompileSource("p.yaml", []byte(reloadPolicy("v1", "")), Options{LookupEnv: noEnv})
	if err != nil {
		t.Fatal(err)
	}
	r := NewReloader(snap, ReloaderOptions{Swap: func(*policy.Snapshot) error { return nil }})
	if err := r.Reload(); !errors.Is(err, ErrNoSource) {
		t.Errorf("Reload = %v, want ErrNoSource", err)
	}
	if cur := r.Current(); cur.Generation != 1 || cur.Snapshot != snap {
		t.Errorf("current %+v", cur)
	}
}

// TestReloaderTellsHowTheLastReloadEnded: LastReload is zero until a
// reload runs, then says whether the last one failed and why.
func TestReloaderTellsHowTheLastReloadEnded(t *testing.T) {
	h := newReloadHarness(t, reloadPolicy("v1", ""), Options{})
	if st := h.r.LastReload(); !st.At.IsZero() || st.Err != "" {
		t.Fatalf("before any reload: %+v", st)
	}
	for _, step := range []struct {
		name, doc, err string
	}{
		{"a reload that fails", reloadPolicy("v1", "bogus: true\n"), "bogus: unknown key"},
		{"a reload that succeeds", reloadPolicy("v2", ""), ""},
	} {
		t.Run(step.name, func(t *testing.T) {
			before := time.Now()
			_ = h.reload(step.doc)
			st := h.r.LastReload()
			if st.At.Before(before) || !strings.Contains(st.Err, step.err) || (step.err == "") != (st.Err == "") {
				t.Errorf("last reload %+v, want one after %v with error %q", st, before, step.err)
			}
		})
	}
}
