package contracts

import (
	"strings"
	"testing"
	"time"
)

func TestTemplatesReadOnlyWhatTheyUse(t *testing.T) {
	tpls, err := CompileTemplates(map[string]string{
		"ok":      "Found {{.data.total}} for {{.args.q}}.",
		"empty":   "Nothing: {{.data}}",
		"timeout": `{{with .data.items}}{{len .}} items{{end}}`,
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := tpls[StatusOK].dataKeys; len(got) != 1 || got[0] != "total" || tpls[StatusOK].whole {
		t.Errorf("ok template keys = %v whole=%v", got, tpls[StatusOK].whole)
	}
	if !tpls[StatusEmpty].whole {
		t.Error("{{.data}} must decode all data")
	}
	data := []byte(`{"items":[1,2,3],"total":3}`)
	for st, want := range map[Status]string{StatusOK: "Found 3 for go.", StatusEmpty: "Nothing: map[items:[1 2 3] total:3]", StatusTimeout: "3 items"} {
		got, ok := tpls.Render(st, map[string]any{"q": "go"}, data)
		if !ok || got != want {
			t.Errorf("%s: %q %v, want %q", st, got, ok, want)
		}
	}
	if _, ok := tpls.Render(StatusUpstream, nil, data); ok {
		t.Error("rendered a status without a template")
	}
}

func TestCatalogMessages(t *testing.T) {
	for _, lang := range Languages() {
		c, err := NewCatalog(lang)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range []Outcome{
			{Status: StatusUpstream, Reason: ReasonServerError, HTTPCode: 500, Effect: SideEffectUnknown},
			{Status: StatusUpstream, Reason: ReasonServerError, HTTPCode: 502, Effect: SideEffectUnknown, Retryable: true},
			{Status: StatusUpstream, Reason: ReasonCircuitOpen, RetryAfter: 90 * time.Second, Retryable: true},
			{Status: StatusForbidden, Reason: ReasonBudget, RetryAfter: 3 * time.Hour},
			{Status: StatusBadArgs, Reason: ReasonSchema, Arg: &ArgError{Pointer: "/q", Problem: ProblemRequired}},
			{Status: StatusOK, Reason: ReasonOK, Effect: SideEffectDone},
		} {
			for _, se := range []bool{false, true} {
				msg := c.Message("send", se, &o)
				if msg == "" || strings.ContainsAny(msg, "{}\n") {
					t.Errorf("%s %s se=%v: %q", lang, o.Reason, se, msg)
				}
			}
		}
	}
	c, _ := NewCatalog("en")
	o := Outcome{Status: StatusUpstream, Reason: ReasonServerError, HTTPCode: 500, Effect: SideEffectUnknown}
	if msg := c.Message("send", true, &o); !strings.Contains(msg, "may or may not") {
		t.Errorf("unknown outcome message = %q", msg)
	}
	o.Retryable = true
	if msg := c.Message("send", true, &o); !strings.Contains(msg, "same idempotency key") {
		t.Errorf("dedupe message = %q", msg)
	}
	if _, err := NewCatalog("fr"); err == nil {
		t.Error("unknown catalogue accepted")
	}
}

func TestTemplatesRenderMissingValuesEmpty(t *testing.T) {
	tpls, err := CompileTemplates(map[string]string{
		"ok":    "q={{.args.q}} missing={{.args.nope}} deep={{.data.x.y}} n={{.data.n}}",
		"empty": `{{if .args.q}}q={{.args.q}}{{end}} missing={{.args.nope}}`,
	})
	if err != nil {
		t.Fatal(err)
	}
	if tpls[StatusOK].fast == nil || tpls[StatusEmpty].fast != nil {
		t.Fatal("fast path chosen wrongly")
	}
	got, ok := tpls.Render(StatusOK, map[string]any{"q": "go"}, []byte(`{"n":1.5,"x":{"y":true}}`))
	if !ok || got != "q=go missing= deep=true n=1.5" {
		t.Errorf("fast: %q", got)
	}
	got, ok = tpls.Render(StatusEmpty, map[string]any{"q": "go"}, nil)
	if !ok || got != "q=go missing=" {
		t.Errorf("slow: %q", got)
	}
	// Without data, a data field renders empty rather than failing.
	got, ok = tpls.Render(StatusOK, map[string]any{"q": "go"}, nil)
	if !ok || got != "q=go missing= deep= n=" {
		t.Errorf("no data: %q", got)
	}
}
