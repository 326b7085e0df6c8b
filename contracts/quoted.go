package contracts

import "strings"

// Unquote reads a double-quoted header value: the one parser of the two
// quoted forms toolgate reads. With sfString (an RFC 8941 sf-string, as in
// Idempotency-Key) a backslash escapes only a quote or a backslash;
// otherwise (Envoy's x-forwarded-client-cert) it escapes any byte. An
// unescaped quote inside, or a missing closing quote, is malformed.
func Unquote(v string, sfString bool) (string, bool) {
	if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' {
		return "", false
	}
	var b strings.Builder
	inner := v[1 : len(v)-1]
	for i := 0; i < len(inner); i++ {
		c := inner[i]
		switch c {
		case '\\':
			if i+1 >= len(inner) || sfString && inner[i+1] != '"' && inner[i+1] != '\\' {
				return "", false
			}
			i++
			c = inner[i]
		case '"':
			return "", false
		}
		b.WriteByte(c)
	}
	return b.String(), true
}
