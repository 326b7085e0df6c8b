package htmltemplate

import (
	stdtemplate "html/template"
	"strings"
	"testing"
)

// TestSameAsHTMLTemplate renders data into every context html/template
// escapes for through this fork and through html/template and wants the
// same output, or an error from both. Each gets trusted HTML as its own
// HTML type.
func TestSameAsHTMLTemplate(t *testing.T) {
	data := func(trusted any) map[string]any {
		return map[string]any{
			"text": `<b>"it's" & more</b>`,
			"url":  "javascript:alert(1)",
			"path": "/a b?c=d&e=<f>",
			"css":  "expression(alert(1))",
			"list": []string{"x", "<y>"},
			"html": trusted,
			"n":    3,
		}
	}
	for _, c := range []struct{ name, text string }{
		{"element text", `<p>{{.text}}</p>`},
		{"attribute", `<a title="{{.text}}">x</a>`},
		{"unquoted attribute", `<a title={{.text}}>x</a>`},
		{"URL", `<a href="{{.url}}">x</a> <a href="/p?q={{.path}}">y</a>`},
		{"script value", `<script>var v = {{.text}}; var l = {{.list}};</script>`},
		{"script string", `<script>var s = "{{.text}}";</script>`},
		{"template literal", "<script>var s = `{{.text}}`;</script>"},
		{"style", `<p style="color: {{.css}}">x</p>`},
		{"trusted HTML", `<div>{{.html}}</div>`},
		{"range and functions", `{{range $i, $v := .list}}{{$i}}={{$v}} {{end}}{{len .list}} {{printf "%d" .n}}`},
		{"missing key", `{{.nope}}`},
		{"bad function argument", `{{len .n}}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			var want, got strings.Builder
			std, err := stdtemplate.New("t").Parse(c.text)
			if err != nil {
				t.Fatal(err)
			}
			wantErr := std.Execute(&want, data(stdtemplate.HTML("<i>trusted</i>")))
			tpl, err := New("t").Parse(c.text)
			if err != nil {
				t.Fatal(err)
			}
			gotErr := tpl.Execute(&got, data(HTML("<i>trusted</i>")))
			if (gotErr != nil) != (wantErr != nil) || got.String() != want.String() {
				t.Errorf("got %q (error %v), html/template %q (error %v)", got.String(), gotErr, want.String(), wantErr)
			}
		})
	}
}

type withMethod struct{ Field string }

func (withMethod) Method() string { return "called" }

// TestNoMethodCalls: a name is a field or a map key, never a method, and
// the escaping still applies to what a template prints.
func TestNoMethodCalls(t *testing.T) {
	for _, c := range []struct{ name, text, want string }{
		{"field", `<p>{{.Field}}</p>`, "<p>&lt;f&gt;</p>"},
		{"method", `<p>{{.Method}}</p>`, "error"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var out strings.Builder
			tpl, err := New("t").Parse(c.text)
			if err != nil {
				t.Fatal(err)
			}
			got := "error"
			if err := tpl.Execute(&out, withMethod{Field: "<f>"}); err == nil {
				got = out.String()
			}
			if got != c.want {
				t.Errorf("got %q, want %q", got, c.want)
			}
		})
	}
}

// TestGodebugDefaults: the settings of internal/godebug the fork replaced
// keep Go 1.26's defaults, whatever GODEBUG says: a meta refresh's URL is
// filtered (htmlmetacontenturlescape=1), and a template literal is
// escaped as JavaScript (jstmpllitinterp has no effect).
func TestGodebugDefaults(t *testing.T) {
	for _, c := range []struct{ name, text, want string }{
		{"meta refresh URL", `<meta http-equiv="refresh" content="0; url={{.}}">`, `<meta http-equiv="refresh" content="0; url=#ZgotmplZ">`},
		{"template literal", "<script>var s = `{{.}}`;</script>", "<script>var s = `javascript:alert(1)`;</script>"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var out strings.Builder
			if err := Must(New("t").Parse(c.text)).Execute(&out, "javascript:alert(1)"); err != nil {
				t.Fatal(err)
			}
			if out.String() != c.want {
				t.Errorf("got %q, want %q", out.String(), c.want)
			}
		})
	}
}
