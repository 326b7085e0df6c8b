package learn

import (
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// AuthStat says how a route's requests authenticated: the credentials
// they carried, by where they were (a header's name, with the scheme word
// of Authorization; a query parameter's name), never a value; and how the
// backend answered the requests that carried none. A route whose requests
// without a credential were answered 401 or 403 needs one, and the draft
// says so.
type AuthStat struct {
	// Credentials counts requests by the credential they carried:
	// "Authorization: Basic", "X-Gotify-Key", "?token".
	Credentials map[string]int64 `json:"credentials,omitempty"`
	// Without counts requests that carried no credential; DeniedWithout
	// those of them answered 401 or 403, DeniedWith the requests with a
	// credential answered so.
	Without       int64 `json:"without,omitempty"`
	DeniedWithout int64 `json:"denied_without,omitempty"`
	DeniedWith    int64 `json:"denied_with,omitempty"`
}

// maxCredentialNames bounds AuthStat.Credentials.
const maxCredentialNames = 8

// credentialName matches the header and query parameter names that carry
// a credential: X-Api-Key, X-Auth-Token, X-Gotify-Key, ?token, ?apikey,
// ?access_token.
var credentialName = regexp.MustCompile(`(?i)(^|[-_])(api[-_]?key|apikey|key|token|access[-_]?token|auth[-_]?token|secret|password|session)$`)

// authSchemes are the Authorization scheme words kept; another is named
// "other".
var authSchemes = []string{"Basic", "Bearer", "Token", "ApiKey", "Digest", "Key"}

// credentials names the credentials a request carries.
func credentials(h http.Header, query url.Values) []string {
	var out []string
	if v := h.Get("Authorization"); v != "" {
		scheme, _, _ := strings.Cut(strings.TrimSpace(v), " ")
		name := "Authorization: other"
		for _, s := range authSchemes {
			if strings.EqualFold(scheme, s) {
				name = "Authorization: " + s
			}
		}
		out = append(out, name)
	}
	for name := range h {
		if name != "Authorization" && credentialHolder(name) && len(name) <= 64 {
			out = append(out, http.CanonicalHeaderKey(name))
		}
	}
	for name := range query {
		if credentialHolder(name) && len(name) <= 64 {
			out = append(out, "?"+name)
		}
	}
	slices.Sort(out)
	return out
}

// CredentialParam reports whether a query parameter name is one a
// credential travels in (so it is no argument).
func CredentialParam(name string) bool { return credentialHolder(name) }

// credentialHolder reports whether a header or parameter name carries a
// credential: credentialName, but not the keys that are no secret
// (Idempotency-Key, Sec-WebSocket-Key).
func credentialHolder(name string) bool {
	l := strings.ToLower(name)
	return credentialName.MatchString(name) && !strings.Contains(l, "idempotency") && !strings.HasPrefix(l, "sec-")
}

// observe counts one answered request.
func (a *AuthStat) observe(names []string, status int) {
	denied := status == http.StatusUnauthorized || status == http.StatusForbidden
	if len(names) == 0 {
		a.Without++
		if denied {
			a.DeniedWithout++
		}
		return
	}
	if denied {
		a.DeniedWith++
	}
	for _, n := range names {
		a.count(n, 1)
	}
}

func (a *AuthStat) count(name string, n int64) {
	if _, ok := a.Credentials[name]; ok || len(a.Credentials) < maxCredentialNames {
		add(&a.Credentials, name, n)
	}
}

func (a *AuthStat) merge(src *AuthStat) {
	if src == nil {
		return
	}
	a.Without += src.Without
	a.DeniedWithout += src.DeniedWithout
	a.DeniedWith += src.DeniedWith
	for n, c := range src.Credentials {
		a.count(n, c)
	}
}

// validCredentialName says a name read from a summary file is one
// credentials could have written.
func validCredentialName(name string) bool {
	switch {
	case strings.HasPrefix(name, "Authorization: "):
		s := strings.TrimPrefix(name, "Authorization: ")
		return s == "other" || slices.Contains(authSchemes, s)
	case strings.HasPrefix(name, "?"):
		return len(name) <= 65 && credentialHolder(name[1:])
	}
	return len(name) <= 64 && credentialHolder(name) && name == http.CanonicalHeaderKey(name)
}
