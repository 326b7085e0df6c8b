package contracts

import (
	"encoding/json"
	"errors"
	"net/url"
	"strings"
	"testing"
)

// Shape constructors, so tests read like the policy they stand for.
func arg(name string) *Shape      { return &Shape{Kind: ShapeArg, Arg: name} }
func cnst(v any) *Shape           { return &Shape{Kind: ShapeConst, Value: v} }
func expr(src string) *Shape      { return &Shape{Kind: ShapeExpr, Expr: src} }
func list(items ...*Shape) *Shape { return &Shape{Kind: ShapeList, Items: items} }

// obj takes name, shape pairs in order.
func obj(pairs ...any) *Shape {
	s := &Shape{Kind: ShapeObject}
	for i := 0; i+1 < len(pairs); i += 2 {
		s.Members = append(s.Members, ShapeMember{Name: pairs[i].(string), Shape: pairs[i+1].(*Shape)})
	}
	return s
}

const shapeSchema = `{"type":"object","properties":{
	"id":{"type":"string"},"q":{"type":"string"},"n":{"type":"integer"},"lang":{"type":["string","null"]},
	"tags":{"type":"array"},"meta":{"type":"object"},"token":{"type":"string"},"flag":{"type":"boolean"}}}`

func mustBinding(t testing.TB, env *RuleEnv, spec BindingSpec) *Binding {
	t.Helper()
	if spec.Path == "" {
		spec.Path = "/x"
	}
	b, err := CompileBinding(env, spec, mustSchema(t, shapeSchema))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustEnv(t testing.TB, costLimit uint64) *RuleEnv {
	t.Helper()
	env, err := NewRuleEnv(RuleOptions{CostLimit: costLimit})
	if err != nil {
		t.Fatal(err)
	}
	return env
}

func TestJSONBodyShapes(t *testing.T) {
	env := mustEnv(t, 0)
	tests := []struct {
		name string
		body *Shape
		args map[string]any
		want string // "" for no body
	}{
		{"members keep the order written", obj("z", arg("q"), "a", arg("n")),
			map[string]any{"q": "x", "n": json.Number("1")}, `{"z":"x","a":1}`},
		{"an absent argument is left out, not sent as null", obj("q", arg("q"), "lang", arg("lang")),
			map[string]any{"q": "x"}, `{"q":"x"}`},
		{"an argument that is null is sent as null", obj("lang", arg("lang")),
			map[string]any{"lang": nil}, `{"lang":null}`},
		{"an object whose every member is absent is left out", obj("q", arg("q"), "filter", obj("term", obj("lang", arg("lang")))),
			map[string]any{"q": "x"}, `{"q":"x"}`},
		{"a list whose every item is left out is left out", obj("q", arg("q"), "must", list(obj("lang", arg("lang")))),
			map[string]any{"q": "x"}, `{"q":"x"}`},
		{"a list keeps the items that are present", obj("ids", list(arg("id"), cnst("fixed"), arg("q"))),
			map[string]any{"q": "x"}, `{"ids":["fixed","x"]}`},
		{"an object and a list written empty are sent as written", obj("a", obj(), "b", list()),
			map[string]any{}, `{"a":{},"b":[]}`},
		{"a body whose every member is absent is an empty object", obj("q", arg("q")),
			map[string]any{}, `{}`},
		{"constants of every kind", obj("s", cnst("json"), "n", cnst(json.Number("10")), "b", cnst(false), "z", cnst(nil), "o", cnst(map[string]any{"k": []any{json.Number("1")}})),
			map[string]any{}, `{"s":"json","n":10,"b":false,"z":null,"o":{"k":[1]}}`},
		{"an argument's whole value, nested", obj("meta", arg("meta"), "tags", arg("tags")),
			map[string]any{"meta": map[string]any{"b": "2", "a": json.Number("1e1")}, "tags": []any{"x"}}, `{"meta":{"a":10,"b":"2"},"tags":["x"]}`},
		{"an expression computes a member", obj("from", expr("(args.n - 1) * 10")),
			map[string]any{"n": json.Number("3")}, `{"from":20}`},
		{"an expression that reads an absent argument is left out", obj("q", arg("q"), "from", expr("(args.n - 1) * 10")),
			map[string]any{"q": "x"}, `{"q":"x"}`},
		{"an expression with a fallback for an absent argument", obj("lang", expr(`has(args.lang) ? args.lang : "en"`)),
			map[string]any{}, `{"lang":"en"}`},
		{"an expression maps a list argument to a list of objects", obj("to", expr(`args.tags.map(t, {"email": t})`)),
			map[string]any{"tags": []any{"a@x", "b@x"}}, `{"to":[{"email":"a@x"},{"email":"b@x"}]}`},
		{"an expression's map comes out with sorted keys", obj("m", expr(`{"z": 1, "a": 2.5, "m": [true, null]}`)),
			map[string]any{}, `{"m":{"a":2.5,"m":[true,null],"z":1}}`},
		{"an integral double is sent as an integer", obj("d", expr(`double(args.n) * 2.0`)),
			map[string]any{"n": json.Number("21")}, `{"d":42}`},
		{"a whole body from one expression", expr(`{"query": {"match": {"title": args.q}}}`),
			map[string]any{"q": "go"}, `{"query":{"match":{"title":"go"}}}`},
		{"a whole body from one argument", arg("meta"),
			map[string]any{"meta": map[string]any{"a": "b"}}, `{"a":"b"}`},
		{"a whole body argument that is absent sends no body", arg("meta"),
			map[string]any{}, ``},
		{"strings are escaped and stay valid UTF-8", obj("q", arg("q")),
			map[string]any{"q": "a\"b\\c\n\u2028量"}, `{"q":"a\"b\\c\n\u2028量"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := mustBinding(t, env, BindingSpec{Method: "POST", Body: tt.body})
			got, err := b.Bind(tt.args)
			if err != nil {
				t.Fatal(err)
			}
			if string(got.Body) != tt.want {
				t.Errorf("body = %s, want %s", got.Body, tt.want)
			}
			if got.Body != nil && !json.Valid(got.Body) {
				t.Errorf("body is not JSON: %s", got.Body)
			}
		})
	}
}

func TestFormAndQueryShapes(t *testing.T) {
	env := mustEnv(t, 0)
	tests := []struct {
		name  string
		shape *Shape
		args  map[string]any
		want  string
	}{
		{"the flat form, in the order written", obj("q", arg("q"), "n", arg("n")),
			map[string]any{"q": "a b&c", "n": json.Number("1e1")}, "q=a+b%26c&n=10"},
		{"a list argument repeats the key", obj("fq", arg("tags")),
			map[string]any{"tags": []any{"a:1", json.Number("2"), nil, true}}, "fq=a%3A1&fq=2&fq=true"},
		{"a written list repeats the key", obj("MediaUrl", list(arg("id"), cnst("https://x/y"))),
			map[string]any{"id": "u"}, "MediaUrl=u&MediaUrl=https%3A%2F%2Fx%2Fy"},
		{"a nested object becomes bracketed keys", obj("metadata", obj("order", arg("id"), "sub", obj("k", cnst("v")))),
			map[string]any{"id": "o1"}, "metadata%5Border%5D=o1&metadata%5Bsub%5D%5Bk%5D=v"},
		{"an object value is sent as its JSON", obj("filter", arg("meta")),
			map[string]any{"meta": map[string]any{"a": json.Number("1")}}, "filter=%7B%22a%22%3A1%7D"},
		{"null and absent values send nothing", obj("lang", arg("lang"), "q", arg("q"), "wt", cnst("json")),
			map[string]any{"lang": nil}, "wt=json"},
		{"an expression computes a value", obj("rows", expr("args.n * 2")),
			map[string]any{"n": json.Number("5")}, "rows=10"},
		{"one expression gives every pair, keys sorted", expr(`{"wt": "json", "fq": ["a", "b"]}`),
			map[string]any{}, "fq=a&fq=b&wt=json"},
		{"a constant mapping gives every pair", cnst(map[string]any{"wt": "json"}),
			map[string]any{}, "wt=json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := mustBinding(t, env, BindingSpec{Query: tt.shape})
			got, err := q.Bind(tt.args)
			if err != nil {
				t.Fatal(err)
			}
			if got.Query != tt.want {
				t.Errorf("query = %s, want %s", got.Query, tt.want)
			}
			f := mustBinding(t, env, BindingSpec{Method: "POST", Encoding: EncodingForm, Body: tt.shape})
			if got, err = f.Bind(tt.args); err != nil {
				t.Fatal(err)
			}
			if string(got.Body) != tt.want {
				t.Errorf("form body = %s, want %s", got.Body, tt.want)
			}
			if f.ContentType() != "application/x-www-form-urlencoded" {
				t.Errorf("content type = %s", f.ContentType())
			}
		})
	}
}

func TestHeaderShapes(t *testing.T) {
	env := mustEnv(t, 0)
	b := mustBinding(t, env, BindingSpec{Headers: obj(
		"accept", cnst("application/vnd.api+json"),
		"X-Tenant", arg("id"),
		"X-Tags", arg("tags"),
		"X-Count", expr("args.n + 1"),
		"X-Lang", arg("lang"),
	)})
	if got := b.StaticHeader()["Accept"]; len(got) != 1 || got[0] != "application/vnd.api+json" {
		t.Errorf("static Accept = %q", got)
	}
	got, err := b.Bind(map[string]any{"id": "t1", "tags": []any{"a", json.Number("2")}, "n": json.Number("41")})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"X-Tenant": "t1", "X-Tags": "a|2", "X-Count": "42"}
	if len(got.Header) != len(want) {
		t.Errorf("headers = %q, want %q", got.Header, want)
	}
	for k, v := range want {
		if strings.Join(got.Header[k], "|") != v {
			t.Errorf("%s = %q, want %q", k, got.Header[k], v)
		}
	}
	for name, args := range map[string]map[string]any{
		"a value with CR LF":       {"id": "t1\r\nX-Admin: 1"},
		"a value with a bare LF":   {"id": "t1\nX"},
		"a value with NUL":         {"id": "t\x00"},
		"a list item with CR":      {"tags": []any{"ok", "a\rb"}},
		"an object value":          {"id": map[string]any{"a": "b"}},
		"an expression that fails": {"n": json.Number("9223372036854775807")},
	} {
		t.Run(name+" is bad_args naming the argument", func(t *testing.T) {
			_, err := b.Bind(args)
			var ae *ArgError
			if !errors.As(err, &ae) {
				t.Fatalf("err = %v, want an argument error", err)
			}
			if ae.Pointer == "" {
				t.Errorf("the error names no argument: %+v", ae)
			}
		})
	}
}

func TestExpressionFailuresAreBadArgs(t *testing.T) {
	t.Run("a runtime error names the first argument read", func(t *testing.T) {
		b := mustBinding(t, mustEnv(t, 0), BindingSpec{Method: "POST", Body: obj("x", expr("10 / args.n"))})
		_, err := b.Bind(map[string]any{"n": json.Number("0")})
		var ae *ArgError
		if !errors.As(err, &ae) || ae.Pointer != "/n" || ae.Problem != ProblemInvalid {
			t.Fatalf("err = %#v", err)
		}
	})
	t.Run("an evaluation over the cost limit fails", func(t *testing.T) {
		b := mustBinding(t, mustEnv(t, 50), BindingSpec{Method: "POST", Body: obj("x", expr(`args.tags.map(t, t + "!")`))})
		tags := make([]any, 200)
		for i := range tags {
			tags[i] = "t"
		}
		if _, err := b.Bind(map[string]any{"tags": tags}); err == nil {
			t.Fatal("an evaluation over the cost limit succeeded")
		}
		if _, err := b.Bind(map[string]any{"tags": tags[:2]}); err != nil {
			t.Fatalf("a small evaluation failed: %v", err)
		}
	})
	t.Run("a value JSON cannot carry fails", func(t *testing.T) {
		b := mustBinding(t, mustEnv(t, 0), BindingSpec{Method: "POST", Body: obj("x", expr("double(args.n) / 0.0"))})
		if _, err := b.Bind(map[string]any{"n": json.Number("1")}); err == nil {
			t.Fatal("an infinite number was bound")
		}
	})
	t.Run("a form body from an argument that is not an object", func(t *testing.T) {
		b := mustBinding(t, mustEnv(t, 0), BindingSpec{Method: "POST", Encoding: EncodingForm, Body: arg("meta")})
		_, err := b.Bind(map[string]any{"meta": []any{"a"}})
		var ae *ArgError
		if !errors.As(err, &ae) || ae.Pointer != "/meta" || ae.Problem != ProblemType {
			t.Fatalf("err = %#v", err)
		}
	})
}

func TestCompileShapeErrors(t *testing.T) {
	env := mustEnv(t, 0)
	tests := []struct {
		name string
		spec BindingSpec
		want string
		line int
		col  int
	}{
		{"an unknown argument in a nested body", BindingSpec{Body: obj("a", list(obj("b", arg("nope"))))}, `body.a[0].b: "nope" is not an argument`, 0, 0},
		{"an unknown argument in an expression, at its position", BindingSpec{Body: obj("a", expr("1 +\n  args.nope"))}, "body.a.expr: args.nope is not an argument", 2, 3},
		{"an unknown argument by index", BindingSpec{Query: obj("a", expr(`args["nope"]`))}, "query.a.expr: args.nope is not an argument", 1, 1},
		{"an answer variable", BindingSpec{Body: obj("a", expr("status"))}, "body.a.expr: status is part of the backend's answer", 1, 1},
		{"the answer's text", BindingSpec{Body: obj("a", expr("args.q + text"))}, "body.a.expr: text is part of the backend's answer", 1, 10},
		{"a header from an object expression", BindingSpec{Headers: obj("X-A", expr(`{"a": args.q}`))}, "headers.X-A.expr: must evaluate to", 1, 1},
		{"a reserved header, whatever its case", BindingSpec{Headers: obj("transfer-encoding", cnst("chunked"))}, "headers.transfer-encoding#key: cannot be bound", 0, 0},
		{"a header bound twice", BindingSpec{Headers: obj("X-A", arg("q"), "x-a", arg("id"))}, "headers.x-a#key: is bound twice", 0, 0},
		{"a header both constant and per call", BindingSpec{Headers: obj("X-A", list(cnst("a"), arg("q")))}, "headers.X-A: a header is either constant or bound per call", 0, 0},
		{"a caller-reserved header", BindingSpec{Headers: obj("X-Caller", arg("q")), Reserved: map[string]string{"X-Caller": "is the caller identity header"}}, "headers.X-Caller#key: cannot be bound: X-Caller is the caller identity header", 0, 0},
		{"a query that is a list", BindingSpec{Query: list(arg("q"))}, "query: must be a mapping", 0, 0},
		{"a header from an object argument", BindingSpec{Headers: obj("X-Meta", arg("meta"))}, "headers.X-Meta: argument meta is an object, which a header cannot carry", 0, 0},
		{"a whole query from an argument that is not an object", BindingSpec{Query: arg("tags")}, "query: argument tags is not an object", 0, 0},
		{"a whole form body from an expression that is not a map", BindingSpec{Encoding: EncodingForm, Body: expr("[args.q]")}, "body.expr: must evaluate to a map of name to value, not list(dyn)", 1, 1},
		{"a form body that is a constant list", BindingSpec{Encoding: EncodingForm, Body: cnst([]any{"a"})}, "body.const: must be a mapping", 0, 0},
		{"an expression without an environment", BindingSpec{Body: obj("a", expr("1"))}, "expressions need a rule environment", 0, 0},
		{"a duplicate member", BindingSpec{Body: obj("a", arg("q"), "a", arg("id"))}, "body.a: duplicate member", 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := env
			if strings.Contains(tt.name, "without an environment") {
				e = nil
			}
			tt.spec.Path = "/x"
			_, err := CompileBinding(e, tt.spec, mustSchema(t, shapeSchema))
			var be *BindError
			if !errors.As(err, &be) {
				t.Fatalf("err = %v, want a BindError", err)
			}
			if !strings.Contains(be.Error(), tt.want) {
				t.Errorf("error %q does not contain %q", be.Error(), tt.want)
			}
			if tt.line != 0 && (be.Line != tt.line || be.Column != tt.col) {
				t.Errorf("position %d:%d, want %d:%d", be.Line, be.Column, tt.line, tt.col)
			}
		})
	}
}

func TestReadArgsInvertsTheBinding(t *testing.T) {
	env := mustEnv(t, 0)
	schema := mustSchema(t, shapeSchema)
	contract := func(sideEffect bool, spec BindingSpec) *Contract {
		if spec.Path == "" {
			spec.Path = "/x"
		}
		b, err := CompileBinding(env, spec, schema)
		if err != nil {
			t.Fatal(err)
		}
		return &Contract{Schema: schema, Binding: b, SideEffect: sideEffect}
	}
	nested := BindingSpec{Method: "POST", Path: "/items/{id}", Query: obj("n", arg("n"), "wt", cnst("json")),
		Headers: obj("X-Token", arg("token")),
		Body:    obj("query", obj("match", obj("title", arg("q"))), "size", cnst(json.Number("10")), "tags", list(obj("t", arg("lang"))))}
	form := BindingSpec{Method: "POST", Encoding: EncodingForm, Body: obj("Body", arg("q"), "meta", obj("flag", arg("flag")), "From", cnst("+1"))}
	formList := BindingSpec{Method: "POST", Encoding: EncodingForm, Body: obj("Body", arg("q"), "Media", list(arg("id")))}
	tests := []struct {
		name       string
		contract   *Contract
		req        LegacyRequest
		want       string // the arguments as JSON, or the error
		sideEffect bool
	}{
		{"nested members, list positions, query and headers are read back; constants are not", contract(false, nested),
			LegacyRequest{PathValues: map[string]string{"id": "i1"}, RawQuery: "n=3&wt=xml&_=1", Header: map[string][]string{"X-Token": {"tk"}},
				Body: []byte(`{"query":{"match":{"title":"go"}},"size":99,"tags":[{"t":"en"}]}`)},
			`{"id":"i1","lang":"en","n":3,"q":"go","token":"tk"}`, false},
		{"a member the binding does not have is refused", contract(false, nested),
			LegacyRequest{PathValues: map[string]string{"id": "i1"}, Body: []byte(`{"query":{"match":{"title":"go","x":1}}}`)},
			"Argument query.match.x is not an accepted argument", false},
		{"an item past the written list is refused", contract(false, nested),
			LegacyRequest{PathValues: map[string]string{"id": "i1"}, Body: []byte(`{"tags":[{"t":"en"},{"t":"fr"}]}`)},
			"Argument tags[1] is not an accepted argument", false},
		{"a member of the wrong shape is refused", contract(false, nested),
			LegacyRequest{PathValues: map[string]string{"id": "i1"}, Body: []byte(`{"query":"go"}`)},
			"Argument query must be an object", false},
		{"the idempotency key may come in the body", contract(true, nested),
			LegacyRequest{PathValues: map[string]string{"id": "i1"}, Body: []byte(`{"query":{"match":{"title":"go"}},"idempotency_key":"k1"}`)},
			`{"id":"i1","idempotency_key":"k1","q":"go"}`, true},
		{"a form body is read back, nested keys bracketed", contract(false, form),
			LegacyRequest{Body: []byte("Body=hi+there&meta%5Bflag%5D=true&From=%2B2")},
			`{"flag":true,"q":"hi there"}`, false},
		{"a form key the binding does not have is refused", contract(false, form),
			LegacyRequest{Body: []byte("Body=hi&Extra=1")},
			"Argument Extra is not an accepted argument", false},
		{"an argument read only by an expression cannot be read back", contract(false, BindingSpec{Method: "POST", Body: obj("x", expr("args.q + '!'"))}),
			LegacyRequest{Body: []byte(`{"x":"go!"}`)},
			"argument q cannot be read from this tool's own route", false},
		{"an argument read only in a form list cannot be read back", contract(false, formList),
			LegacyRequest{Body: []byte("Media=a")},
			"argument id cannot be read from this tool's own route", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args, err := tt.contract.ReadArgs(tt.req, 32)
			var got string
			if err != nil {
				got = err.Error()
			} else {
				raw, _ := appendJSONValue(nil, args)
				got = string(raw)
			}
			if !strings.Contains(got, tt.want) {
				t.Errorf("read %s, want %s", got, tt.want)
			}
		})
	}
	if arg, field, bad := contract(false, formList).Binding.Unreadable(); !bad || arg != "id" || field != "body.Media[0]" {
		t.Errorf("Unreadable = %s %s %v", arg, field, bad)
	}
	if _, _, bad := contract(false, nested).Binding.Unreadable(); bad {
		t.Error("every argument of the nested binding can be read back")
	}
	both := contract(false, BindingSpec{Method: "POST", Query: obj("q", arg("q")), Body: obj("x", expr("args.q + '!'"))})
	if _, _, bad := both.Binding.Unreadable(); bad {
		t.Error("an argument an expression reads is readable when also bound in the query")
	}
}

// FuzzShapedBind feeds arbitrary arguments through validation and a
// binding that shapes every part of the request: no CR or LF reaches a
// header or the request line, the placeholder stays in its segment, the
// form body and the query parse back to the values bound, and the JSON
// body is always valid JSON holding the arguments.
func FuzzShapedBind(f *testing.F) {
	env := mustEnv(f, 0)
	schema := mustSchema(f, `{"type":"object","required":["id"],"properties":{
		"id":{"type":"string","maxLength":300},"q":{"type":["string","number","boolean","null"]},
		"tags":{"type":"array","maxItems":20},"n":{"type":"integer","default":5}}}`)
	spec := BindingSpec{Method: "POST", Path: "/api/{id}/x",
		Query:   obj("q", arg("q"), "fq", arg("tags"), "wt", cnst("json"), "meta", obj("n", arg("n"))),
		Headers: obj("X-Q", arg("q"), "X-Tags", arg("tags"), "X-N", expr("string(args.n) + \"!\""), "Accept", cnst("text/plain")),
	}
	jsonSpec, formSpec := spec, spec
	jsonSpec.Body = obj("query", obj("match", obj("title", arg("q"))), "tags", arg("tags"), "ids", list(arg("id"), expr("args.id + args.id")))
	formSpec.Encoding, formSpec.Body = EncodingForm, obj("Body", arg("q"), "Media", arg("tags"), "meta", obj("n", arg("n")))
	jsonBinding, err := CompileBinding(env, jsonSpec, schema)
	if err != nil {
		f.Fatal(err)
	}
	formBinding, err := CompileBinding(env, formSpec, schema)
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range []string{
		`{"id":"a","q":"go"}`, `{"id":"../..","q":"x\r\nHost: evil"}`, `{"id":"a/b?c#d","tags":["a\nb",{"k":"v"},[1],null,2]}`,
		`{"id":".","q":1e400}`, `{"id":"%00","q":"a&b=c+d%20"}`, `{"id":"\u0000\u2028","q":"\u0085"}`, `{"id":"x","q":null,"tags":[]}`,
		`{"id":"x","q":"量子 café","n":-0}`, `{}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		args, ok := fuzzArgs(doc)
		if !ok || schema.Validate(args) != nil {
			return
		}
		for _, b := range []*Binding{jsonBinding, formBinding} {
			got, err := b.Bind(args)
			if err != nil {
				if _, ok := err.(*ArgError); !ok {
					t.Fatalf("binding error is %T, not *ArgError", err)
				}
				continue
			}
			checkShapedRequest(t, b, args, got)
		}
	})
}

func checkShapedRequest(t *testing.T, b *Binding, args map[string]any, got Bound) {
	t.Helper()
	if strings.ContainsAny(got.Path+got.Query, "\r\n ") {
		t.Fatalf("CR, LF or space in the request line: %q ? %q", got.Path, got.Query)
	}
	seg := strings.TrimSuffix(strings.TrimPrefix(got.Path, "/api/"), "/x")
	if !strings.HasPrefix(got.Path, "/api/") || !strings.HasSuffix(got.Path, "/x") || strings.ContainsAny(seg, "/?#") || seg == "." || seg == ".." || seg == "" {
		t.Fatalf("the placeholder left its segment: %q", got.Path)
	}
	if dec, err := url.PathUnescape(seg); err != nil || dec != args["id"] {
		t.Fatalf("segment %q does not decode to the argument %q", seg, args["id"])
	}
	for _, h := range []map[string][]string{b.StaticHeader(), got.Header} {
		for k, vs := range h {
			for _, v := range vs {
				if !validHeaderValue(v) || !validHeaderName(k) {
					t.Fatalf("header %q: %q", k, v)
				}
			}
		}
	}
	if s, ok := scalarString(args["q"]); ok && args["q"] != nil {
		if v := got.Header["X-Q"]; len(v) != 1 || v[0] != s {
			t.Fatalf("X-Q = %q, want %q", v, s)
		}
	}
	q, err := url.ParseQuery(got.Query)
	if err != nil {
		t.Fatalf("query %q does not parse: %v", got.Query, err)
	}
	checkPairs(t, "query", q, "q", "fq", args)
	if q.Get("wt") != "json" || q.Get("meta[n]") != formText(args["n"]) {
		t.Fatalf("query %q lacks its constant or nested pair", got.Query)
	}
	if b.Encoding() == EncodingForm {
		form, err := url.ParseQuery(string(got.Body))
		if err != nil {
			t.Fatalf("form body %q does not parse: %v", got.Body, err)
		}
		checkPairs(t, "form", form, "Body", "Media", args)
		if form.Get("meta[n]") != formText(args["n"]) {
			t.Fatalf("form body %q lacks meta[n]", got.Body)
		}
		return
	}
	var body map[string]any
	dec := json.NewDecoder(strings.NewReader(string(got.Body)))
	dec.UseNumber()
	if !json.Valid(got.Body) || dec.Decode(&body) != nil {
		t.Fatalf("body is not a JSON object: %q", got.Body)
	}
	ids, _ := body["ids"].([]any)
	if len(ids) != 2 || ids[0] != args["id"] {
		t.Fatalf("body ids = %v", body["ids"])
	}
	if q, present := args["q"]; present {
		title := body["query"].(map[string]any)["match"].(map[string]any)["title"]
		if formText(title) != formText(q) {
			t.Fatalf("title %v, want %v", title, q)
		}
	} else if _, sent := body["query"]; sent {
		t.Fatalf("an absent argument was sent: %s", got.Body)
	}
}

// checkPairs: the scalar argument's pair and the list argument's repeated
// pairs parse back to the values bound.
func checkPairs(t *testing.T, what string, vals url.Values, scalarKey, listKey string, args map[string]any) {
	t.Helper()
	if v, ok := args["q"]; ok && v != nil {
		if got := vals[scalarKey]; len(got) != 1 || got[0] != formText(v) {
			t.Fatalf("%s %s = %q, want %q", what, scalarKey, got, formText(v))
		}
	} else if _, sent := vals[scalarKey]; sent {
		t.Fatalf("%s sends %s for an absent or null argument", what, scalarKey)
	}
	var want []string
	tags, _ := args["tags"].([]any)
	for _, e := range tags {
		if e != nil {
			want = append(want, formText(e))
		}
	}
	if got := vals[listKey]; strings.Join(got, "\x00") != strings.Join(want, "\x00") || len(got) != len(want) {
		t.Fatalf("%s %s = %q, want %q", what, listKey, got, want)
	}
}

// formText is how a value is spelled in a query or form: scalars as text,
// anything else as its compact JSON.
func formText(v any) string {
	if s, ok := scalarString(v); ok {
		return s
	}
	raw, _ := appendJSONValue(nil, v)
	return string(raw)
}
