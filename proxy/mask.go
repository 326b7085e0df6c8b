package proxy

import (
	"bytes"
	"encoding/json"
	"net/url"
	"slices"
	"strings"
)

// SecretMask is a value to hide in a dry run's request, and what stands
// for it: `toolgate try` shows a ${VAR} value as ${VAR}, the admin
// console as ***.
type SecretMask struct {
	Value, As string
}

// MinMaskedSecret is the length from which a value is masked by
// MaskRequest. Shorter values (a region, a version, a flag) are no
// secrets, and replacing them would garble the output.
const MinMaskedSecret = 4

// MaskRequest masks the values of masks in a dry run's URL and request
// (DryRunResult.URL and Request): in the request target, the header
// values (but those toolgate writes itself, whatever the policy says, for
// a toolgate of version) and the body. The upstream's credential is
// masked by the dry run itself; this is for the ${VAR} values a policy
// puts in headers, paths, queries and bodies. The answer needs no mask:
// it is the envelope the agent gets, which never holds a secret toolgate
// has.
func MaskRequest(rawURL string, req []byte, masks []SecretMask, version string) (string, []byte) {
	// The fields toolgate writes itself (with the default values of
	// staticHeader, core.go): no value is masked in them, so that a
	// variable whose value is "toolgate" or "application/json" does not
	// mask them.
	own := map[string]bool{
		"Content-Length": true, "X-Request-Id": true, "User-Agent: toolgate/" + version: true,
		"Accept: application/json": true, "Content-Type: application/json": true,
		"Content-Type: application/x-www-form-urlencoded": true,
	}
	r := masker(masks)
	head, body, _ := strings.Cut(string(req), "\n\n")
	lines := strings.Split(head, "\n")
	if method, rest, ok := strings.Cut(lines[0], " "); ok {
		if target, proto, ok := strings.Cut(rest, " "); ok {
			lines[0] = method + " " + r.Replace(target) + " " + proto
		}
	}
	for i, l := range lines[1:] {
		name, value, ok := strings.Cut(l, ": ")
		if !ok || own[name] || own[l] {
			continue
		}
		lines[i+1] = name + ": " + r.Replace(value)
	}
	return r.Replace(rawURL), []byte(strings.Join(lines, "\n") + "\n\n" + r.Replace(body))
}

// masker replaces every value of masks (of MinMaskedSecret bytes or more)
// with what stands for it: as written, and as JSON, a URL path and a
// query or form encode it. The longest values go first, so a value that
// holds another is masked whole.
func masker(masks []SecretMask) *strings.Replacer {
	type pair struct{ from, to string }
	var pairs []pair
	for _, m := range masks {
		v := m.Value
		if len(v) < MinMaskedSecret {
			continue
		}
		quoted, _ := json.Marshal(v)
		var plain bytes.Buffer
		enc := json.NewEncoder(&plain)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(v)
		forms := []string{v, string(quoted[1 : len(quoted)-1]), strings.TrimSpace(plain.String()), url.PathEscape(v), url.QueryEscape(v)}
		forms[2] = forms[2][1 : len(forms[2])-1]
		for _, f := range forms {
			pairs = append(pairs, pair{f, m.As})
		}
	}
	slices.SortFunc(pairs, func(a, b pair) int {
		if d := len(b.from) - len(a.from); d != 0 {
			return d
		}
		return strings.Compare(a.from, b.from)
	})
	args := make([]string, 0, 2*len(pairs))
	for _, p := range pairs {
		args = append(args, p.from, p.to)
	}
	return strings.NewReplacer(args...)
}
