// Package grafana holds toolgate's Grafana dashboard (toolgate.json). The
// tests check that it imports into current Grafana (its shape, the
// datasource and template variables), that every PromQL expression in it and
// in deploy/'s alert rules parses and names only metrics and labels that
// toolgate exports, and, end to end, that a real Prometheus scraping a real
// toolgate answers every panel's query with data.
package grafana

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The dashboard's JSON model, as far as the tests read it.
type dashboard struct {
	UID           string   `json:"uid"`
	Title         string   `json:"title"`
	SchemaVersion int      `json:"schemaVersion"`
	Editable      bool     `json:"editable"`
	Tags          []string `json:"tags"`
	Panels        []panel  `json:"panels"`
	Templating    struct {
		List []variable `json:"list"`
	} `json:"templating"`
	Annotations struct {
		List []annotation `json:"list"`
	} `json:"annotations"`
}

type datasourceRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type panel struct {
	ID          int            `json:"id"`
	Type        string         `json:"type"`
	Title       string         `json:"title"`
	Description string         `json:"description"`
	Datasource  *datasourceRef `json:"datasource"`
	GridPos     struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Targets []target `json:"targets"`
	Panels  []panel  `json:"panels"` // a collapsed row's panels
}

type target struct {
	Datasource   *datasourceRef `json:"datasource"`
	Expr         string         `json:"expr"`
	LegendFormat string         `json:"legendFormat"`
	RefID        string         `json:"refId"`
}

type variable struct {
	Name       string         `json:"name"`
	Type       string         `json:"type"`
	Query      any            `json:"query"` // a string, or {"query": ...} in newer Grafana
	Definition string         `json:"definition"`
	Datasource *datasourceRef `json:"datasource"`
	IncludeAll bool           `json:"includeAll"`
	Multi      bool           `json:"multi"`
	AllValue   string         `json:"allValue"`
}

type annotation struct {
	Name       string         `json:"name"`
	Datasource *datasourceRef `json:"datasource"`
	Expr       string         `json:"expr"`
	BuiltIn    int            `json:"builtIn"`
}

// query is one PromQL expression of the dashboard, with where it is.
type query struct {
	where  string // "panel \"Title\" A"
	panel  string
	expr   string
	legend string
}

func loadDashboard(t *testing.T) *dashboard {
	t.Helper()
	data, err := os.ReadFile("toolgate.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("toolgate.json: %v", err)
	}
	return &d
}

// allPanels flattens rows.
func (d *dashboard) allPanels() []panel {
	var out []panel
	for _, p := range d.Panels {
		out = append(out, p)
		out = append(out, p.Panels...)
	}
	return out
}

// queries returns every PromQL expression: panel targets and annotations.
func (d *dashboard) queries() []query {
	var qs []query
	for _, p := range d.allPanels() {
		for _, tg := range p.Targets {
			qs = append(qs, query{
				where: fmt.Sprintf("panel %q %s", p.Title, tg.RefID), panel: p.Title,
				expr: tg.Expr, legend: tg.LegendFormat,
			})
		}
	}
	for _, a := range d.Annotations.List {
		if a.Expr != "" {
			qs = append(qs, query{where: fmt.Sprintf("annotation %q", a.Name), expr: a.Expr})
		}
	}
	return qs
}

func (d *dashboard) variable(name string) *variable {
	for i := range d.Templating.List {
		if d.Templating.List[i].Name == name {
			return &d.Templating.List[i]
		}
	}
	return nil
}

var labelValuesRE = regexp.MustCompile(`^label_values\((.+),\s*([a-zA-Z_][a-zA-Z0-9_]*)\)$`)

// labelValues splits a label_values(selector, label) variable query.
func (v *variable) labelValues() (selector, label string, ok bool) {
	q := v.Definition
	switch x := v.Query.(type) {
	case string:
		q = x
	case map[string]any:
		if s, _ := x["query"].(string); s != "" {
			q = s
		}
	}
	m := labelValuesRE.FindStringSubmatch(strings.TrimSpace(q))
	if m == nil {
		return "", "", false
	}
	return strings.TrimSpace(m[1]), m[2], true
}

