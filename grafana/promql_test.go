package grafana

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/VictoriaMetrics/metricsql"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/yaml"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/examples"
	"github.com/toolgate/toolgate/proxy"
)

// rulesFile is the PrometheusRule whose expressions are checked here too:
// one catalog of toolgate's metrics serves the dashboard and the alerts.
const rulesFile = "../deploy/base/prometheusrule.yaml"

// targetLabels are added by Prometheus (job, instance) and by
// prometheus-operator's ServiceMonitor discovery; queries may use them.
var targetLabels = []string{"job", "instance", "namespace", "service", "pod", "container", "endpoint"}

// catalog maps every series name toolgate exports to its label names. A
// histogram appears as its _bucket (with le), _sum and _count series.
type catalog map[string]map[string]bool

// recorder is a prometheus.Registerer that keeps what is registered, so
// the catalog comes from the collectors proxy.NewMetrics really creates.
type recorder struct{ collectors []prometheus.Collector }

func (r *recorder) Register(c prometheus.Collector) error {
	r.collectors = append(r.collectors, c)
	return nil
}

func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	r.collectors = append(r.collectors, cs...)
}

func (r *recorder) Unregister(prometheus.Collector) bool { return false }

var descRE = regexp.MustCompile(`^Desc\{fqName: "([^"]+)", .*, variableLabels: \{([^{}]*)\}\}$`)

// exportedMetrics describes every collector of proxy.NewMetrics. A Desc has
// no getters; its String form is parsed, and
// TestCatalogMatchesWhatARegistryGathers checks the result against a real
// scrape.
func exportedMetrics(t *testing.T) catalog {
	t.Helper()
	var rec recorder
	proxy.NewMetrics(&rec, "test")
	cat := catalog{}
	for _, c := range rec.collectors {
		ch := make(chan *prometheus.Desc, 16)
		c.Describe(ch)
		close(ch)
		var histogram bool
		switch c.(type) {
		case *prometheus.HistogramVec, prometheus.Histogram:
			histogram = true
		}
		for desc := range ch {
			m := descRE.FindStringSubmatch(desc.String())
			if m == nil {
				t.Fatalf("cannot read the metric descriptor %s", desc)
			}
			labels := map[string]bool{}
			for l := range strings.SplitSeq(m[2], ",") {
				if l != "" {
					labels[l] = true
				}
			}
			if !histogram {
				cat[m[1]] = labels
				continue
			}
			cat[m[1]+"_sum"] = labels
			cat[m[1]+"_count"] = labels
			bucket := maps.Clone(labels)
			bucket["le"] = true
			cat[m[1]+"_bucket"] = bucket
		}
	}
	if len(cat) < 13 {
		t.Fatalf("catalog has only %d series names: %v", len(cat), slices.Sorted(maps.Keys(cat)))
	}
	return cat
}

