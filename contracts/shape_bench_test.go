package contracts

import (
	"encoding/json"
	"testing"
)

// BenchmarkBindFlat binds the flat form (a placeholder, two query
// parameters, two body fields): the shape every policy before request
// shaping used.
func BenchmarkBindFlat(b *testing.B) {
	s := mustSchema(b, bindSchema)
	bd, err := CompileBinding(nil, BindingSpec{Method: "POST", Path: "/v1/users/{id}/items",
		Query: Fields(map[string]string{"n": "n", "tag": "tags"}), Body: Fields(map[string]string{"text": "text", "flag": "flag"})}, s)
	if err != nil {
		b.Fatal(err)
	}
	args := map[string]any{"id": "alice", "n": json.Number("3"), "tags": []any{"a b", "c"}, "text": "hello", "flag": true}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := bd.Bind(args); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkBindShaped binds a nested body with constants, a header from
// an argument and one CEL expression.
func BenchmarkBindShaped(b *testing.B) {
	env := mustEnv(b, 0)
	bd := mustBinding(b, env, BindingSpec{Method: "POST",
		Query:   obj("wt", cnst("json"), "fq", arg("tags")),
		Headers: obj("X-Tenant", arg("id")),
		Body: obj("query", obj("bool", obj("must", list(obj("match", obj("title", arg("q")))), "filter", list(obj("term", obj("lang", arg("lang")))))),
			"size", arg("n"), "from", expr("(args.n - 1) * 10"), "_source", cnst([]any{"title", "url"}))})
	args := map[string]any{"id": "acme", "q": "quantum", "n": json.Number("3"), "tags": []any{"a", "b"}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := bd.Bind(args); err != nil {
			b.Fatal(err)
		}
	}
}
