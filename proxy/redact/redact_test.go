package redact

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/examples"
	"github.com/toolgate/toolgate/internal/jsontape"
	"github.com/toolgate/toolgate/internal/testkit/redacttest"
)

func needlesOf(secrets ...string) *Matcher {
	var ns []Needle
	for _, s := range secrets {
		ns = AppendNeedles(ns, s)
	}
	return NewMatcher(ns)
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
		for _, e := range redacttest.Encodings {
			for _, where := range []struct{ name, before, after string }{
				{"alone", "", ""},
				{"inside text", "got Authorization: Bearer ", " from you"},
				{"after one byte", "x", "yz"},
				{"after two bytes", "xy", "z"},
			} {
				// Base64 encodes the whole echo, so that the secret
				// sits at each alignment; the others encode the secret.
				var inner string
				if strings.Contains(e.Name, "base64") {
					inner = e.Encode(where.before + secret + where.after)
				} else {
					inner = redacttest.JSONInner(where.before) + e.Encode(secret) + redacttest.JSONInner(where.after)
				}
				body := `{"echo":"` + inner + `","n":1}`
				t.Run(fmt.Sprintf("%q %s %s", secret, e.Name, where.name), func(t *testing.T) {
					if !json.Valid([]byte(body)) {
						t.Fatalf("the test's body is not JSON: %s", body)
					}
					if _, ok := redacttest.Leaked(body, secret); !ok {
						t.Fatalf("the test's check does not see the secret in %s", body)
					}
					out, n := Bytes([]byte(body), ns, nil)
					if n == 0 {
						t.Fatalf("nothing found in %s", body)
					}
					if f, ok := redacttest.Leaked(string(out), secret); ok {
						t.Errorf("%s still holds %q", out, f)
					}
					if !json.Valid(out) {
						t.Errorf("not JSON after redaction: %s", out)
					}
					if !strings.Contains(string(out), Marker) || !strings.HasSuffix(string(out), `","n":1}`) {
						t.Errorf("redacted to %s", out)
					}
				})
			}
		}
	}
}

// indexMatches is what Matcher.find must find, the plain way: every
// occurrence of every Needle by bytes.Index, extended over its tail.
func indexMatches(mt *Matcher, text []byte) []span {
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
			out, _ := Bytes([]byte(tc.in), ns, nil)
			if string(out) != tc.want {
				t.Errorf("Bytes(%s) = %s, want %s", tc.in, out, tc.want)
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
	out, n := Bytes([]byte(in), ns, nil)
	if n != 1 || string(out) != `["[redacted]","[redacted]"]` {
		t.Errorf("Bytes(%s) = %s, %d", in, out, n)
	}
}

func TestShortSecretsAreNotSearched(t *testing.T) {
	ns := needlesOf("a", "admin", "1234567")
	if ns != nil {
		t.Fatalf("needles for values under %d bytes: %v", MinSecretLen, ns.needles)
	}
	// A short user name still leaves "user:password" to search for.
	ns = needlesOf("a:hunter2")
	body := []byte(`{"auth":"Basic ` + base64.StdEncoding.EncodeToString([]byte("a:hunter2")) + `"}`)
	out, n := Bytes(body, ns, nil)
	if n != 1 || string(out) != `{"auth":"Basic [redacted]"}` {
		t.Errorf("got %s, %d", out, n)
	}
}

func TestAnAnswerWithoutSecretsIsLeftAsItIs(t *testing.T) {
	ns := needlesOf("tok/en+Z9=q")
	for _, body := range []string{`{"a":"b"}`, `{"a":"b\/c%2F"}`, `text`, ``} {
		in := []byte(body)
		out, n := Bytes(in, ns, nil)
		if n != 0 || string(out) != body || len(in) > 0 && &out[0] != &in[0] {
			t.Errorf("Bytes(%q) = %q, %d: changed or copied", body, out, n)
		}
	}
	if raceEnabled {
		return // the race detector drops pooled views at random
	}
	allocs := testing.AllocsPerRun(100, func() { Bytes([]byte(`{"a":"b\/c%2F and more text"}`), ns, nil) })
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
			if !IdentityHeader(tc.header) {
				t.Fatalf("%s is not a credential header", tc.header)
			}
			ns := NewMatcher(AppendHeaderSecrets(nil, tc.header, tc.value))
			for _, s := range tc.secrets {
				out, n := Bytes([]byte(`{"echo":"`+s+`"}`), nil, ns)
				if n == 0 || strings.Contains(string(out), s) {
					t.Errorf("%q not redacted: %s", s, out)
				}
			}
		})
	}
	for _, name := range []string{"Accept-Language", "X-Tenant", "X-Request-Source"} {
		if IdentityHeader(name) {
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
			// Wu-Manber finds what a bytes.Index per Needle finds.
			got, want := ns.find(nil, []byte(body)), indexMatches(ns, []byte(body))
			if len(got) > 0 && len(want) > 0 {
				got, want = mergeSpans(got), mergeSpans(want)
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("in %q, Wu-Manber finds %v, bytes.Index %v", body, got, want)
			}
		}
		out, n := Bytes([]byte(body), ns, nil)
		if n == 0 && string(out) != body {
			t.Fatalf("nothing found, yet changed: %q -> %q", body, out)
		}
		if valid, _ := jsontape.Check([]byte(body)); valid {
			if ok, _ := jsontape.Check(out); !ok || json.Valid([]byte(body)) && !json.Valid(out) {
				t.Fatalf("%q redacted to %q: not JSON", body, out)
			}
		}
		// A secret that overlaps the marker could be made again by it.
		if n > 0 && !strings.ContainsAny(secret, "[]") && !strings.Contains(Marker, secret) {
			if again, m := Bytes(out, ns, nil); m != 0 {
				t.Fatalf("%q redacted to %q still holds the secret %q (%q)", body, out, secret, again)
			}
		}
	})
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
				Bytes(tc.body, ns, nil)
			}
		})
	}
}
