package policy

import (
	"strings"
	"testing"

	"github.com/toolgate/toolgate/contracts"
)

func TestIdempotencyKeyParsing(t *testing.T) {
	tests := []struct {
		name   string
		header string
		arg    any
		hasArg bool
		want   string
		reason contracts.Reason
	}{
		{"bare token header", "abc-123", nil, false, "abc-123", ""},
		{"quoted string header is the same key", `"abc-123"`, nil, false, "abc-123", ""},
		{"quoted string with escapes", `"a\"b\\c"`, nil, false, `a"b\c`, ""},
		{"argument only", "", "k1", true, "k1", ""},
		{"header and argument agree", "k1", "k1", true, "k1", ""},
		{"header and argument differ", "k1", "k2", true, "", contracts.ReasonKeyConflict},
		{"missing", "", nil, false, "", contracts.ReasonKeyMissing},
		{"argument not a string", "", 42.0, true, "", contracts.ReasonKeyMalformed},
		{"empty argument", "", "", true, "", contracts.ReasonKeyMalformed},
		{"too long", strings.Repeat("k", 256), nil, false, "", contracts.ReasonKeyMalformed},
		{"255 characters", strings.Repeat("k", 255), nil, false, strings.Repeat("k", 255), ""},
		{"non-ASCII", "clé", nil, false, "", contracts.ReasonKeyMalformed},
		{"control character", "", "a\nb", true, "", contracts.ReasonKeyMalformed},
		{"unterminated quote", `"abc`, nil, false, "", contracts.ReasonKeyMalformed},
		{"bad escape", `"a\xb"`, nil, false, "", contracts.ReasonKeyMalformed},
		{"a quoted key with a leading space", `" k1"`, nil, false, "", contracts.ReasonKeyMalformed},
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
