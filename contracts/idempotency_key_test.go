package contracts

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestIdempotencyKeySchemaAgreesWithTheCheck: every key the published
// schema of idempotency_key accepts, the key check accepts, and every key it
// refuses, the check refuses. An agent whose framework validates arguments
// against the schema is never told "malformed key" by toolgate for a key the
// schema let through.
func TestIdempotencyKeySchemaAgreesWithTheCheck(t *testing.T) {
	s, err := CompileSchema(map[string]any{"type": "object"})
	if err != nil {
		t.Fatal(err)
	}
	published, err := publishSchema(s, true)
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := json.Unmarshal(published, &doc); err != nil {
		t.Fatal(err)
	}
	schema, err := CompileSchema(doc)
	if err != nil {
		t.Fatal(err)
	}
	keys := []struct {
		name  string
		key   string
		valid bool
	}{
		{"a letter", "a", true},
		{"a UUID", "6f1c2b9e-8d4a-4c1e-9b7f-2a5d3e8c1f00", true},
		{"inner spaces", "order 42 retry", true},
		{"punctuation at both ends", "!~", true},
		{"255 characters", strings.Repeat("k", 255), true},
		{"empty", "", false},
		{"one space", " ", false},
		{"a leading space", " k1", false},
		{"a trailing space", "k1 ", false},
		{"256 characters", strings.Repeat("k", 256), false},
		{"a tab", "k\t1", false},
		{"a line feed", "k\n1", false},
		{"DEL", "k\x7f", false},
		{"non-ASCII", "clé", false},
	}
	for _, k := range keys {
		t.Run(k.name, func(t *testing.T) {
			if got := ValidIdempotencyKey(k.key); got != k.valid {
				t.Errorf("ValidIdempotencyKey(%q) = %v, want %v", k.key, got, k.valid)
			}
			schemaOK := schema.Validate(map[string]any{IdempotencyKeyArg: k.key}) == nil
			if schemaOK != k.valid {
				t.Errorf("the published schema says %v for %q, the key check %v", schemaOK, k.key, k.valid)
			}
		})
	}
}

func TestIdempotencyKeyParsing(t *testing.T) {
	tests := []struct {
		name   string
		header string
		arg    any
		hasArg bool
		want   string
		reason Reason
	}{
		{"bare token header", "abc-123", nil, false, "abc-123", ""},
		{"quoted string header is the same key", `"abc-123"`, nil, false, "abc-123", ""},
		{"quoted string with escapes", `"a\"b\\c"`, nil, false, `a"b\c`, ""},
		{"argument only", "", "k1", true, "k1", ""},
		{"header and argument agree", "k1", "k1", true, "k1", ""},
		{"header and argument differ", "k1", "k2", true, "", ReasonKeyConflict},
		{"missing", "", nil, false, "", ReasonKeyMissing},
		{"argument not a string", "", 42.0, true, "", ReasonKeyMalformed},
		{"empty argument", "", "", true, "", ReasonKeyMalformed},
		{"too long", strings.Repeat("k", 256), nil, false, "", ReasonKeyMalformed},
		{"255 characters", strings.Repeat("k", 255), nil, false, strings.Repeat("k", 255), ""},
		{"non-ASCII", "clé", nil, false, "", ReasonKeyMalformed},
		{"control character", "", "a\nb", true, "", ReasonKeyMalformed},
		{"unterminated quote", `"abc`, nil, false, "", ReasonKeyMalformed},
		{"bad escape", `"a\xb"`, nil, false, "", ReasonKeyMalformed},
		{"a quoted key with a leading space", `" k1"`, nil, false, "", ReasonKeyMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, reason := ResolveIdempotencyKey(tt.header, tt.arg, tt.hasArg)
			if got != tt.want || reason != tt.reason {
				t.Errorf("key = %q %q, want %q %q", got, reason, tt.want, tt.reason)
			}
		})
	}
}
