package openapi

import (
	"testing"

	"github.com/toolgate/toolgate/config/policydoc"
)

// TestArgumentNamesTryTheirPlaceFirst: an argument whose name is taken
// tries its place as a prefix before a numeric suffix.
func TestArgumentNamesTryTheirPlaceFirst(t *testing.T) {
	n := policydoc.NewNamer("idempotency_key")
	got := []string{argName(n, "id", "path"), argName(n, "id", "query"), argName(n, "id", "body"), argName(n, "idempotency_key", "body"), argName(n, "{}", "body")}
	want := []string{"id", "query_id", "body_id", "body_idempotency_key", "body"}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("argument %d = %q, want %q", i, got[i], want[i])
		}
	}
}
