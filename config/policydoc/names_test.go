package policydoc

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
		if got := Sanitize(c.in); got != c.want {
			t.Errorf("Sanitize(%q) = %q, want %q", c.in, got, c.want)
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
		if got := DerivedName(c.method, c.path); got != c.want {
			t.Errorf("DerivedName(%s %s) = %q, want %q", c.method, c.path, got, c.want)
		}
	}
}

func TestNamesAreBoundedStableAndUnique(t *testing.T) {
	long := strings.Repeat("verylongoperation", 5) // 85 characters
	t.Run("a long name is cut to 64 with a hash of the whole name", func(t *testing.T) {
		got := Shorten(long)
		if len(got) != MaxName {
			t.Fatalf("len(%q) = %d", got, len(got))
		}
		if Shorten(long) != got {
			t.Error("Shorten is not stable")
		}
		if other := Shorten(long + "x"); other == got || other[:55] != got[:55] {
			t.Errorf("two long names sharing a prefix: %q and %q", got, other)
		}
	})
	t.Run("collisions get numeric suffixes in order", func(t *testing.T) {
		n := NewNamer()
		got := []string{n.Take("search items"), n.Take("search_items"), n.Take("search?items"), n.Take("other")}
		want := []string{"search_items", "search_items_2", "search_items_3", "other"}
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("name %d = %q, want %q", i, got[i], want[i])
			}
		}
	})
	t.Run("a suffix never makes a name longer than 64", func(t *testing.T) {
		n := NewNamer()
		first := n.Take(long)
		second := n.Take(long)
		if second == first || len(second) > MaxName {
			t.Errorf("second name %q (len %d) after %q", second, len(second), first)
		}
	})
	t.Run("an empty name falls back to x", func(t *testing.T) {
		if got := NewNamer().Take("", "日本"); got != "x" {
			t.Errorf("got %q", got)
		}
	})
}
