package contracts

import "testing"

// TestStatusOrder: Statuses lists NumStatuses distinct statuses, and Index
// numbers each by its place in that list, so an array of NumStatuses
// indexed by Index holds one slot a status.
func TestStatusOrder(t *testing.T) {
	statuses := Statuses()
	if len(statuses) != NumStatuses {
		t.Fatalf("Statuses lists %d statuses, NumStatuses is %d", len(statuses), NumStatuses)
	}
	seen := map[Status]bool{}
	for i, st := range statuses {
		t.Run(string(st)+" is numbered by its place", func(t *testing.T) {
			if st == "" || seen[st] {
				t.Fatalf("place %d holds %q, empty or listed twice", i, st)
			}
			seen[st] = true
			if got, ok := st.Index(); !ok || got != i {
				t.Errorf("Index() = %d, %v; want %d, true", got, ok, i)
			}
			if got, ok := parseStatus(string(st)); !ok || got != st {
				t.Errorf("parseStatus(%q) = %q, %v", st, got, ok)
			}
		})
	}
	t.Run("a value outside the set has no index", func(t *testing.T) {
		for _, s := range []Status{"", "OK", "error"} {
			if i, ok := s.Index(); ok {
				t.Errorf("Index of %q = %d, true", s, i)
			}
		}
	})
}
