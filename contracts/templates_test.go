package contracts

import (
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/toolgate/toolgate/internal/jsontape"
)

func TestTemplatesReadOnlyWhatTheyUse(t *testing.T) {
	tpls, err := compileTemplates(nil, map[string]string{
		"ok":      "Found {{.data.total}} for {{.args.q}}.",
		"empty":   "Nothing: {{.data}}",
		"timeout": `{{with .data.items}}{{len .}} items{{end}}`,
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := tpls["ok"].dataKeys; len(got) != 1 || got[0] != "total" || tpls["ok"].whole {
		t.Errorf("ok template keys = %v whole=%v", got, tpls["ok"].whole)
	}
	if !tpls["empty"].whole {
		t.Error("{{.data}} must decode all data")
	}
	data := []byte(`{"items":[1,2,3],"total":3}`)
	for st, want := range map[Status]string{StatusOK: "Found 3 for go.", StatusEmpty: "Nothing: map[items:[1 2 3] total:3]", StatusTimeout: "3 items"} {
		got, ok := tpls.render(st, map[string]any{"q": "go"}, data)
		if !ok || got != want {
			t.Errorf("%s: %q %v, want %q", st, got, ok, want)
		}
	}
	if _, ok := tpls.render(StatusUpstream, nil, data); ok {
		t.Error("rendered a status without a template")
	}
}

// TestTemplatesWithMissingValuesFallBack: a template that prints a value
// the call does not have (an absent argument, an absent or null data
// member, no data at all, an empty .detail) is not used, on the fast path
// and the full one alike, so the catalogue speaks instead of "命中 条".
// (Until issue 30 such values rendered empty.) A template that only tests
// a missing value ({{if}}) still renders.
func TestTemplatesWithMissingValuesFallBack(t *testing.T) {
	tpls, err := compileTemplates(nil, map[string]string{
		"ok":        "q={{.args.q}} deep={{.data.x.y}} n={{.data.n}}",
		"empty":     `{{if .args.q}}q={{.args.q}}{{end}}{{if .args.nope}} nope={{.args.nope}}{{end}} n={{.data.n}}`,
		"not_found": "No {{.args.nope}} here.",
		"bad_args":  "Refused: {{.detail}}",
		"upstream":  `{{if .detail}}Refused: {{.detail}}{{else}}Refused.{{end}}`,
	})
	if err != nil {
		t.Fatal(err)
	}
	if tpls["ok"].fast == nil || tpls["empty"].fast != nil || tpls["bad_args"].fast == nil || tpls["upstream"].fast != nil {
		t.Fatal("fast path chosen wrongly")
	}
	args := map[string]any{"q": "go"}
	tests := []struct {
		name   string
		status Status
		data   string
		detail string
		want   string // "" for no template
	}{
		{"every value present (fast)", StatusOK, `{"n":1.5,"x":{"y":true}}`, "", "q=go deep=true n=1.5"},
		{"a missing data member (fast)", StatusOK, `{"x":{"y":true}}`, "", ""},
		{"a null data member (fast)", StatusOK, `{"n":null,"x":{"y":true}}`, "", ""},
		{"a missing nested member (fast)", StatusOK, `{"n":1,"x":{}}`, "", ""},
		{"no data at all (fast)", StatusOK, "", "", ""},
		{"a missing argument only tested (full)", StatusEmpty, `{"n":0}`, "", "q=go n=0"},
		{"a missing data member (full)", StatusEmpty, `{}`, "", ""},
		{"a missing argument printed (fast)", StatusNotFound, "", "", ""},
		{"an empty detail printed (fast)", StatusBadArgs, "", "", ""},
		{"a detail printed (fast)", StatusBadArgs, "", "bad address", "Refused: bad address"},
		{"an empty detail only tested (full)", StatusUpstream, "", "", "Refused."},
		{"a detail printed (full)", StatusUpstream, "", "bad address", "Refused: bad address"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, members := range []bool{false, true} {
				var m []Member
				if members && tt.data != "" {
					m = testMembers(t, tt.data)
				}
				got, ok := tpls[string(tt.status)].render(args, []byte(tt.data), m, answerWords{detail: tt.detail})
				if tt.want == "" && ok || tt.want != "" && (!ok || got != tt.want) {
					t.Errorf("members %v: %q %v, want %q", members, got, ok, tt.want)
				}
			}
		})
	}
}

// TestFastTemplatesMatchTextTemplate: the direct renderer writes what
// text/template writes for the same template, arguments and data, with the
// data's members located or not.
func TestFastTemplatesMatchTextTemplate(t *testing.T) {
	tpls, err := compileTemplates(nil, map[string]string{
		"ok": "a={{.args.q}} n={{.args.n}} b={{.args.b}} o={{.args.o}} t={{.data.t}} s={{.data.s}} e={{.data.e}} " +
			"z={{.data.z}} f={{.data.f}} neg={{.data.neg}} l={{.data.l}} m={{.data.m}} d={{.data.m.k}}  \t end ",
	})
	if err != nil {
		t.Fatal(err)
	}
	mt := tpls["ok"]
	if mt.fast == nil {
		t.Fatal("no fast path")
	}
	args := decodeTestArgs(t, `{"q":"日本 go","n":1e3,"b":false,"o":{"x":[1,"y"]}}`)
	for _, data := range []string{
		`{"t":true,"s":"plain","e":"esc\"aped\\n\u00e9","z":null,"f":-1.5e-3,"neg":-0,"l":[1,{"a":2}],"m":{"k":"v"}}`,
		`{"t":true,"s":"plain","e":"esc\"aped\\n\u00e9","z":0,"f":-1.5e-3,"neg":-0,"l":[1,{"a":2}],"m":{"k":"v"}}`,
		`{"t":false,"s":"","e":"\u2028","f":1234567,"neg":100000,"z":1e21,"l":3.0,"m":{"k":12345678901234567890}}`,
		`{"t":1e-7,"s":0.0001,"e":123456,"f":-2.5E+3,"neg":99999999999999999999999,"z":"","l":"x","m":{"k":null}}`,
	} {
		// A value that is absent or null prints as "<no value>" in
		// text/template, where both renderers fall back (tested above).
		var want strings.Builder
		var decoded any
		if data != "" {
			var ok bool
			if decoded, ok = decodeJSON([]byte(data)); !ok {
				t.Fatal("data is not JSON")
			}
		}
		if err := mt.tpl.Execute(&want, map[string]any{"args": args, "data": decoded}); err != nil {
			t.Fatal(err)
		}
		wantText, wantOK := oneLine(want.String()), !strings.Contains(want.String(), "<no value>")
		if !wantOK {
			wantText = ""
		}
		var members []Member
		if data != "" {
			members = testMembers(t, data)
		}
		for _, m := range [][]Member{members, nil} {
			got, ok := tpls.renderMembers(StatusOK, args, []byte(data), m)
			if ok != wantOK || got != wantText {
				t.Errorf("data %s (members %v):\n got %q %v\nwant %q %v", data, m != nil, got, ok, wantText, wantOK)
			}
		}
	}
}

// testMembers locates the top-level members of a compact JSON object: the
// object written again member by member is the same bytes.
func testMembers(t *testing.T, data string) []Member {
	t.Helper()
	tape, err := jsontape.Parse([]byte(data))
	if err != nil {
		t.Fatal(err)
	}
	defer tape.Release()
	var out []Member
	again := []byte{'{'}
	for c := tape.Root().Cursor(); c.More(); {
		k, v := c.Member()
		if len(again) > 1 {
			again = append(again, ',')
		}
		again = append(k.AppendRaw(again), ':')
		start := len(again)
		again = v.AppendRaw(again)
		out = append(out, Member{Key: k.Text(), Start: start, End: len(again)})
	}
	if string(append(again, '}')) != data {
		t.Fatalf("%s is not compact", data)
	}
	return out
}

func TestOneLine(t *testing.T) {
	for in, want := range map[string]string{
		"": "", "a b": "a b", " a": "a", "a ": "a", "a  b": "a b", "a\tb": "a b", "a\nb\n": "a b",
		"命中 3 条。": "命中 3 条。", "a\u3000b": "a b", "a\u00a0b": "a b", "  ": "",
	} {
		if got := oneLine(in); got != want {
			t.Errorf("oneLine(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestMessagesAreBounded: however much a template or the catalogue would
// write, a message is at most MaxMessageChars code points of valid UTF-8,
// cut at a character boundary and marked with "…".
func TestMessagesAreBounded(t *testing.T) {
	text := strings.Repeat("量子 ", 100_000) // 700 KB, three-byte characters
	items := make([]string, 2000)
	for i := range items {
		items[i] = `"` + strings.Repeat("é", 7) + `"`
	}
	data := []byte(`{"text":"` + text + `","items":[` + strings.Join(items, ",") + `]}`)
	tests := []struct {
		name string
		tpl  string
	}{
		{"a field holding a long string", `Found: {{.data.text}}`},
		{"a range over the data", `{{range .data.items}}{{.}}, {{end}}`},
		// Four million iterations: stopped once the output passes the
		// bound, not run to the end.
		{"a nested range", `{{range .data.items}}{{range $.data.items}}{{.}}{{end}}{{end}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tpls, err := compileTemplates(nil, map[string]string{"ok": tt.tpl})
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			msg, ok := tpls.render(StatusOK, nil, data)
			if !ok {
				t.Fatal("not rendered")
			}
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("rendering took %v", took)
			}
			checkBounded(t, msg)
		})
	}
	t.Run("a catalogue message with a long detail", func(t *testing.T) {
		c, _ := NewCatalog("zh")
		o := Reject(ReasonTooLarge)
		o.Detail = text
		msg := c.message("send", false, &o)
		if n := utf8.RuneCountInString(msg); n > MaxMessageChars || n < MaxMessageChars/2 {
			t.Errorf("message has %d characters, want at most %d", n, MaxMessageChars)
		}
		// What happened is cut; what to do is kept whole.
		if want := "…" + c.entries["act:fix:too_large"]; !strings.HasSuffix(msg, want) {
			t.Errorf("message does not end with %q: %q", want, msg[len(msg)-60:])
		}
	})
	t.Run("a short message is left as it is", func(t *testing.T) {
		tpls, _ := compileTemplates(nil, map[string]string{"ok": "Found {{.data.n}}."})
		if msg, _ := tpls.render(StatusOK, nil, []byte(`{"n":3}`)); msg != "Found 3." {
			t.Errorf("message = %q", msg)
		}
	})
}

func checkBounded(t *testing.T, msg string) {
	t.Helper()
	if n := utf8.RuneCountInString(msg); n > MaxMessageChars || n < MaxMessageChars/2 {
		t.Errorf("message has %d characters, want at most %d (and not cut short)", n, MaxMessageChars)
	}
	if !utf8.ValidString(msg) || strings.ContainsRune(msg, utf8.RuneError) {
		t.Errorf("message is not clean UTF-8: %q", msg[len(msg)-20:])
	}
	if !strings.HasSuffix(msg, "…") {
		t.Errorf("a cut message does not end with an ellipsis: %q", msg[len(msg)-20:])
	}
}

func TestDataMembersDecodesOnlyWhatIsAsked(t *testing.T) {
	src := []byte(` {"items":[{"total":99}],"t\u006ftal":3,"x":{"a":[1,2]},"s":"v"} `)
	got, ok := dataMembers(src, []string{"total", "x", "missing"})
	if !ok {
		t.Fatal("not an object?")
	}
	if !reflect.DeepEqual(got, map[string]any{"total": 3.0, "x": map[string]any{"a": []any{1.0, 2.0}}}) {
		t.Errorf("members = %#v", got)
	}
	for _, bad := range []string{`[1]`, `{"a":}`, `{"a":1`, `"s"`, ``} {
		if _, ok := dataMembers([]byte(bad), []string{"a"}); ok {
			t.Errorf("%q accepted", bad)
		}
	}
}
