package draft

import (
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/toolgate/toolgate/config/policydoc"
	"github.com/toolgate/toolgate/learn"
)

// authDraft is an upstream's drafted auth: the block (nil when the
// credential cannot be written as one), the variables it reads, and the
// comments that say what was learned.
type authDraft struct {
	block *yaml.Node
	env   []string
	notes []string
}

// draftAuth drafts an upstream's auth from its routes: the credential its
// requests carried most (by name), and the requests without one that the
// backend refused (401, 403). Nil when neither was seen.
func draftAuth(upstream string, routes []*learn.Route) *authDraft {
	total := learn.AuthStat{}
	var denied []string
	for _, r := range routes {
		for name, n := range r.Auth.Credentials {
			if total.Credentials == nil {
				total.Credentials = map[string]int64{}
			}
			total.Credentials[name] += n
		}
		total.Without += r.Auth.Without
		total.DeniedWithout += r.Auth.DeniedWithout
		if r.Auth.DeniedWithout > 0 {
			denied = append(denied, r.Method+" "+r.Path)
		}
	}
	if len(total.Credentials) == 0 && total.DeniedWithout == 0 {
		return nil
	}
	a := &authDraft{}
	if total.DeniedWithout > 0 {
		a.notes = append(a.notes, fmt.Sprintf("Learned: %s without a credential were answered 401 or 403 (%s).",
			countWord(total.DeniedWithout, "request"), strings.Join(limit(denied, 4), ", ")))
	}
	prefix := envPrefix(upstream)
	if len(total.Credentials) == 0 {
		a.notes = append(a.notes, "TODO: auth: no request carried a credential toolgate recognises by name; add the backend's (docs/policy.md, upstream credentials).")
		return a
	}
	names := byCount(total.Credentials)
	a.notes = append(a.notes, fmt.Sprintf("Learned: requests carried %s (names only: no value was kept).", strings.Join(names, ", ")))
	top := names[0]
	var block map[string]any
	switch scheme, isAuth := strings.CutPrefix(top, "Authorization: "); {
	case isAuth && scheme == "Basic":
		a.env = []string{prefix + "_USERNAME", prefix + "_PASSWORD"}
		block = map[string]any{"basic": map[string]any{"username": "${" + a.env[0] + "}", "password": "${" + a.env[1] + "}"}}
	case isAuth && scheme == "Bearer":
		a.env = []string{prefix + "_TOKEN"}
		block = map[string]any{"bearer": map[string]any{"token": "${" + a.env[0] + "}"}}
	case isAuth && scheme != "other" && scheme != "Digest":
		a.env = []string{prefix + "_API_KEY"}
		block = map[string]any{"api_key": map[string]any{"header": "Authorization", "scheme": scheme, "value": "${" + a.env[0] + "}"}}
	case isAuth:
		a.notes = append(a.notes, fmt.Sprintf("TODO: auth: the Authorization scheme (%s) has no toolgate form; forward each caller's own header instead: forward_headers: [Authorization].", scheme))
		return a
	case strings.HasPrefix(top, "?"):
		a.env = []string{prefix + "_API_KEY"}
		block = map[string]any{"api_key": map[string]any{"query": top[1:], "value": "${" + a.env[0] + "}"}}
	default:
		a.env = []string{prefix + "_API_KEY"}
		block = map[string]any{"api_key": map[string]any{"header": top, "value": "${" + a.env[0] + "}"}}
	}
	a.notes = append(a.notes, fmt.Sprintf("TODO: auth: confirm the credential and set %s (or use the _file form, docs/policy.md). toolgate sends it in place of the one each caller sends; to keep the backend's own check of each caller, drop auth and forward the callers' header instead (forward_headers).", strings.Join(a.env, ", ")))
	a.block = policydoc.Value(block, true)
	return a
}

// envPrefix is an upstream name as an environment variable prefix.
func envPrefix(name string) string {
	var b strings.Builder
	for _, c := range strings.ToUpper(name) {
		if c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
			b.WriteRune(c)
		} else {
			b.WriteByte('_')
		}
	}
	p := strings.Trim(b.String(), "_")
	if p == "" || p[0] >= '0' && p[0] <= '9' {
		p = "UPSTREAM_" + p
	}
	return p
}

func limit(ss []string, n int) []string {
	if len(ss) <= n {
		return ss
	}
	return append(append([]string(nil), ss[:n]...), "…")
}
