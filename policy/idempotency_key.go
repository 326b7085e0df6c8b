package policy

import (
	"strings"

	"github.com/toolgate/toolgate/contracts"
)

// ResolveIdempotencyKey is a side-effecting call's idempotency key, from
// the Idempotency-Key header (a bare token or a quoted string: the same
// key) and the idempotency_key argument. Both may be given only if they
// agree. Without a key, the reason says why (missing, malformed, or
// conflicting); a key is valid as contracts.ValidIdempotencyKey says.
func ResolveIdempotencyKey(header string, arg any, hasArg bool) (string, contracts.Reason) {
	header = strings.TrimSpace(header)
	var fromHeader string
	if header != "" {
		fromHeader = header
		if strings.HasPrefix(header, `"`) {
			k, ok := unquote(header, true)
			if !ok {
				return "", contracts.ReasonKeyMalformed
			}
			fromHeader = k
		}
	}
	var fromArg string
	if hasArg {
		s, ok := arg.(string)
		if !ok {
			return "", contracts.ReasonKeyMalformed
		}
		fromArg = s
	}
	key := fromHeader
	switch {
	case header != "" && hasArg && fromArg != fromHeader:
		return "", contracts.ReasonKeyConflict
	case header == "" && !hasArg:
		return "", contracts.ReasonKeyMissing
	case header == "":
		key = fromArg
	}
	if !contracts.ValidIdempotencyKey(key) {
		return "", contracts.ReasonKeyMalformed
	}
	return key, ""
}
