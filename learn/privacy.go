package learn

import (
	"mime"
	"net/url"
	"strings"
)

// This file decides what learning mode may keep. The rule is that nothing
// learned is a request or answer value: names of keys, parameters and path
// segments are kept only when they look like names rather than data, and
// the one kind of value kept, the code of a code-named field, only when it
// looks like a code.

// secretPrefixes start well-known credential formats (API keys, access
// tokens, JWTs, authorization schemes).
var secretPrefixes = []string{
	"sk_", "sk-", "pk_", "rk_", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "glpat-",
	"xoxb-", "xoxp-", "xoxa-", "xoxs-", "AKIA", "ASIA", "AIza", "eyJ", "npm_", "SG.", "shpat_", "hf_",
	"Bearer ", "Basic ", "bearer ", "basic ",
}

// secretLike reports whether s looks like a credential: a known prefix, a
// long token mixing letters and digits, or a long run of hex.
func secretLike(s string) bool {
	for _, p := range secretPrefixes {
		if strings.HasPrefix(s, p) && len(s) >= len(p)+6 {
			return true
		}
	}
	if len(s) >= 20 && hasLetter(s) && hasDigit(s) {
		return true
	}
	return len(s) >= 32 && isHex(s)
}

// idLike reports whether a path segment or a key (unescaped) looks like
// data rather than a name: a number, a UUID, a hex string, a token with a
// run of four digits or with three digits in eight characters or more,
// anything longer than 64 characters or with characters a name does not
// use (an e-mail address, a phrase), or a secret.
func idLike(s string) bool {
	switch {
	case s == "":
		return false
	case len(s) > 64, secretLike(s):
		return true
	case allDigits(s), isUUID(s):
		return true
	case isHex(s) && (len(s) >= 16 || len(s) >= 8 && hasDigit(s) && hasLetter(s)):
		return true
	case maxDigitRun(s) >= 4:
		return true
	case len(s) >= 8 && digits(s) >= 3 && hasLetter(s):
		return true
	}
	for i := 0; i < len(s); i++ {
		if !nameChar(s[i]) {
			return true
		}
	}
	return false
}

// nameChar is a character of names: letters, digits and _ . ~ : -.
func nameChar(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '_' || c == '.' || c == '~' || c == ':' || c == '-'
}

// maxCodeLen is the longest value kept as a code.
const maxCodeLen = 32

// codeLike reports whether a value of a code-named field looks like a code
// (E_NOPERM, not_found, RateLimited) rather than data: at most 32
// characters, starting with a letter, of letters, digits and _ . : -, no
// run of more than three digits, and neither secret- nor token-like.
func codeLike(s string) bool {
	if len(s) == 0 || len(s) > maxCodeLen || !isLetter(s[0]) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !nameChar(c) || c == '~' {
			return false
		}
	}
	if maxDigitRun(s) > 3 || secretLike(s) {
		return false
	}
	// A long mix of upper case, lower case and digits is a random token.
	return !(len(s) >= 12 && hasDigit(s) && hasUpper(s) && hasLower(s))
}

// codeFields are the field names (lower case, without _ and -) whose
// string values may be kept as codes.
var codeFields = map[string]bool{
	"code": true, "errorcode": true, "errcode": true, "error": true, "err": true, "errno": true,
	"retcode": true, "resultcode": true, "statuscode": true, "status": true, "state": true,
	"result": true, "reason": true, "type": true, "kind": true, "level": true, "severity": true,
}

// errorFields are the top-level fields of a 2xx answer whose presence
// with a value that is not a success says the answer is an error.
var errorFields = map[string]bool{
	"code": true, "errorcode": true, "errcode": true, "error": true, "err": true, "errno": true,
	"retcode": true, "resultcode": true, "status": true, "result": true,
}

// statusFields are error fields that also carry successes in plain words
// ("status": "active"): only error words make them an error.
var statusFields = map[string]bool{"status": true, "result": true}

// normalizeField lower-cases a field name and drops _ and -, so
// error_code, errorCode and Error-Code are one name.
func normalizeField(name string) string {
	if len(name) > maxCodeLen {
		return ""
	}
	b := make([]byte, 0, len(name))
	for i := 0; i < len(name); i++ {
		switch c := name[i]; {
		case c == '_' || c == '-':
		case 'A' <= c && c <= 'Z':
			b = append(b, c+'a'-'A')
		default:
			b = append(b, c)
		}
	}
	return string(b)
}

