package contracts

import (
	"encoding/json"
	"errors"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/text/unicode/norm"
)

func mustSchema(t testing.TB, doc string) *Schema {
	t.Helper()
	var v any
	dec := json.NewDecoder(strings.NewReader(doc))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		t.Fatal(err)
	}
	s, err := CompileSchema(v)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

const bindSchema = `{"type":"object","properties":{"id":{"type":"string"},"n":{"type":"integer"},"tags":{"type":"array"},"text":{"type":"string"},"flag":{"type":"boolean"}}}`

func TestBindEscapesEachPlaceholderAsOneSegment(t *testing.T) {
	s := mustSchema(t, bindSchema)
	b, err := CompileBinding(nil, BindingSpec{Method: "post", Path: "/v1/users/{id}/items", Query: Fields(map[string]string{"n": "n", "tag": "tags"}), Body: Fields(map[string]string{"text": "text", "flag": "flag"})}, s)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args map[string]any
		path string
	}{
		{"plain value stays readable", map[string]any{"id": "alice"}, "/v1/users/alice/items"},
		{"slash cannot add a segment", map[string]any{"id": "a/b"}, "/v1/users/a%2Fb/items"},
		{"question mark cannot start a query", map[string]any{"id": "x?admin=1"}, "/v1/users/x%3Fadmin%3D1/items"},
		{"hash cannot start a fragment", map[string]any{"id": "x#frag"}, "/v1/users/x%23frag/items"},
		{"CR LF are encoded", map[string]any{"id": "x\r\nHost: evil"}, "/v1/users/x%0D%0AHost%3A%20evil/items"},
		{"percent is encoded, no double decoding", map[string]any{"id": "%41%2f"}, "/v1/users/%2541%252f/items"},
		{"dots inside a value stay", map[string]any{"id": "v1.2..3"}, "/v1/users/v1.2..3/items"},
		{"three dots are a name", map[string]any{"id": "..."}, "/v1/users/.../items"},
		{"unicode is percent-encoded", map[string]any{"id": "量子"}, "/v1/users/%E9%87%8F%E5%AD%90/items"},
		{"numbers bind", map[string]any{"id": json.Number("42")}, "/v1/users/42/items"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := b.Bind(tt.args)
			if err != nil {
				t.Fatal(err)
			}
			if got.Path != tt.path {
				t.Errorf("path = %q, want %q", got.Path, tt.path)
			}
			if strings.ContainsAny(got.Path+got.Query+string(got.Body), "\r\n") {
				t.Errorf("CR/LF leaked: %q %q %q", got.Path, got.Query, got.Body)
			}
		})
	}
	if b.Method() != "POST" {
		t.Errorf("method = %q", b.Method())
	}
}

func TestBindRefusesEmptyAndNonScalarSegments(t *testing.T) {
	s := mustSchema(t, bindSchema)
	b, err := CompileBinding(nil, BindingSpec{Method: "GET", Path: "/items/{id}"}, s)
	if err != nil {
		t.Fatal(err)
	}
	for name, args := range map[string]map[string]any{
		"empty string": {"id": ""},
		"object":       {"id": map[string]any{"a": "b"}},
		"missing":      {},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := b.Bind(args); err == nil {
				t.Fatal("bound an unusable segment")
			}
		})
	}
}