// The variables every panel query is filtered by, and the labels they
// filter, in the order the dashboard shows them: each variable's own query
// is filtered by the ones before it.
var filterVariables = []string{"namespace", "job", "instance", "tool", "caller"}

func isDatasourceVariable(ds *datasourceRef) bool {
	return ds != nil && ds.Type == "prometheus" && (ds.UID == "${datasource}" || ds.UID == "$datasource")
}

func TestDashboardImportsIntoCurrentGrafana(t *testing.T) {
	d := loadDashboard(t)
	if d.SchemaVersion < 39 {
		t.Errorf("schemaVersion %d; current Grafana writes 39 or later", d.SchemaVersion)
	}
	if d.UID == "" || d.Title == "" {
		t.Error("the dashboard needs a uid (stable links) and a title")
	}
	ds := d.variable("datasource")
	if ds == nil || ds.Type != "datasource" || ds.Query != "prometheus" {
		t.Fatalf("no datasource variable of type prometheus: %+v", ds)
	}
	for _, name := range filterVariables {
		v := d.variable(name)
		if v == nil {
			t.Errorf("no template variable %s", name)
			continue
		}
		if v.Type != "query" || !isDatasourceVariable(v.Datasource) {
			t.Errorf("variable %s: want a query variable on ${datasource}, got type %q datasource %+v", name, v.Type, v.Datasource)
		}
		if _, label, ok := v.labelValues(); !ok || label != name {
			t.Errorf("variable %s: query is not label_values(..., %s): %v", name, name, v.Query)
		}
		if !v.IncludeAll || !v.Multi || v.AllValue != ".*" {
			t.Errorf("variable %s: want multi-value with All = .* (the queries use =~)", name)
		}
	}

	ids := map[int]string{}
	var cells [24][200]string // grid cells taken, to find overlapping panels
	for _, p := range d.allPanels() {
		if prev, dup := ids[p.ID]; dup {
			t.Errorf("panels %q and %q share id %d", prev, p.Title, p.ID)
		}
		ids[p.ID] = p.Title
		g := p.GridPos
		if g.W <= 0 || g.H <= 0 || g.X < 0 || g.X+g.W > 24 || g.Y < 0 || g.Y+g.H > len(cells[0]) {
			t.Errorf("panel %q: gridPos %+v is off the 24-column grid", p.Title, g)
			continue
		}
	fill:
		for x := g.X; x < g.X+g.W; x++ {
			for y := g.Y; y < g.Y+g.H; y++ {
				if other := cells[x][y]; other != "" {
					t.Errorf("panels %q and %q overlap at x=%d y=%d", other, p.Title, x, y)
					break fill
				}
				cells[x][y] = p.Title
			}
		}
		if p.Type == "row" {
			continue
		}
		if !slices.Contains([]string{"timeseries", "stat", "state-timeline"}, p.Type) {
			t.Errorf("panel %q: unexpected type %q", p.Title, p.Type)
		}
		if !isDatasourceVariable(p.Datasource) {
			t.Errorf("panel %q: datasource %+v is not ${datasource}", p.Title, p.Datasource)
		}
		if p.Description == "" {
			t.Errorf("panel %q has no description", p.Title)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			if !isDatasourceVariable(tg.Datasource) {
				t.Errorf("panel %q %s: datasource %+v is not ${datasource}", p.Title, tg.RefID, tg.Datasource)
			}
			if tg.RefID == "" || refs[tg.RefID] {
				t.Errorf("panel %q: refId %q missing or repeated", p.Title, tg.RefID)
			}
			refs[tg.RefID] = true
			if strings.TrimSpace(tg.Expr) == "" {
				t.Errorf("panel %q %s: empty expression", p.Title, tg.RefID)
			}
		}
	}
	for _, a := range d.Annotations.List {
		if a.BuiltIn == 0 && !isDatasourceVariable(a.Datasource) {
			t.Errorf("annotation %q: datasource %+v is not ${datasource}", a.Name, a.Datasource)
		}
	}
}