// TestCatalogMatchesWhatARegistryGathers runs the example policy on a core
// with a fresh registry and compares each gathered family with the catalog:
// same names, same label names.
func TestCatalogMatchesWhatARegistryGathers(t *testing.T) {
	cat := exportedMetrics(t)
	snap, err := config.CompileSource("policy.yaml", examples.Policy(), config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	core, err := proxy.NewCore(snap, proxy.Options{Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	// One call of an unknown tool needs no backend and creates its series.
	core.Call(context.Background(), &proxy.Request{Tool: "no_such_tool", Body: []byte("{}")})
	core.Metrics().AccessRejections.WithLabelValues("unknown", "unknown", "denied")
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, f := range families {
		for _, m := range f.GetMetric() {
			got := map[string]bool{}
			for _, lp := range m.GetLabel() {
				got[lp.GetName()] = true
			}
			name := f.GetName()
			if m.GetHistogram() != nil {
				name += "_count"
			}
			want, ok := cat[name]
			if !ok {
				t.Errorf("gathered %s, which the catalog lacks", name)
				continue
			}
			if !maps.Equal(got, want) {
				t.Errorf("%s: gathered labels %v, catalog %v", name, slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)))
			}
			seen++
		}
	}
	if seen == 0 {
		t.Fatal("gathered nothing")
	}
}

// knownValues are the closed label value sets (DESIGN.md section 5); a
// matcher on one of these labels must name existing values.
func knownValues() map[string][]string {
	var statuses []string
	for _, s := range contracts.Statuses() {
		statuses = append(statuses, string(s))
	}
	return map[string][]string{
		"status": statuses,
		"event": {proxy.EventStored, proxy.EventReplayed, proxy.EventWaited, proxy.EventMismatch,
			proxy.EventMissingKey, proxy.EventUnknownKept, proxy.EventEvicted},
		"kind":   {proxy.ViolationSchema, proxy.ViolationKey, proxy.ViolationSize, proxy.ViolationResponse},
		"reason": {"denied", "rate", "budget"},
		"result": {"success", "failure"},
		"op":     {"claim", "complete", "wait"},
	}
}

// grafanaIntervals replaces Grafana's built-in interval variables, which
// stand where PromQL wants a duration.
var grafanaIntervals = strings.NewReplacer(
	"${__rate_interval}", "5m", "$__rate_interval", "5m",
	"${__interval}", "1m", "$__interval", "1m",
	"${__range}", "1h", "$__range", "1h",
)

// checkOptions say what else an expression must do.
type checkOptions struct {
	// filtered: every selector filters each of these labels it has by the
	// template variable of the same name (label=~"$label").
	filtered []string
}

// parseExpr parses a dashboard or rule expression into a syntax tree.
//
// The tree comes from VictoriaMetrics' metricsql, a small parser of a
// superset of PromQL: Prometheus' own parser lives in the prometheus
// module, whose go.mod drags the cloud SDKs of every service discovery
// into `go mod download`. That metricsql accepts a little more than PromQL
// is covered by TestPromtoolAcceptsEveryDashboardQuery, which gives every
// expression to Prometheus' parser through promtool.
func parseExpr(expr string) (metricsql.Expr, error) {
	return metricsql.Parse(grafanaIntervals.Replace(expr))
}

// selectorName returns a selector's metric name and its label matchers
// (metricsql keeps the name as the first __name__ matcher; an "or" inside
// braces makes several groups, none of which the dashboard uses).
func selectorName(me *metricsql.MetricExpr) (string, []metricsql.LabelFilter, error) {
	if len(me.LabelFilterss) != 1 {
		return "", nil, fmt.Errorf("%s: one group of label matchers expected", me.AppendString(nil))
	}
	var name string
	var matchers []metricsql.LabelFilter
	for _, lf := range me.LabelFilterss[0] {
		if lf.Label == "__name__" && !lf.IsRegexp && !lf.IsNegative && name == "" {
			name = lf.Value
			continue
		}
		matchers = append(matchers, lf)
	}
	return name, matchers, nil
}

// matchOp renders a matcher's operator as PromQL writes it.
func matchOp(lf metricsql.LabelFilter) string {
	switch {
	case lf.IsNegative && lf.IsRegexp:
		return "!~"
	case lf.IsNegative:
		return "!="
	case lf.IsRegexp:
		return "=~"
	}
	return "="
}

// checkExpr parses expr and checks it against the catalog: known metric
// names, existing label names in matchers, groupings and vector matching,
// and existing values of the closed label sets.
func checkExpr(cat catalog, expr string, opts checkOptions) error {
	node, err := parseExpr(expr)
	if err != nil {
		return fmt.Errorf("does not parse: %w", err)
	}
	var errs []error
	values := knownValues()
	metricsql.VisitAll(node, func(n metricsql.Expr) {
		switch n := n.(type) {
		case *metricsql.MetricExpr:
			errs = append(errs, checkSelector(cat, n, values, opts)...)
		case *metricsql.AggrFuncExpr:
			errs = append(errs, checkLabelsExist(cat, n, n.Modifier.Args, "grouping of "+n.Name)...)
		case *metricsql.BinaryOpExpr:
			labels := append(slices.Clone(n.GroupModifier.Args), n.JoinModifier.Args...)
			errs = append(errs, checkLabelsExist(cat, n, labels, "vector matching of "+n.Op)...)
		}
	})
	return errors.Join(errs...)
}

func checkSelector(cat catalog, vs *metricsql.MetricExpr, values map[string][]string, opts checkOptions) []error {
	name, matchers, err := selectorName(vs)
	if err != nil {
		return []error{err}
	}
	where := string(vs.AppendString(nil))
	labels, ok := cat[name]
	if !ok {
		return []error{fmt.Errorf("%s: toolgate exports no series %q", where, name)}
	}
	var errs []error
	byLabel := map[string]string{}
	for _, m := range matchers {
		byLabel[m.Label] = matchOp(m) + m.Value
		if !labels[m.Label] && !slices.Contains(targetLabels, m.Label) {
			errs = append(errs, fmt.Errorf("%s: %s has no label %q", where, name, m.Label))
			continue
		}
		known, closed := values[m.Label]
		if !closed || strings.Contains(m.Value, "$") || m.Value == "" {
			continue
		}
		for v := range strings.SplitSeq(m.Value, "|") {
			if !slices.Contains(known, v) {
				errs = append(errs, fmt.Errorf("%s: %q is not a value of %s (%v)", where, v, m.Label, known))
			}
		}
	}
	for _, label := range opts.filtered {
		if !labels[label] && !slices.Contains(targetLabels, label) {
			continue
		}
		if want := `=~$` + label; byLabel[label] != want {
			errs = append(errs, fmt.Errorf("%s: filter %s by the template variable: %s=~\"$%s\"", where, label, label, label))
		}
	}
	return errs
}

// checkLabelsExist reports grouping or matching labels that no series under
// node has.
func checkLabelsExist(cat catalog, node metricsql.Expr, labels []string, what string) []error {
	have := map[string]bool{}
	for _, l := range targetLabels {
		have[l] = true
	}
	metricsql.VisitAll(node, func(n metricsql.Expr) {
		if vs, ok := n.(*metricsql.MetricExpr); ok {
			if name, _, err := selectorName(vs); err == nil {
				maps.Copy(have, cat[name])
			}
		}
	})
	var errs []error
	for _, l := range labels {
		if !have[l] {
			errs = append(errs, fmt.Errorf("%s: no series under it has label %q", what, l))
		}
	}
	return errs
}

func TestDashboardQueriesUseOnlyToolgateMetrics(t *testing.T) {
	cat := exportedMetrics(t)
	d := loadDashboard(t)
	qs := d.queries()
	if len(qs) < 15 {
		t.Fatalf("only %d queries", len(qs))
	}
	for _, q := range qs {
		if err := checkExpr(cat, q.expr, checkOptions{filtered: filterVariables}); err != nil {
			t.Errorf("%s: %s\n%v", q.where, q.expr, err)
		}
	}
	for _, name := range filterVariables {
		v := d.variable(name)
		if v == nil {
			t.Fatalf("no variable %s", name)
		}
		selector, label, ok := v.labelValues()
		if !ok {
			t.Errorf("variable %s: not a label_values query", name)
			continue
		}
		if err := checkExpr(cat, selector, checkOptions{}); err != nil {
			t.Errorf("variable %s: %v", name, err)
		}
		node, err := parseExpr(selector)
		if err != nil {
			continue
		}
		vs, ok := node.(*metricsql.MetricExpr)
		if !ok {
			t.Errorf("variable %s: %s is not a selector", name, selector)
			continue
		}
		if metric, _, err := selectorName(vs); err != nil || !(cat[metric][label] || slices.Contains(targetLabels, label)) {
			t.Errorf("variable %s: %s has no label %s", name, selector, label)
		}
	}
}

// alertRules reads the expressions of deploy/'s PrometheusRule.
func alertRules(t *testing.T) map[string]string {
	t.Helper()
	data, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var pr monitoringv1.PrometheusRule
	if err := yaml.Unmarshal(data, &pr); err != nil {
		t.Fatal(err)
	}
	rules := map[string]string{}
	for _, g := range pr.Spec.Groups {
		for _, r := range g.Rules {
			name := r.Alert
			if name == "" {
				name = r.Record
			}
			rules[name] = r.Expr.String()
		}
	}
	if len(rules) == 0 {
		t.Fatal("no rules")
	}
	return rules
}

func TestAlertRulesUseOnlyToolgateMetrics(t *testing.T) {
	cat := exportedMetrics(t)
	for name, expr := range alertRules(t) {
		if err := checkExpr(cat, expr, checkOptions{}); err != nil {
			t.Errorf("%s: %s\n%v", name, expr, err)
		}
	}
}

// TestTheCheckerCatchesMistakes keeps the checks above honest: each of
// these expressions has one mistake the checker must report.
func TestTheCheckerCatchesMistakes(t *testing.T) {
	cat := exportedMetrics(t)
	filtered := checkOptions{filtered: filterVariables}
	bad := map[string]struct {
		expr string
		opts checkOptions
	}{
		"a syntax error":                 {`sum(rate(toolgate_tool_calls_total[5m])`, checkOptions{}},
		"a metric toolgate lacks":        {`rate(toolgate_calls_total[5m])`, checkOptions{}},
		"a histogram without its suffix": {`rate(toolgate_tool_call_duration_seconds[5m])`, checkOptions{}},
		"a label the metric lacks":       {`toolgate_tool_cost_total{status="ok"}`, checkOptions{}},
		"le on a counter":                {`sum by (le) (rate(toolgate_tool_calls_total[5m]))`, checkOptions{}},
		"a grouping label nobody has":    {`sum by (tol) (rate(toolgate_tool_calls_total[5m]))`, checkOptions{}},
		"matching on a missing label":    {`toolgate_tool_calls_total / on (upstream) toolgate_tool_calls_total`, checkOptions{}},
		"a status that does not exist":   {`toolgate_tool_calls_total{status=~"ok|error"}`, checkOptions{}},
		"an unfiltered dashboard query":  {`sum(rate(toolgate_tool_calls_total{job=~"$job", tool=~"$tool"}[$__rate_interval]))`, filtered},
		"a variable in the wrong label":  {`toolgate_tool_cost_total{job=~"$job", tool=~"$caller", caller=~"$caller"}`, filtered},
		"a query that ignores instance":  {`toolgate_circuit_state{namespace=~"$namespace", job=~"$job"}`, filtered},
		"a caller query without $caller": {`toolgate_tool_cost_total{namespace=~"$namespace", job=~"$job", instance=~"$instance", tool=~"$tool"}`, filtered},
	}
	for name, c := range bad {
		t.Run(name, func(t *testing.T) {
			if err := checkExpr(cat, c.expr, c.opts); err == nil {
				t.Errorf("%s passed the check", c.expr)
			}
		})
	}
	good := `histogram_quantile(0.99, sum by (le, tool) (rate(toolgate_tool_call_duration_seconds_bucket{namespace=~"$namespace", job=~"$job", instance=~"$instance", tool=~"$tool"}[$__rate_interval])))`
	if err := checkExpr(cat, good, filtered); err != nil {
		t.Errorf("%s: %v", good, err)
	}
}

// promtoolBinary finds promtool. Without it the test is skipped, unless
// TOOLGATE_REQUIRE_PROMETHEUS is set (make test sets it, after
// scripts/deps.sh has installed the Debian package). Under -short it is
// skipped: make quick runs no external programs.
func promtoolBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("runs promtool")
	}
	path, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("TOOLGATE_REQUIRE_PROMETHEUS") != "" {
			t.Fatalf("promtool not found and TOOLGATE_REQUIRE_PROMETHEUS is set (install the Debian package prometheus): %v", err)
		}
		t.Skip("promtool not found; set TOOLGATE_REQUIRE_PROMETHEUS to make this a failure")
	}
	return path
}

