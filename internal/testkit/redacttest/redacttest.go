// Package redacttest holds what the tests of redaction share: the
// encodings a backend may echo a secret in, and the check that a text
// holds none of a secret's forms. The redactor's own tests (proxy/redact)
// and the end-to-end ones (proxy, proxy/extproc) use them.
package redacttest

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"strings"
)

// Encoding is one way a backend may echo a value.
type Encoding struct {
	Name string
	// Encode returns the text as it appears in a JSON answer's string
	// (already escaped for JSON where the encoding is a JSON one).
	Encode func(string) string
}

// Encodings are the encodings a backend may echo a value in, written here
// without the redactor's code.
var Encodings = []Encoding{
	{"verbatim", JSONInner},
	{"JSON with escaped slashes", func(s string) string { return strings.ReplaceAll(JSONInner(s), "/", `\/`) }},
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

// JSONInner is s as a JSON string's content (encoding/json's escaping).
func JSONInner(s string) string {
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

// Forms are the strings whose presence in a text means s leaked:
// s in each echo encoding, and the middle of its base64 at every byte
// alignment (what any base64 blob holding s contains, whatever surrounds
// it), also with escaped slashes and query-escaped.
func Forms(s string) []string {
	var forms []string
	for _, e := range Encodings {
		forms = append(forms, e.Encode(s))
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

// Leaked returns the first form of a secret that text holds.
func Leaked(text string, secrets ...string) (string, bool) {
	for _, s := range secrets {
		for _, f := range Forms(s) {
			if strings.Contains(text, f) {
				return f, true
			}
		}
	}
	return "", false
}
