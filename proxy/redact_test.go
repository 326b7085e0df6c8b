package proxy

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/examples"
	"github.com/toolgate/toolgate/internal/jsontape"
	"github.com/toolgate/toolgate/policy"
)

// The encodings a backend may echo a value in, written here without the
// redactor's code: each returns the text as it appears in a JSON answer's
// string (already escaped for JSON where the encoding is a JSON one).
var echoEncodings = []struct {
	name   string
	encode func(string) string
}{
	{"verbatim", jsonInner},
	{"JSON with escaped slashes", func(s string) string { return strings.ReplaceAll(jsonInner(s), "/", `\/`) }},
	{"JSON with upper-case \\u escapes", func(s string) string { return unicodeEscaped(s, "\\u%04X") }},
	{"JSON with lower-case \\u escapes", func(s string) string { return unicodeEscaped(s, "\\u%04x") }},
	{"query-escaped", url.QueryEscape},
	{"query-escaped, lower-case hex", func(s string) string { return lowerPercentHex(url.QueryEscape(s)) }},
	{"path-escaped", url.PathEscape},
	{"base64", func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }},
	{"base64 unpadded", func(s string) string { return base64.RawStdEncoding.EncodeToString([]byte(s)) }},
	{"base64url", func(s string) string { return base64.URLEncoding.EncodeToString([]byte(s)) }},
	{"base64url unpadded", func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }},
	{"base64 with escaped slashes", func(s string) string {
		return strings.ReplaceAll(base64.StdEncoding.EncodeToString([]byte(s)), "/", `\/`)
	}},
	{"base64 query-escaped", func(s string) string { return url.QueryEscape(base64.StdEncoding.EncodeToString([]byte(s))) }},
}

// jsonInner is s as a JSON string's content (encoding/json's escaping).
func jsonInner(s string) string {
	b, _ := json.Marshal(s)
	return string(b[1 : len(b)-1])
}

// unicodeEscaped writes every byte of s but letters and digits as a \u
// escape in format.
func unicodeEscaped(s, format string) string {
	var b strings.Builder
	for _, r := range s {
		if 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' {
			b.WriteRune(r)
			continue
		}
		fmt.Fprintf(&b, format, r)
	}
	return b.String()
}

var percentHex = regexp.MustCompile(`%[0-9A-F]{2}`)

func lowerPercentHex(s string) string { return percentHex.ReplaceAllStringFunc(s, strings.ToLower) }

// secretForms are the strings whose presence in a text means s leaked:
// s in each echo encoding, and the middle of its base64 at every byte
// alignment (what any base64 blob holding s contains, whatever surrounds
// it), also with escaped slashes and query-escaped.
func secretForms(s string) []string {
	var forms []string
	for _, e := range echoEncodings {
		forms = append(forms, e.encode(s))
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
		for _, prefix := range []string{"", "x", "xx"} {
			full := enc.EncodeToString([]byte(prefix + s))
			mid := full[4 : len(full)-4]
			forms = append(forms, mid, strings.ReplaceAll(mid, "/", `\/`), url.QueryEscape(mid))
		}
	}
	return forms
}

// leaked returns the first form of a secret that text holds.
func leaked(text string, secrets ...string) (string, bool) {
	for _, s := range secrets {
		for _, f := range secretForms(s) {
			if strings.Contains(text, f) {
				return f, true
			}
		}
	}
	return "", false
}

func needlesOf(secrets ...string) *matcher {
	var ns []needle
	for _, s := range secrets {
		ns = appendNeedles(ns, s)
	}
	return newMatcher(ns)
}