// allValues puts the value Grafana sends for "All" in every template
// variable, and durations in Grafana's interval variables.
func allValues(expr string) string {
	for _, name := range filterVariables {
		expr = strings.ReplaceAll(expr, `"$`+name+`"`, `".*"`)
	}
	return grafanaIntervals.Replace(expr)
}

// TestPromtoolAcceptsEveryDashboardQuery gives every dashboard expression,
// as Grafana sends it with All selected, to Prometheus' own parser: each
// becomes a recording rule that `promtool check rules` must accept. The
// checks above parse with metricsql, which accepts some MetricsQL that
// PromQL does not; this test holds the dashboard to PromQL.
func TestPromtoolAcceptsEveryDashboardQuery(t *testing.T) {
	bin := promtoolBinary(t)
	d := loadDashboard(t)
	var rules []map[string]string
	for i, q := range d.queries() {
		rules = append(rules, map[string]string{"record": fmt.Sprintf("dashboard:query%d", i), "expr": allValues(q.expr)})
	}
	for _, v := range d.Templating.List {
		if selector, _, ok := v.labelValues(); ok {
			rules = append(rules, map[string]string{"record": "dashboard:variable_" + v.Name, "expr": allValues(selector)})
		}
	}
	out, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "dashboard.rules.yaml")
	if err := os.WriteFile(file, out, 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := exec.Command(bin, "check", "rules", file).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules: %v\n%s\n%s", err, res, out)
	}
	if !strings.Contains(string(res), fmt.Sprintf("%d rules found", len(rules))) {
		t.Errorf("promtool did not check all %d expressions:\n%s", len(rules), res)
	}
}

// seriesNames lists the metric names an expression selects.
func seriesNames(t *testing.T, expr string) []string {
	t.Helper()
	node, err := parseExpr(expr)
	if err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	var names []string
	metricsql.VisitAll(node, func(n metricsql.Expr) {
		if vs, ok := n.(*metricsql.MetricExpr); ok {
			if name, _, err := selectorName(vs); err == nil {
				names = append(names, name)
			}
		}
	})
	return names
}
