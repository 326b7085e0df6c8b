package policy

import (
	"net/http"
	"strings"

	"github.com/toolgate/toolgate/contracts"
)

// Allows reports whether caller may call tool: a listed caller by its tool
// list ("*" is every tool), anyone else by access.default.
func (a *Access) Allows(caller, tool string) bool {
	c, ok := a.Callers[caller]
	if !ok {
		return a.DefaultAllow
	}
	for _, t := range c.Tools {
		if t == "*" || t == tool {
			return true
		}
	}
	return false
}

// WidensImplicitly says how access a, replacing prev on reload, would let
// callers do more without the policy saying so, or returns "". That is
// what a file read while it was being written looks like when the cut
// falls before the access section, or before its default: nothing written
// means "allow". It reports a implying access.default allow where prev
// denied unlisted callers, and a having no access section at all where
// prev listed callers. Writing access.default: allow says it on purpose.
func (a *Access) WidensImplicitly(prev *Access) string {
	if !a.DefaultAllow || a.DefaultSet {
		return ""
	}
	switch {
	case !prev.DefaultAllow:
		return "access.default is not set, so unlisted callers would be allowed, where the running policy denies them"
	case len(a.Callers) == 0 && len(a.Identities) == 0 && len(prev.Callers) > 0:
		return "the access section is missing, so every caller would be allowed every tool, where the running policy lists callers"
	}
	return ""
}

// Identify returns the caller named by a request's headers: the caller
// header, or with caller_from xfcc the SPIFFE ID of the last element of
// Envoy's x-forwarded-client-cert mapped through access.identities. An
// absent, malformed or unmapped identity is "" (an unlisted caller).
//
// This is the one place toolgate reads x-forwarded-client-cert: the HTTP,
// MCP and transparent fronts and the ext_proc adapter all identify callers
// through it.
func (a *Access) Identify(s Server, h http.Header) string {
	if s.CallerFrom == CallerFromXFCC {
		id := XFCCLinesURI(h.Values("X-Forwarded-Client-Cert"))
		if id == "" {
			return ""
		}
		return a.Identities[id]
	}
	// Two values are a spoofing attempt or a misconfigured hop: neither is
	// trusted.
	vals := h.Values(s.CallerHeader)
	if len(vals) != 1 || len(vals[0]) > 128 {
		return ""
	}
	return vals[0]
}

// maxXFCCBytes bounds the x-forwarded-client-cert lines of one request
// together: a chain of a few certificates is far smaller.
const maxXFCCBytes = 16 << 10

// XFCCLinesURI returns the URI field of the last element of the
// x-forwarded-client-cert header, given as all its header lines in order.
// Several lines are one comma-separated list (RFC 9110, section 5.3), so
// the last element of the last line wins, as it does within one line. Each
// line must be well formed on its own (a quoted value never spans two
// lines); one malformed line, or more than 16 KiB in all, names nobody.
func XFCCLinesURI(lines []string) string {
	total := 0
	for _, l := range lines {
		total += len(l)
	}
	if len(lines) == 0 || total > maxXFCCBytes {
		return ""
	}
	// Earlier lines only have to be well formed: their elements come
	// before the last one.
	for _, l := range lines[:len(lines)-1] {
		if _, ok := splitXFCC(l, ','); !ok {
			return ""
		}
	}
	return XFCCURI(lines[len(lines)-1])
}

// XFCCURI returns the URI field of the last element of an
// x-forwarded-client-cert value (the certificate of the hop nearest to
// toolgate), or "" when the value is malformed or has no URI. Values may be
// double-quoted, with backslash escapes, and contain , ; = inside quotes,
// as Envoy writes them.
func XFCCURI(v string) string {
	if v == "" || len(v) > maxXFCCBytes {
		return ""
	}
	elems, ok := splitXFCC(v, ',')
	if !ok || len(elems) == 0 {
		return ""
	}
	pairs, ok := splitXFCC(elems[len(elems)-1], ';')
	if !ok {
		return ""
	}
	uri := ""
	for _, p := range pairs {
		k, val, found := strings.Cut(p, "=")
		if !found {
			return ""
		}
		if !strings.EqualFold(strings.TrimSpace(k), "URI") {
			continue
		}
		val, ok := unquoteXFCC(strings.TrimSpace(val))
		if !ok {
			return ""
		}
		uri = val
	}
	return uri
}

// splitXFCC splits s at sep outside double quotes.
func splitXFCC(s string, sep byte) ([]string, bool) {
	var out []string
	inQuote, start := false, 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\' && inQuote:
			i++
		case c == '"':
			inQuote = !inQuote
		case c == sep && !inQuote:
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	if inQuote {
		return nil, false
	}
	return append(out, s[start:]), true
}

func unquoteXFCC(v string) (string, bool) {
	if !strings.HasPrefix(v, `"`) {
		return v, !strings.Contains(v, `"`)
	}
	return contracts.Unquote(v, false)
}