// TestDashboardHasThePanelsOperatorsNeed pins the panels docs/operations.md
// explains (issue 7), one row of its panel table each: renaming one is
// fine, but then here and there too.
func TestDashboardHasThePanelsOperatorsNeed(t *testing.T) {
	want := []string{
		"Call rate by status", "Failure ratio by tool", "Latency p50 / p95 / p99 by tool",
		"Agent errors by tool", "Cost by tool and caller", "Rejections by reason",
		"Idempotency events", "Idempotency store errors", "Breaker state",
		"Upstream responses by code", "Upstream latency p50 / p99",
		"Last reload", "Policy generation", "Reloads", "Versions",
	}
	var got []string
	for _, p := range loadDashboard(t).allPanels() {
		if p.Type != "row" {
			got = append(got, p.Title)
		}
	}
	for _, title := range want {
		if !slices.Contains(got, title) {
			t.Errorf("no panel %q", title)
		}
	}
	for _, title := range got {
		if !slices.Contains(want, title) {
			t.Errorf("panel %q is not in the list docs/operations.md explains; add it here and there", title)
		}
	}
	documented := documentedPanels(t)
	for _, title := range got {
		if !slices.Contains(documented, title) {
			t.Errorf("docs/operations.md's panel table has no row for panel %q", title)
		}
	}
	for _, title := range documented {
		if !slices.Contains(got, title) {
			t.Errorf("docs/operations.md explains a panel %q the dashboard does not have", title)
		}
	}
}

// documentedPanels reads the first column of the panel table of
// docs/operations.md (the table whose header is "| panel | what it shows |").
func documentedPanels(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(data), "| panel | what it shows |\n|---|---|\n")
	if !ok {
		t.Fatal("docs/operations.md has no panel table")
	}
	var titles []string
	for line := range strings.SplitSeq(table, "\n") {
		if !strings.HasPrefix(line, "| ") {
			break
		}
		title, _, _ := strings.Cut(strings.TrimPrefix(line, "| "), " | ")
		titles = append(titles, title)
	}
	return titles
}

// TestVariablesNarrowEachOther checks the chain of template variables: the
// values offered for each are those under the choices made before it (a
// namespace's jobs, a job's instances, and so on), and every one is shown.
func TestVariablesNarrowEachOther(t *testing.T) {
	d := loadDashboard(t)
	var names []string
	for _, v := range d.Templating.List {
		names = append(names, v.Name)
	}
	if want := append([]string{"datasource"}, filterVariables...); !slices.Equal(names, want) {
		t.Fatalf("variables %v, want %v", names, want)
	}
	for i, name := range filterVariables {
		v := d.variable(name)
		selector, _, ok := v.labelValues()
		if !ok {
			t.Errorf("variable %s: not a label_values query", name)
			continue
		}
		for _, before := range filterVariables[:i] {
			if !strings.Contains(selector, before+`=~"$`+before+`"`) {
				t.Errorf("variable %s: %s does not narrow by $%s", name, selector, before)
			}
		}
		for _, after := range filterVariables[i:] {
			if strings.Contains(selector, "$"+after) {
				t.Errorf("variable %s: %s depends on $%s, which comes later", name, selector, after)
			}
		}
	}
}

// TestPanelsSayWhenCallerDoesNotFilterThem: the caller variable filters
// only series with a caller label (DESIGN section 5 fixes the label sets:
// latency histograms, upstream, idempotency and reload series have none).
// A panel with such a series says so in its description, and a panel
// without one does not claim it.
func TestPanelsSayWhenCallerDoesNotFilterThem(t *testing.T) {
	cat := exportedMetrics(t)
	for _, p := range loadDashboard(t).allPanels() {
		if p.Type == "row" {
			continue
		}
		var without []string
		for _, tg := range p.Targets {
			for _, name := range seriesNames(t, tg.Expr) {
				if !cat[name]["caller"] && !slices.Contains(without, name) {
					without = append(without, name)
				}
			}
		}
		says := strings.Contains(p.Description, "Not filtered by caller")
		switch {
		case len(without) > 0 && !says:
			t.Errorf("panel %q: %v have no caller label, but the description does not say \"Not filtered by caller\"", p.Title, without)
		case len(without) == 0 && says:
			t.Errorf("panel %q: every series has a caller label, but the description says it is not filtered by caller", p.Title)
		}
	}
}
