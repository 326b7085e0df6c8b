package contracts

// The idempotency key's one definition. The key check the gateway applies
// (ValidIdempotencyKey) and the published schema of the idempotency_key
// argument (idempotencyKeySchema, which agents and their frameworks check
// before calling) are written from the same rule, so a key the schema
// accepts is never refused by the check, nor the other way round.

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
