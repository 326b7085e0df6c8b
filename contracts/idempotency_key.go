package contracts

import "strings"

// The idempotency key, in one place: where a call's key comes from (the
// Idempotency-Key header or the idempotency_key argument, which
// TakeIdempotencyKeyArg takes out of the arguments before they are
// validated or bound), how the two are reconciled (ResolveIdempotencyKey),
// and what a key may be. The key check the gateway applies
// (ValidIdempotencyKey) and the published schema of the idempotency_key
// argument (idempotencyKeySchema, which agents and their frameworks check
// before calling) are written from the same rule, so a key the schema
// accepts is never refused by the check, nor the other way round. The key
// is then scoped (policy.IdempotencyKey) and claimed in a store; proxy's
// args.go and idempotency.go run these steps in the pipeline.

// IdempotencyKeyArg is the argument that carries the idempotency key for
// clients that cannot set headers. It is added to the published schema of
// side-effecting tools and stripped before validation and binding.
const IdempotencyKeyArg = "idempotency_key"

// TakeIdempotencyKeyArg removes the idempotency_key argument from the
// arguments of a side-effecting call, and returns it: it is toolgate's,
// never the backend's, and the schema checks the arguments without it.
// ok says the argument was given.
func TakeIdempotencyKeyArg(args map[string]any) (arg any, ok bool) {
	arg, ok = args[IdempotencyKeyArg]
	delete(args, IdempotencyKeyArg)
	return arg, ok
}

// MaxIdempotencyKeyLength is the longest idempotency key, in bytes (the
// key is ASCII, so also in characters).
const MaxIdempotencyKeyLength = 255

// idempotencyKeyPattern is the rule of ValidIdempotencyKey as a JSON
// Schema pattern: printable ASCII, neither starting nor ending with a space.
const idempotencyKeyPattern = `^[!-~]([ -~]*[!-~])?$`

// ValidIdempotencyKey reports whether k is an idempotency key: 1 to 255
// printable ASCII characters, no space at either end (a key forwarded in a
// header would lose it, and two keys that differ only there look the same).
func ValidIdempotencyKey(k string) bool {
	if len(k) < 1 || len(k) > MaxIdempotencyKeyLength || k[0] == ' ' || k[len(k)-1] == ' ' {
		return false
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x20 || k[i] > 0x7e {
			return false
		}
	}
	return true
}

// idempotencyKeySchema is the published schema of the idempotency_key
// argument of side-effecting tools.
func idempotencyKeySchema() map[string]any {
	return map[string]any{
		"type":        "string",
		"minLength":   1,
		"maxLength":   MaxIdempotencyKeyLength,
		"pattern":     idempotencyKeyPattern,
		"description": "A unique key for this action. Reuse the same key only to retry the same call; it runs at most once per key.",
	}
}

// ResolveIdempotencyKey is a side-effecting call's idempotency key, from
// the Idempotency-Key header (a bare token or a quoted string: the same
// key) and the idempotency_key argument. Both may be given only if they
// agree. Without a key, the reason says why (missing, malformed, or
// conflicting); a key is valid as ValidIdempotencyKey says.
func ResolveIdempotencyKey(header string, arg any, hasArg bool) (string, Reason) {
	header = strings.TrimSpace(header)
	var fromHeader string
	if header != "" {
		fromHeader = header
		if strings.HasPrefix(header, `"`) {
			k, ok := Unquote(header, true)
			if !ok {
				return "", ReasonKeyMalformed
			}
			fromHeader = k
		}
	}
	var fromArg string
	if hasArg {
		s, ok := arg.(string)
		if !ok {
			return "", ReasonKeyMalformed
		}
		fromArg = s
	}
	key := fromHeader
	switch {
	case header != "" && hasArg && fromArg != fromHeader:
		return "", ReasonKeyConflict
	case header == "" && !hasArg:
		return "", ReasonKeyMissing
	case header == "":
		key = fromArg
	}
	if !ValidIdempotencyKey(key) {
		return "", ReasonKeyMalformed
	}
	return key, ""
}
