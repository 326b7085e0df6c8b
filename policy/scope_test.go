package policy

import (
	"net/http"
	"strings"
	"testing"
)

func TestIdentityScope(t *testing.T) {
	key := []byte(strings.Repeat("k", 32))
	names := []string{"Authorization", "X-Tenant"}
	scope := func(h http.Header) string { return IdentityScope(key, names, h) }
	alice := scope(http.Header{"Authorization": {"Bearer alice"}})
	tests := []struct {
		name   string
		header http.Header
		key    []byte
		same   bool // as alice's scope
	}{
		{"the same credential is the same scope", http.Header{"Authorization": {"Bearer alice"}, "Accept-Language": {"de"}}, key, true},
		{"another credential is another scope", http.Header{"Authorization": {"Bearer bob"}}, key, false},
		{"another key is another scope", http.Header{"Authorization": {"Bearer alice"}}, []byte(strings.Repeat("j", 32)), false},
		{"another identifying header is another scope", http.Header{"Authorization": {"Bearer alice"}, "X-Tenant": {"acme"}}, key, false},
		{"values cannot be split differently", http.Header{"Authorization": {"Bearer", " alice"}}, key, false},
		{"a value cannot pass as another header", http.Header{"X-Tenant": {"Bearer alice"}}, key, false},
		{"an empty value is not an absent header", http.Header{"Authorization": {""}}, key, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := IdentityScope(tt.key, names, tt.header)
			if (got == alice) != tt.same || got == "" {
				t.Errorf("scope %q vs alice's %q; want same=%v", got, alice, tt.same)
			}
			if strings.Contains(got, "alice") {
				t.Errorf("scope %q holds the value", got)
			}
		})
	}
	t.Run("no identifying header is no scope", func(t *testing.T) {
		if got := scope(http.Header{"Accept-Language": {"de"}}); got != "" {
			t.Errorf("scope = %q, want none", got)
		}
		if got := scope(nil); got != "" {
			t.Errorf("scope of no header = %q, want none", got)
		}
	})
}