// successValues are the values of an error field that mean success.
var successValues = map[string]bool{
	"": true, "0": true, "00": true, "000": true, "200": true, "ok": true, "success": true, "succeeded": true,
	"successful": true, "true": true, "false": true, "none": true, "null": true, "done": true, "created": true,
	"accepted": true,
}

// errorWords mark a status or result value as an error.
var errorWords = []string{"error", "fail", "denied", "reject", "invalid", "forbidden", "unauthorized", "notfound", "not_found"}

// errorValue reports whether a string in error field name says the answer
// is an error.
func errorValue(name, v string) bool {
	lv := strings.ToLower(strings.TrimSpace(v))
	if successValues[lv] {
		return false
	}
	if statusFields[normalizeField(name)] {
		for _, w := range errorWords {
			if strings.Contains(lv, w) {
				return true
			}
		}
		return false
	}
	return true
}

// mediaType returns the media type of a Content-Type value, lower case, or
// "other" when it is not a plain type/subtype (parameters, which may carry
// anything, are never kept).
func mediaType(v string) string {
	if v == "" {
		return ""
	}
	mt, _, err := mime.ParseMediaType(v)
	if err != nil || len(mt) > 64 {
		return "other"
	}
	typ, sub, ok := strings.Cut(mt, "/")
	if !ok || typ == "" || sub == "" || idLike(typ) || idLike(strings.ReplaceAll(sub, "+", "-")) {
		return "other"
	}
	return mt
}

func isJSONMedia(mt string) bool {
	return mt == "application/json" || strings.HasSuffix(mt, "+json")
}

// valueType is the type of a query or path value: integer (canonical, no
// leading zeros, so it survives a round trip through a number), number,
// boolean or string.
func valueType(v string) string {
	switch {
	case v == "true" || v == "false":
		return "boolean"
	case canonicalInt(v):
		return "integer"
	case jsonNumber(v):
		return "number"
	}
	return "string"
}

func canonicalInt(v string) bool {
	s := strings.TrimPrefix(v, "-")
	if s == "" || len(s) > 15 || !allDigits(s) {
		return false
	}
	return s == "0" && v == "0" || s[0] != '0'
}

func jsonNumber(v string) bool {
	s := strings.TrimPrefix(v, "-")
	if s == "" || len(s) > 24 || s[0] == '.' || (s[0] == '0' && len(s) > 1 && s[1] != '.' && s[1] != 'e' && s[1] != 'E') {
		return false
	}
	dot, exp := false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case '0' <= c && c <= '9':
		case c == '.' && !dot && !exp && i+1 < len(s):
			dot = true
		case (c == 'e' || c == 'E') && !exp && i > 0 && i+1 < len(s):
			exp = true
			if s[i+1] == '+' || s[i+1] == '-' {
				i++
				if i+1 >= len(s) {
					return false
				}
			}
		default:
			return false
		}
	}
	return true
}

// unescape is url.PathUnescape, or s itself when it is not valid.
func unescape(s string) string {
	if u, err := url.PathUnescape(s); err == nil {
		return u
	}
	return s
}

func isLetter(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }

func hasLetter(s string) bool {
	return strings.IndexFunc(s, func(r rune) bool { return r < 128 && isLetter(byte(r)) }) >= 0
}
func hasDigit(s string) bool { return strings.ContainsAny(s, "0123456789") }
func hasUpper(s string) bool {
	return strings.IndexFunc(s, func(r rune) bool { return 'A' <= r && r <= 'Z' }) >= 0
}
func hasLower(s string) bool {
	return strings.IndexFunc(s, func(r rune) bool { return 'a' <= r && r <= 'z' }) >= 0
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func digits(s string) int {
	n := 0
	for i := 0; i < len(s); i++ {
		if '0' <= s[i] && s[i] <= '9' {
			n++
		}
	}
	return n
}

func maxDigitRun(s string) int {
	best, run := 0, 0
	for i := 0; i < len(s); i++ {
		if '0' <= s[i] && s[i] <= '9' {
			run++
			best = max(best, run)
		} else {
			run = 0
		}
	}
	return best
}

func isHex(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if i == 8 || i == 13 || i == 18 || i == 23 {
			if s[i] != '-' {
				return false
			}
		} else if !isHex(s[i : i+1]) {
			return false
		}
	}
	return true
}
