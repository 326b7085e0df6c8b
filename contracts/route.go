package contracts

import (
	"net/url"
	"strings"
)

// Routes: in transparent mode and under Envoy ext_proc, a request to a
// tool's own legacy route (its binding's method and path) is a call of that
// tool. A placeholder matches exactly one path segment.

// segment kinds, from least to most specific.
const (
	segPlaceholder = iota // {arg}
	segMixed              // prefix{arg}suffix
	segLiteral            // literal
)

func (s pathSegment) kind() int {
	switch {
	case len(s.parts) == 1 && s.parts[0].arg != "":
		return segPlaceholder
	case firstArg(s) != "":
		return segMixed
	default:
		return segLiteral
	}
}

func (s pathSegment) literal() string {
	var b strings.Builder
	for _, p := range s.parts {
		b.WriteString(p.literal)
	}
	return b.String()
}

// SplitPath splits an escaped request path into its escaped segments
// ("/a/b%2Fc" -> ["a", "b%2Fc"]). ok is false for a path that does not
// start with "/".
func SplitPath(escaped string) ([]string, bool) {
	if !strings.HasPrefix(escaped, "/") {
		return nil, false
	}
	return strings.Split(escaped[1:], "/"), true
}

// MatchPath matches escaped request path segments against the binding's
// path template and returns the placeholder values, unescaped. Literal
// segments compare unescaped, so "/a%2Db" matches a literal "a-b".
func (b *Binding) MatchPath(segs []string) (map[string]string, bool) {
	if len(segs) != len(b.segments) {
		return nil, false
	}
	var vals map[string]string
	for i, tmpl := range b.segments {
		got, err := url.PathUnescape(segs[i])
		if err != nil {
			return nil, false
		}
		switch tmpl.kind() {
		case segLiteral:
			want, err := url.PathUnescape(tmpl.literal())
			if err != nil || got != want {
				return nil, false
			}
		default:
			v, ok := matchParts(tmpl.parts, got)
			if !ok {
				return nil, false
			}
			if vals == nil {
				vals = map[string]string{}
			}
			for k, s := range v {
				vals[k] = s
			}
		}
	}
	return vals, true
}

// matchParts matches one unescaped segment against literal and placeholder
// parts. Placeholders are separated by literals (compileBinding ensures it),
// so each placeholder takes the text up to the next literal.
func matchParts(parts []pathPart, s string) (map[string]string, bool) {
	vals := map[string]string{}
	for i, p := range parts {
		if p.arg == "" {
			if !strings.HasPrefix(s, p.literal) {
				return nil, false
			}
			s = s[len(p.literal):]
			continue
		}
		var v string
		if i+1 < len(parts) {
			next := parts[i+1].literal
			j := strings.Index(s, next)
			if j < 0 {
				return nil, false
			}
			v, s = s[:j], s[j:]
		} else {
			v, s = s, ""
		}
		if v == "" {
			return nil, false
		}
		vals[p.arg] = v
	}
	return vals, s == ""
}

// MoreSpecific reports whether route a wins over route b for a request both
// match: at every segment a is at least as specific, and somewhere more.
func MoreSpecific(a, b *Binding) bool {
	if len(a.segments) != len(b.segments) {
		return false
	}
	strictly := false
	for i := range a.segments {
		ka, kb := a.segments[i].kind(), b.segments[i].kind()
		if ka < kb {
			return false
		}
		if ka > kb {
			strictly = true
		}
	}
	return strictly
}

// LiteralRoute returns, for a route without placeholders, its method and
// unescaped path segments as one string; ok is false for a route with
// placeholders. Two literal routes are Ambiguous exactly when their keys
// are equal, so a policy's many literal routes are checked with a map
// rather than pair by pair.
func (b *Binding) LiteralRoute() (key string, ok bool) {
	var k strings.Builder
	k.WriteString(b.method)
	for _, s := range b.segments {
		if s.kind() != segLiteral {
			return "", false
		}
		lit, _ := url.PathUnescape(s.literal())
		k.WriteString(" /")
		k.WriteString(lit)
	}
	return k.String(), true
}

// Ambiguous reports whether two routes can match the same request with
// neither more specific than the other: a request would not know its tool.
func Ambiguous(a, b *Binding) bool {
	if a.method != b.method || len(a.segments) != len(b.segments) {
		return false
	}
	for i := range a.segments {
		sa, sb := a.segments[i], b.segments[i]
		if sa.kind() == segLiteral && sb.kind() == segLiteral {
			la, _ := url.PathUnescape(sa.literal())
			lb, _ := url.PathUnescape(sb.literal())
			if la != lb {
				return false // they never match the same path
			}
		}
		if sa.kind() == segLiteral && sb.kind() == segMixed {
			if _, ok := matchParts(sb.parts, sa.literal()); !ok {
				return false
			}
		}
		if sb.kind() == segLiteral && sa.kind() == segMixed {
			if _, ok := matchParts(sa.parts, sb.literal()); !ok {
				return false
			}
		}
	}
	return !MoreSpecific(a, b) && !MoreSpecific(b, a)
}