// TestBindRefusesDotSegmentsInAnyEncoding: RFC 3986 makes %2E%2E the
// same segment as "..", so no escaping keeps such a value in its segment:
// a path value that a server may read as "." or ".." (after decoding it
// once or again, in any case, as %u escapes, overlong UTF-8 or Unicode
// compatibility forms, with an encoded slash or backslash, a ;parameter,
// a NUL or trailing spaces) is bad_args naming the argument. Values that
// merely hold dots are sent.
func TestBindRefusesDotSegmentsInAnyEncoding(t *testing.T) {
	s := mustSchema(t, `{"type":"object","properties":{"year":{"type":"string"},"name":{"type":"string"}}}`)
	b, err := CompileBinding(nil, BindingSpec{Method: "GET", Path: "/reports/{year}/{name}"}, s)
	if err != nil {
		t.Fatal(err)
	}
	mixed, err := CompileBinding(nil, BindingSpec{Method: "GET", Path: "/files/x{year}/{name}.json"}, s)
	if err != nil {
		t.Fatal(err)
	}
	for _, year := range []string{
		".", "..", "%2e", "%2E", "%2e%2e", "%2E%2e", "%2e%2E", ".%2E", "%2e.", "%252e%252e", "%25252E%25252E",
		"%u002e%u002e", "%U002E.", "../admin", "..\\admin", "x/../..", "..%2fadmin", "..%5Cadmin", "..;x=1", "..%3b",
		"..\x00", "..%00", ".. ", "%c0%ae%c0%ae", "%e0%80%ae", "．．", "‥", "﹒", "a／..", "..%ef%bc%8fx",
	} {
		t.Run("year "+strconv.Quote(year)+" is refused", func(t *testing.T) {
			_, err := b.Bind(map[string]any{"year": year, "name": "admin"})
			var ae *ArgError
			if !errors.As(err, &ae) || ae.Pointer != "/year" || ae.Problem != ProblemSegment {
				t.Fatalf("Bind = %v, want a segment violation of /year", err)
			}
		})
	}
	t.Run("a literal in the segment does not hide a dot value", func(t *testing.T) {
		if _, err := mixed.Bind(map[string]any{"year": "x", "name": "%2E%2E"}); err != nil {
			t.Fatalf("%v", err)
		}
		for _, name := range []string{"../..", "../x"} {
			if _, err := mixed.Bind(map[string]any{"year": "1", "name": name}); err == nil {
				t.Errorf("name %q was bound", name)
			}
		}
	})
	for _, year := range []string{"2024", "v1.2", "...", ".x", "x.", "..x", "%2e%2ex", "a b", "量子", "．x", "%zz", "%u00", "a/b"} {
		t.Run("year "+strconv.Quote(year)+" is sent", func(t *testing.T) {
			got, err := b.Bind(map[string]any{"year": year, "name": "q1"})
			if err != nil {
				t.Fatal(err)
			}
			seg := strings.TrimSuffix(strings.TrimPrefix(got.Path, "/reports/"), "/q1")
			if dec, err := url.PathUnescape(seg); err != nil || dec != year {
				t.Errorf("path %q", got.Path)
			}
		})
	}
}

func TestBindQueryAndBody(t *testing.T) {
	s := mustSchema(t, bindSchema)
	b, err := CompileBinding(nil, BindingSpec{Method: "POST", Path: "/x", Query: Fields(map[string]string{"n": "n", "tag": "tags"}), Body: Fields(map[string]string{"text": "text", "flag": "flag", "missing": "id"})}, s)
	if err != nil {
		t.Fatal(err)
	}
	got, err := b.Bind(map[string]any{"n": json.Number("3"), "tags": []any{"a b", "c&d"}, "text": "hi \"there\"", "flag": true})
	if err != nil {
		t.Fatal(err)
	}
	q, err := url.ParseQuery(got.Query)
	if err != nil {
		t.Fatal(err)
	}
	if q.Get("n") != "3" || strings.Join(q["tag"], "|") != "a b|c&d" {
		t.Errorf("query = %q", got.Query)
	}
	if string(got.Body) != `{"flag":true,"text":"hi \"there\""}` {
		t.Errorf("body = %s", got.Body)
	}
}

func TestCompileBindingErrors(t *testing.T) {
	s := mustSchema(t, bindSchema)
	tests := []struct {
		name string
		spec BindingSpec
		want string
	}{
		{"placeholder that is not an argument", BindingSpec{Path: "/a/{nope}"}, "request.path: placeholder {nope} is not an argument"},
		{"relative path", BindingSpec{Path: "a"}, "must start with /"},
		{"query in path", BindingSpec{Path: "/a?b=c"}, "must not contain ?"},
		{"unbalanced brace", BindingSpec{Path: "/a/{id"}, "unbalanced {"},
		{"bad method", BindingSpec{Method: "FETCH", Path: "/a"}, "not an HTTP method"},
		{"query argument unknown", BindingSpec{Path: "/a", Query: Fields(map[string]string{"q": "nope"})}, `"nope" is not an argument`},
		{"body argument unknown", BindingSpec{Path: "/a", Body: Fields(map[string]string{"q": "nope"})}, `"nope" is not an argument`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := CompileBinding(nil, tt.spec, s)
			if err == nil {
				t.Fatal("compiled")
			}
			msg := "request." + err.Error()
			if !strings.Contains(msg, tt.want) {
				t.Errorf("error %q does not contain %q", msg, tt.want)
			}
		})
	}
}

