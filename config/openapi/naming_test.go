package openapi

import (
	"strings"
	"testing"
)

func TestSanitize(t *testing.T) {
	cases := []struct{ in, want string }{
		{"listTickets", "listTickets"},
		{"tickets.list", "tickets.list"},
		{"get-user_v2", "get-user_v2"},
		{"search items", "search_items"},
		{"filter[status]", "filter_status"},
		{"$top", "top"},
		{"  a  b  ", "a_b"},
		{"_private", "_private"},
		{"trailing!", "trailing"},
		{"Ünïcödé", "n_c_d"},
		{"日本語", ""},
		{"", ""},
	}
	for _, c := range cases {
		if got := sanitize(c.in); got != c.want {
			t.Errorf("sanitize(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestDerivedName(t *testing.T) {
	cases := []struct{ method, path, want string }{
		{"GET", "/tickets", "get_tickets"},
		{"POST", "/tickets/{ticketId}/comments", "post_tickets_by_ticketId_comments"},
		{"DELETE", "/v1/users/{user-id}", "delete_v1_users_by_user-id"},
		{"GET", "/", "get"},
		{"PUT", "/files/{name}.{ext}", "put_files_name_._ext"},
	}
	for _, c := range cases {
		if got := derivedName(c.method, c.path); got != c.want {
			t.Errorf("derivedName(%s %s) = %q, want %q", c.method, c.path, got, c.want)
		}
	}
}

func TestNamesAreBoundedStableAndUnique(t *testing.T) {
	long := strings.Repeat("verylongoperation", 5) // 85 characters
	t.Run("a long name is cut to 64 with a hash of the whole name", func(t *testing.T) {
		got := shorten(long)
		if len(got) != maxName {
			t.Fatalf("len(%q) = %d", got, len(got))
		}
		if shorten(long) != got {
			t.Error("shorten is not stable")
		}
		if other := shorten(long + "x"); other == got || other[:55] != got[:55] {
			t.Errorf("two long names sharing a prefix: %q and %q", got, other)
		}
	})
	t.Run("collisions get numeric suffixes in order", func(t *testing.T) {
		n := newNamer()
		got := []string{n.take("search items"), n.take("search_items"), n.take("search?items"), n.take("other")}
		want := []string{"search_items", "search_items_2", "search_items_3", "other"}
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("name %d = %q, want %q", i, got[i], want[i])
			}
		}
	})
	t.Run("a suffix never makes a name longer than 64", func(t *testing.T) {
		n := newNamer()
		first := n.take(long)
		second := n.take(long)
		if second == first || len(second) > maxName {
			t.Errorf("second name %q (len %d) after %q", second, len(second), first)
		}
	})
	t.Run("arguments try their place as a prefix before a suffix", func(t *testing.T) {
		n := newNamer("idempotency_key")
		got := []string{argName(n, "id", "path"), argName(n, "id", "query"), argName(n, "id", "body"), argName(n, "idempotency_key", "body"), argName(n, "{}", "body")}
		want := []string{"id", "query_id", "body_id", "body_idempotency_key", "body"}
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("argument %d = %q, want %q", i, got[i], want[i])
			}
		}
	})
	t.Run("an empty name falls back to x", func(t *testing.T) {
		if got := newNamer().take("", "日本"); got != "x" {
			t.Errorf("got %q", got)
		}
	})
}
