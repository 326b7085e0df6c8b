package proxy

import (
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Passthrough is how a request under a server.passthrough prefix goes to
// its upstream: untouched, with no call and no envelope, but for the
// identity headers, which are toolgate's business and never reach a
// backend (DESIGN section 7, "Callers"), and for the upstream's static
// headers, set over the request's. Transparent mode forwards such a
// request itself; the Envoy external processor tells Envoy to.
type Passthrough struct {
	Upstream string
	// Strip are the identity headers, by canonical name: the caller
	// header and X-Forwarded-Client-Cert.
	Strip []string
	// Header are the upstream's static headers.
	Header http.Header

	up *upstreamRuntime // its credential (Decorate)
}

func newPassthroughRule(up *upstreamRuntime, callerHeader string) Passthrough {
	return Passthrough{
		Upstream: up.cfg.Name,
		Strip:    []string{http.CanonicalHeaderKey(callerHeader), "X-Forwarded-Client-Cert"},
		Header:   up.cfg.Headers,
		up:       up,
	}
}

// Strips reports whether a request header (its name in any case) is one
// the passthrough removes.
func (p *Passthrough) Strips(name string) bool {
	for _, s := range p.Strip {
		if strings.EqualFold(s, name) {
			return true
		}
	}
	return false
}

// Rewrite applies the passthrough to the header of the request it
// forwards.
func (p *Passthrough) Rewrite(h http.Header) {
	for _, name := range p.Strip {
		h.Del(name)
	}
	for k, v := range p.Header {
		h[k] = v
	}
}

// passthrough is a server.passthrough prefix with the reverse proxy that
// serves it in transparent mode.
type passthrough struct {
	Passthrough
	prefix string
	proxy  *httputil.ReverseProxy
	up     *upstreamRuntime
}

func newPassthrough(prefix string, up *upstreamRuntime, callerHeader string) passthrough {
	p := passthrough{Passthrough: newPassthroughRule(up, callerHeader), prefix: prefix, up: up}
	target := up.cfg.URL
	p.proxy = &httputil.ReverseProxy{
		// Streaming both ways: the request goes on as it came.
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = target.Host
			p.Rewrite(pr.Out.Header)
		},
		Transport:     up.passthroughTransport(),
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, _ error) {
			w.WriteHeader(http.StatusBadGateway)
		},
	}
	return p
}

// passthroughFor returns the passthrough whose prefix covers a request's
// escaped path (the longest prefix winning), or nil.
//
// The path is checked once (cleanPassthroughPath) and the prefix matched,
// on segment boundaries, against the decoded path that check returns: the
// path forwarded is the request's own, which decodes to exactly that path
// with the same segments, so the backend serves the path that was matched.
// A path the check refuses is never passed through; it can still be a
// tool's call (whose backend path toolgate builds itself), and is otherwise
// not_found.
func (r *router) passthroughFor(escapedPath string) *passthrough {
	if len(r.passthrough) == 0 {
		return nil
	}
	path, ok := cleanPassthroughPath(escapedPath)
	if !ok {
		return nil
	}
	for i := range r.passthrough {
		p := &r.passthrough[i]
		if path == p.prefix || strings.HasPrefix(path, strings.TrimSuffix(p.prefix, "/")+"/") {
			return p
		}
	}
	return nil
}

// cleanPassthroughPath decodes an escaped request path that is safe to
// forward as it is, and refuses one that a backend could read as another
// path than toolgate matched: an encoded dot (%2e, so "%2e%2e" cannot
// climb out of the prefix at the backend), an encoded slash or backslash
// (%2f, %5c: a segment toolgate sees as one may be two to the backend), a
// backslash, a control character, a malformed escape, "." or
// ".." segments (also with ;parameters, which some servers strip), bytes
// that are not UTF-8 (an overlong "%c0%ae" is a dot to lax decoders), and
// characters that Unicode compatibility normalisation turns into a dot
// segment, a slash or a backslash ("．．", "／").
func cleanPassthroughPath(escaped string) (string, bool) {
	if !strings.HasPrefix(escaped, "/") || strings.IndexByte(escaped, '\\') >= 0 {
		return "", false
	}
	for i := 0; i < len(escaped); i++ {
		if escaped[i] != '%' {
			continue
		}
		if i+2 >= len(escaped) {
			return "", false
		}
		hi, lo := unhex(escaped[i+1]), unhex(escaped[i+2])
		b := hi<<4 | lo
		if hi > 15 || lo > 15 || b == '.' || b == '/' || b == '\\' || b < 0x20 || b == 0x7f {
			return "", false
		}
		i += 2
	}
	path, err := url.PathUnescape(escaped)
	if err != nil || !utf8.ValidString(path) || hasDotSegment(path) {
		return "", false
	}
	for i := 0; i < len(path); i++ {
		if c := path[i]; c < 0x20 || c == 0x7f {
			return "", false // raw or encoded: never forwarded
		}
	}
	for i := 0; i < len(path); i++ {
		if path[i] >= utf8.RuneSelf {
			// Some backends normalise (NFKC) before routing.
			n := norm.NFKC.String(path)
			if strings.Count(n, "/") != strings.Count(path, "/") || strings.IndexByte(n, '\\') >= 0 || hasDotSegment(n) {
				return "", false
			}
			break
		}
	}
	return path, true
}

// hasDotSegment reports whether a decoded path has a "." or ".." segment,
// also with ;parameters.
func hasDotSegment(path string) bool {
	for seg := range strings.SplitSeq(path[1:], "/") {
		if name, _, _ := strings.Cut(seg, ";"); name == "." || name == ".." {
			return true
		}
	}
	return false
}

// unhex is the value of a hex digit, or 16 for any other byte.
func unhex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10
	}
	return 16
}