// FuzzValidateAndBind feeds arbitrary argument documents through
// validation and binding: the bound path never leaves its segment and
// nothing carries CR/LF.
func FuzzValidateAndBind(f *testing.F) {
	s := mustSchema(f, `{"type":"object","required":["id"],"properties":{"id":{"type":"string","maxLength":300},"q":{"type":"string"},"n":{"type":"integer","default":5}}}`)
	b, err := CompileBinding(nil, BindingSpec{Method: "POST", Path: "/api/{id}/x", Query: Fields(map[string]string{"q": "q", "n": "n"}), Body: Fields(map[string]string{"q": "q"})}, s)
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range []string{`{"id":"a"}`, `{"id":"../.."}`, `{"id":"a/b?c#d","q":"x\r\ny"}`, `{"id":".","n":1e400}`, `{"id":"%00"}`, `{"id":"\u0000\u2028"}`, `{"id":"%252e%252E"}`, `{"id":"\uff0e\uff0e"}`, `{"id":"a%2f..%2fb"}`, `{}`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		args, ok := fuzzArgs(doc)
		if !ok {
			return
		}
		if err := s.Validate(args); err != nil {
			if list, ok := err.(*ArgErrors); !ok || len(list.List) == 0 || list.Total < len(list.List) {
				t.Fatalf("validation error is %T %v, not *ArgErrors", err, err)
			}
			return
		}
		got, err := b.Bind(args)
		if err != nil {
			return
		}
		if !strings.HasPrefix(got.Path, "/api/") || !strings.HasSuffix(got.Path, "/x") {
			t.Fatalf("path left its shape: %q", got.Path)
		}
		seg := strings.TrimSuffix(strings.TrimPrefix(got.Path, "/api/"), "/x")
		if strings.ContainsAny(seg, "/?#\r\n ") || seg == "." || seg == ".." || seg == "" {
			t.Fatalf("segment escaped: %q", seg)
		}
		if dec, err := url.PathUnescape(seg); err != nil || dec != args["id"] {
			t.Fatalf("segment %q does not decode to the argument %q", seg, args["id"])
		}
		// However often a server decodes what was sent, and whether it
		// normalises Unicode, no piece of it is a dot segment.
		for dec, round := seg, 0; round < maxDecodeRounds; round++ {
			next, err := url.PathUnescape(dec)
			if err != nil || next == dec {
				break
			}
			dec = next
			for _, form := range []string{dec, norm.NFKC.String(dec)} {
				for _, piece := range strings.FieldsFunc(form, func(r rune) bool { return r == '/' || r == '\\' }) {
					if piece, _, _ = strings.Cut(piece, ";"); piece == "." || piece == ".." {
						t.Fatalf("segment %q reads as a dot segment after %d decodings: %q", seg, round+1, form)
					}
				}
			}
		}
		if strings.ContainsAny(got.Query+string(got.Body), "\r\n") {
			t.Fatalf("CR/LF in request: %q %q", got.Query, got.Body)
		}
		if !json.Valid(got.Body) {
			t.Fatalf("body is not JSON: %q", got.Body)
		}
	})
}

func TestIntegralNumbersBindAsIntegers(t *testing.T) {
	for in, want := range map[string]string{"1e1": "10", "10.0": "10", "-2.50e1": "-25", "2.5": "2.5", "1e-2": "1e-2", "1e999999999": "1e999999999", "7": "7"} {
		if got := canonicalNumber(json.Number(in)); got != want {
			t.Errorf("canonicalNumber(%s) = %s, want %s", in, got, want)
		}
	}
}

func TestQueryEscapingMatchesNetURL(t *testing.T) {
	for _, s := range []string{"", "go lang", "a&b=c", "量子", "~._-", "%zz", "\r\n", "+/?#"} {
		if got, want := string(appendQueryEscaped(nil, s)), url.QueryEscape(s); got != want {
			t.Errorf("%q: %q, want %q", s, got, want)
		}
	}
}