func TestRedactFindsEachEncoding(t *testing.T) {
	secrets := []string{
		"tok/en+Z9=q",         // base64 and URL specials
		"p@ss w/rd:9!",        // a space, a colon
		"plainalnumtoken1234", // nothing to escape
		"clé-secrète-ü",       // non-ASCII
	}
	for _, secret := range secrets {
		ns := needlesOf(secret)
		for _, e := range echoEncodings {
			for _, where := range []struct{ name, before, after string }{
				{"alone", "", ""},
				{"inside text", "got Authorization: Bearer ", " from you"},
				{"after one byte", "x", "yz"},
				{"after two bytes", "xy", "z"},
			} {
				// Base64 encodes the whole echo, so that the secret
				// sits at each alignment; the others encode the secret.
				var inner string
				if strings.Contains(e.name, "base64") {
					inner = e.encode(where.before + secret + where.after)
				} else {
					inner = jsonInner(where.before) + e.encode(secret) + jsonInner(where.after)
				}
				body := `{"echo":"` + inner + `","n":1}`
				t.Run(fmt.Sprintf("%q %s %s", secret, e.name, where.name), func(t *testing.T) {
					if !json.Valid([]byte(body)) {
						t.Fatalf("the test's body is not JSON: %s", body)
					}
					if _, ok := leaked(body, secret); !ok {
						t.Fatalf("the test's check does not see the secret in %s", body)
					}
					out, n := redactBytes([]byte(body), ns, nil)
					if n == 0 {
						t.Fatalf("nothing found in %s", body)
					}
					if f, ok := leaked(string(out), secret); ok {
						t.Errorf("%s still holds %q", out, f)
					}
					if !json.Valid(out) {
						t.Errorf("not JSON after redaction: %s", out)
					}
					if !strings.Contains(string(out), redactedMarker) || !strings.HasSuffix(string(out), `","n":1}`) {
						t.Errorf("redacted to %s", out)
					}
				})
			}
		}
	}
}

// indexMatches is what matcher.find must find, the plain way: every
// occurrence of every needle by bytes.Index, extended over its tail.
func indexMatches(mt *matcher, text []byte) []span {
	var found []span
	for i := range mt.needles {
		n := &mt.needles[i]
		for off := 0; off <= len(text)-len(n.b); {
			k := bytes.Index(text[off:], n.b)
			if k < 0 {
				break
			}
			found = append(found, span{off + k, n.extend(text, off+k+len(n.b))})
			off += k + 1
		}
	}
	return found
}

