package texttemplate

import (
	"encoding/json"
	"strings"
	"testing"
	stdtemplate "text/template"
)

// TestSameAsTextTemplate runs templates of every kind over decoded JSON
// through this copy and through text/template and wants the same output,
// or an error from both.
func TestSameAsTextTemplate(t *testing.T) {
	const data = `{"args": {"q": "go", "limit": 5, "tags": ["a", "b"]},
		"data": {"total": 3, "items": [{"id": 1, "title": "x"}, {"id": 2, "title": "y<&>"}],
			"meta": {"b": true, "a": null, "c": 1.5}, "empty": [], "name": "Ünï"},
		"text": "plain"}`
	var root any
	if err := json.Unmarshal([]byte(data), &root); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, text string }{
		{"fields", `found {{.data.total}} for {{.args.q}}`},
		{"missing key", `{{.args.nope}} {{.data.nope.deeper}}`},
		{"if else", `{{if .data.empty}}some{{else if .data.total}}{{.data.total}}{{else}}none{{end}}`},
		{"range slice", `{{range $i, $e := .data.items}}{{$i}}:{{$e.title}};{{end}}`},
		{"range map sorted", `{{range $k, $v := .data.meta}}{{$k}}={{$v}},{{end}}`},
		{"range else", `{{range .data.empty}}x{{else}}nothing{{end}}`},
		{"range break continue", `{{range .data.items}}{{if eq .id 1.0}}{{continue}}{{end}}{{.id}}{{break}}{{end}}`},
		{"with", `{{with .data.meta}}{{.c}}{{end}}{{with .data.nope}}x{{else}}y{{end}}`},
		{"functions", `{{len .data.items}} {{index .data.items 1 | printf "%v"}} {{printf "%.2f" .data.total}} {{slice .data.name 0 2}}`},
		{"comparisons", `{{and .data.total .args.q}} {{or .data.nope "d"}} {{not .data.meta.b}} {{lt .data.total 4.0}} {{ne .args.q "go"}}`},
		{"escapers", `{{html (index .data.items 1).title}} {{js .data.name}} {{urlquery .args.q "a b"}} {{print .args.tags}} {{println .data.meta}}`},
		{"define and template", `{{define "sub"}}[{{.}}]{{end}}{{template "sub" .args.q}}`},
		{"variables", `{{$n := .data.total}}{{$n = 4}}{{$n}} {{$.text}}`},
		{"whole values", `{{.data}} {{.args}}`},
		{"wrong type", `{{index .data.total 1}}`},
		{"bad function argument", `{{len .data.total}}`},
		{"field of a number", `{{.data.total.x}}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			var want, got strings.Builder
			std, err := stdtemplate.New("t").Option("missingkey=zero").Parse(c.text)
			if err != nil {
				t.Fatal(err)
			}
			wantErr := std.Execute(&want, root)
			tpl, err := New("t").Option("missingkey=zero").Parse(c.text)
			if err != nil {
				t.Fatal(err)
			}
			gotErr := tpl.Execute(&got, root)
			if (gotErr != nil) != (wantErr != nil) || got.String() != want.String() {
				t.Errorf("got %q (error %v), text/template %q (error %v)", got.String(), gotErr, want.String(), wantErr)
			}
		})
	}
}

type withMethod struct{ Field string }

func (withMethod) Method() string { return "called" }

// TestNoMethodCalls: a name is a field or a map key, never a method.
func TestNoMethodCalls(t *testing.T) {
	for _, c := range []struct{ name, text, want string }{
		{"field", `{{.Field}}`, "f"},
		{"method", `{{.Method}}`, "error"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var out strings.Builder
			tpl, err := New("t").Parse(c.text)
			if err != nil {
				t.Fatal(err)
			}
			got := "error"
			if err := tpl.Execute(&out, withMethod{Field: "f"}); err == nil {
				got = out.String()
			}
			if got != c.want {
				t.Errorf("got %q, want %q", got, c.want)
			}
		})
	}
}
