package grafana

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/promql/parser"
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
		"kind":   {proxy.ViolationSchema, proxy.ViolationKey, proxy.ViolationSize},
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

var promqlParser = parser.NewParser(parser.Options{})

// checkOptions say what else an expression must do.
type checkOptions struct {
	// filtered: every selector filters each of these labels it has by the
	// template variable of the same name (label=~"$label").
	filtered []string
}

// checkExpr parses expr and checks it against the catalog: known metric
// names, existing label names in matchers, groupings and vector matching,
// and existing values of the closed label sets.
func checkExpr(cat catalog, expr string, opts checkOptions) error {
	node, err := promqlParser.ParseExpr(grafanaIntervals.Replace(expr))
	if err != nil {
		return fmt.Errorf("does not parse: %w", err)
	}
	var errs []error
	values := knownValues()
	parser.Inspect(node, func(n parser.Node, _ []parser.Node) error {
		switch n := n.(type) {
		case *parser.VectorSelector:
			errs = append(errs, checkSelector(cat, n, values, opts)...)
		case *parser.AggregateExpr:
			errs = append(errs, checkLabelsExist(cat, n.Expr, n.Grouping, "grouping of "+n.Op.String())...)
		case *parser.BinaryExpr:
			if n.VectorMatching != nil {
				labels := append(slices.Clone(n.VectorMatching.MatchingLabels), n.VectorMatching.Include...)
				errs = append(errs, checkLabelsExist(cat, n, labels, "vector matching of "+n.Op.String())...)
			}
		}
		return nil
	})
	return errors.Join(errs...)
}

func checkSelector(cat catalog, vs *parser.VectorSelector, values map[string][]string, opts checkOptions) []error {
	name := vs.Name
	for _, m := range vs.LabelMatchers {
		if m.Name == "__name__" && name == "" {
			name = m.Value
		}
	}
	labels, ok := cat[name]
	if !ok {
		return []error{fmt.Errorf("%s: toolgate exports no series %q", vs, name)}
	}
	var errs []error
	matchers := map[string]string{}
	for _, m := range vs.LabelMatchers {
		if m.Name == "__name__" {
			continue
		}
		matchers[m.Name] = m.Type.String() + m.Value
		if !labels[m.Name] && !slices.Contains(targetLabels, m.Name) {
			errs = append(errs, fmt.Errorf("%s: %s has no label %q", vs, name, m.Name))
			continue
		}
		known, closed := values[m.Name]
		if !closed || strings.Contains(m.Value, "$") || m.Value == "" {
			continue
		}
		for v := range strings.SplitSeq(m.Value, "|") {
			if !slices.Contains(known, v) {
				errs = append(errs, fmt.Errorf("%s: %q is not a value of %s (%v)", vs, v, m.Name, known))
			}
		}
	}
	for _, label := range opts.filtered {
		if !labels[label] && !slices.Contains(targetLabels, label) {
			continue
		}
		if want := `=~$` + label; matchers[label] != want {
			errs = append(errs, fmt.Errorf("%s: filter %s by the template variable: %s=~\"$%s\"", vs, label, label, label))
		}
	}
	return errs
}

// checkLabelsExist reports grouping or matching labels that no series under
// node has.
func checkLabelsExist(cat catalog, node parser.Node, labels []string, what string) []error {
	have := map[string]bool{}
	for _, l := range targetLabels {
		have[l] = true
	}
	parser.Inspect(node, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			name := vs.Name
			for _, m := range vs.LabelMatchers {
				if m.Name == "__name__" && name == "" {
					name = m.Value
				}
			}
			maps.Copy(have, cat[name])
		}
		return nil
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
		node, err := promqlParser.ParseExpr(selector)
		if err != nil {
			continue
		}
		if vs, ok := node.(*parser.VectorSelector); !ok || !(cat[vs.Name][label] || slices.Contains(targetLabels, label)) {
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
	}
	for name, c := range bad {
		t.Run(name, func(t *testing.T) {
			if err := checkExpr(cat, c.expr, c.opts); err == nil {
				t.Errorf("%s passed the check", c.expr)
			}
		})
	}
	good := `histogram_quantile(0.99, sum by (le, tool) (rate(toolgate_tool_call_duration_seconds_bucket{job=~"$job", tool=~"$tool"}[$__rate_interval])))`
	if err := checkExpr(cat, good, filtered); err != nil {
		t.Errorf("%s: %v", good, err)
	}
}