func TestRedactKeepsJSONValid(t *testing.T) {
	ns := needlesOf("12345678", `ab"cd\ef/gh`, "sep,arated")
	for _, tc := range []struct{ name, in, want string }{
		{"a number that is the secret becomes a string", `{"pin":12345678}`, `{"pin":"[redacted]"}`},
		{"a number that holds it goes whole", `[9912345678000,1]`, `["[redacted]",1]`},
		{"a key", `{"12345678":true}`, `{"[redacted]":true}`},
		{"escaped quotes and backslashes", `{"a":"x ab\"cd\\ef\/gh y"}`, `{"a":"x [redacted] y"}`},
		{"a match across two strings keeps their quotes", `["sep","arated"]`, `["sep","arated"]`},
		{"a match across a comma keeps the comma", `["x sep,arated"]`, `["x [redacted]"]`},
		{"a secret split by the structure keeps the structure", `{"k":"sep","v":"arated"}`, `{"k":"sep","v":"arated"}`},
		{"text that is not JSON", `denied sep,arated 12345678`, `denied [redacted] [redacted]`},
		{"a lone surrogate escape next to the secret", `["\ud800 12345678"]`, `["\ud800 [redacted]"]`},
		{"an escaped quote ends no string", `["\"12345678\""]`, `["\"[redacted]\""]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, _ := redactBytes([]byte(tc.in), ns, nil)
			if string(out) != tc.want {
				t.Errorf("redactBytes(%s) = %s, want %s", tc.in, out, tc.want)
			}
			if json.Valid([]byte(tc.in)) && !json.Valid(out) {
				t.Errorf("%s is not JSON", out)
			}
		})
	}
}

func TestRedactSpanningStringsStaysJSON(t *testing.T) {
	// A secret that holds a quote, echoed unescaped by a broken backend
	// into what still parses as JSON: the quotes are the structure's,
	// the characters around them go.
	ns := needlesOf(`abcd","efgh`)
	in := `["abcd","efgh"]`
	out, n := redactBytes([]byte(in), ns, nil)
	if n != 1 || string(out) != `["[redacted]","[redacted]"]` {
		t.Errorf("redactBytes(%s) = %s, %d", in, out, n)
	}
}

func TestShortSecretsAreNotSearched(t *testing.T) {
	ns := needlesOf("a", "admin", "1234567")
	if ns != nil {
		t.Fatalf("needles for values under %d bytes: %v", minSecretLen, ns.needles)
	}
	// A short user name still leaves "user:password" to search for.
	ns = needlesOf("a:hunter2")
	body := []byte(`{"auth":"Basic ` + base64.StdEncoding.EncodeToString([]byte("a:hunter2")) + `"}`)
	out, n := redactBytes(body, ns, nil)
	if n != 1 || string(out) != `{"auth":"Basic [redacted]"}` {
		t.Errorf("got %s, %d", out, n)
	}
}

func TestAnAnswerWithoutSecretsIsLeftAsItIs(t *testing.T) {
	ns := needlesOf("tok/en+Z9=q")
	for _, body := range []string{`{"a":"b"}`, `{"a":"b\/c%2F"}`, `text`, ``} {
		in := []byte(body)
		out, n := redactBytes(in, ns, nil)
		if n != 0 || string(out) != body || len(in) > 0 && &out[0] != &in[0] {
			t.Errorf("redactBytes(%q) = %q, %d: changed or copied", body, out, n)
		}
	}
	if raceEnabled {
		return // the race detector drops pooled views at random
	}
	allocs := testing.AllocsPerRun(100, func() { redactBytes([]byte(`{"a":"b\/c%2F and more text"}`), ns, nil) })
	if allocs > 1 { // the []byte of the literal
		t.Errorf("%v allocations for an answer with escapes and no secret", allocs)
	}
}

func TestForwardedCredentialsAreSecrets(t *testing.T) {
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("someone:their-password"))
	for _, tc := range []struct {
		name, header, value string
		secrets             []string
	}{
		{"a bearer token without its scheme", "Authorization", "Bearer agent-token-123", []string{"agent-token-123"}},
		{"a basic credential's user, password and pair", "Authorization", basic, []string{"someone:their-password", "their-password"}},
		{"each cookie", "Cookie", "theme=dark; session=s3ss10n-value-77", []string{"s3ss10n-value-77"}},
		{"an API key header", "X-Api-Key", "key-abcdefgh", []string{"key-abcdefgh"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !identityHeader(tc.header) {
				t.Fatalf("%s is not a credential header", tc.header)
			}
			ns := newMatcher(appendHeaderSecrets(nil, tc.header, tc.value))
			for _, s := range tc.secrets {
				out, n := redactBytes([]byte(`{"echo":"`+s+`"}`), nil, ns)
				if n == 0 || strings.Contains(string(out), s) {
					t.Errorf("%q not redacted: %s", s, out)
				}
			}
		})
	}
	for _, name := range []string{"Accept-Language", "X-Tenant", "X-Request-Source"} {
		if identityHeader(name) {
			t.Errorf("%s taken for a credential header", name)
		}
	}
}

// FuzzRedact: valid JSON stays valid JSON, and nothing the redactor
// looks for is left.
func FuzzRedact(f *testing.F) {
	f.Add(`{"a":"tok\/en+Z9=q","b":12345678}`, "tok/en+Z9=q")
	f.Add(`["abcd","efgh"]`, `abcd","efgh`)
	f.Add(`{"x":"dG9rL2VuK1o5PXE=","y":"tok%2Fen%2bZ9%3Dq"}`, "tok/en+Z9=q")
	f.Add(`["\ud83d\ude00 secretvalue \u0073ecretvalue"]`, "secretvalue")
	f.Add(`{"n":-12345678.5e3}`, "12345678")
	f.Fuzz(func(t *testing.T, body, secret string) {
		ns := needlesOf(secret)
		if ns != nil {
			// Wu-Manber finds what a bytes.Index per needle finds.
			got, want := ns.find(nil, []byte(body)), indexMatches(ns, []byte(body))
			if len(got) > 0 && len(want) > 0 {
				got, want = mergeSpans(got), mergeSpans(want)
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("in %q, Wu-Manber finds %v, bytes.Index %v", body, got, want)
			}
		}
		out, n := redactBytes([]byte(body), ns, nil)
		if n == 0 && string(out) != body {
			t.Fatalf("nothing found, yet changed: %q -> %q", body, out)
		}
		if valid, _ := jsontape.Check([]byte(body)); valid {
			if ok, _ := jsontape.Check(out); !ok || json.Valid([]byte(body)) && !json.Valid(out) {
				t.Fatalf("%q redacted to %q: not JSON", body, out)
			}
		}
		// A secret that overlaps the marker could be made again by it.
		if n > 0 && !strings.ContainsAny(secret, "[]") && !strings.Contains(redactedMarker, secret) {
			if again, m := redactBytes(out, ns, nil); m != 0 {
				t.Fatalf("%q redacted to %q still holds the secret %q (%q)", body, out, secret, again)
			}
		}
	})
}

// BenchmarkAnswerRedaction is the search call of BenchmarkAnswerSize with
// the search upstream holding no secret, a bearer token, and an API key
// while the call also forwards the agent's basic Authorization (four
// secrets, 21 needles): the cost of scanning each answer for them. The answers hold no
// secret, as nearly all do.
func BenchmarkAnswerRedaction(b *testing.B) {
	cases := []struct {
		name, auth string
		header     http.Header
	}{
		{"no secret", "", nil},
		{"a bearer token", "\n    auth: {bearer: {token: bench-token-Zq8c/Kp3sf}}", nil},
		{"an API key and a forwarded basic Authorization", "\n    auth: {api_key: {header: X-Api-Key, value: bench-key/Vx71d}}\n    forward_headers: [Authorization]",
			http.Header{"Authorization": {"Basic " + base64.StdEncoding.EncodeToString([]byte("agent-user:agent-pass/Lr4e"))}}},
	}
	for _, size := range []int{1 << 10, 64 << 10, 1 << 20} {
		for _, tc := range cases {
			b.Run(fmt.Sprintf("%dKiB/%s", size>>10, tc.name), func(b *testing.B) {
				body := examples.PaddedSearchAnswer(size)
				doc := strings.NewReplacer("server:\n", "server:\n  max_response_bytes: 2097152\n", "\naccess:\n", "\naccess:\n  shared_credentials: [search]\n",
					"url: http://127.0.0.1:7001", "url: http://127.0.0.1:7001"+tc.auth).Replace(string(examples.Policy()))
				snap, err := config.CompileSource("policy.yaml", []byte(doc), config.Options{})
				if err != nil {
					b.Fatal(err)
				}
				core, err := NewCore(snap, Options{Registry: prometheus.NewRegistry(), Transport: func(*policy.Upstream) http.RoundTripper { return cannedTransport{body: body} }})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(core.Close)
				args := []byte(`{"q":"go","limit":5}`)
				b.SetBytes(int64(len(body)))
				b.ReportAllocs()
				for b.Loop() {
					res := core.Call(context.Background(), &Request{Tool: "search_articles", Body: args, CallID: "bench", Header: tc.header})
					if res.Envelope.Status != "ok" {
						b.Fatal(res.Envelope.Status, res.Envelope.Message)
					}
				}
			})
		}
	}
}

// BenchmarkRedactBytes is the scan alone over a 64 KiB JSON answer for a
// bearer token's needles: an answer without escapes, one with JSON
// escapes (the view is built), and one that holds the token twice.
func BenchmarkRedactBytes(b *testing.B) {
	ns := needlesOf("bench-token-Zq8c/Kp3sf")
	plain := examples.PaddedSearchAnswer(64 << 10)
	escaped := []byte(strings.ReplaceAll(string(plain), "go", `g\u006f`))
	holding := []byte(strings.Replace(string(plain), `"go`, `"bench-token-Zq8c\/Kp3sf`, 2))
	for _, tc := range []struct {
		name string
		body []byte
	}{{"no escapes", plain}, {"JSON escapes", escaped}, {"holding the token", holding}} {
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(int64(len(tc.body)))
			b.ReportAllocs()
			for b.Loop() {
				redactBytes(tc.body, ns, nil)
			}
		})
	}
}
