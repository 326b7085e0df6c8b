package upstream

import "testing"

func TestWithQueryParam(t *testing.T) {
	for _, tc := range []struct{ raw, want string }{
		{"", "key=v"},
		{"a=1", "a=1&key=v"},
		{"key=old", "key=v"},
		{"k%65y=old&a=1&key", "a=1&key=v"},
		{"a=1&&b=2", "a=1&b=2&key=v"},
	} {
		if got := withQueryParam(tc.raw, "key", "v"); got != tc.want {
			t.Errorf("withQueryParam(%q) = %q, want %q", tc.raw, got, tc.want)
		}
	}
}
