package upstream

import (
	"testing"

	"github.com/toolgate/toolgate/policy"
)

func TestBulkheadShares(t *testing.T) {
	t.Run("a caller's share defaults to all but an eighth of the bulkhead", func(t *testing.T) {
		for total, want := range map[int]int{1: 1, 4: 4, 8: 7, 256: 224} {
			if got := policy.DefaultMaxConcurrentPerCaller(total); got != want {
				t.Errorf("share of %d = %d, want %d", total, got, want)
			}
		}
	})
	t.Run("slots held across a reload still count", func(t *testing.T) {
		b := NewBulkhead(2, 1)
		if !b.Acquire("a") {
			t.Fatal("first slot")
		}
		nb := b.Resized(2, 2)
		if !nb.Acquire("a") {
			t.Fatal("a's share grew to 2")
		}
		if nb.Acquire("b") {
			t.Fatal("both slots are held, one of them from before the reload")
		}
		b.Release("a")
		if !nb.Acquire("b") {
			t.Fatal("a slot released into the old bulkhead frees the shared total")
		}
	})
	t.Run("released shares leave no entries behind", func(t *testing.T) {
		b := NewBulkhead(4, 2)
		for _, c := range []string{"a", "b", "a"} {
			if !b.Acquire(c) {
				t.Fatalf("acquire %s", c)
			}
		}
		for _, c := range []string{"a", "b", "a"} {
			b.Release(c)
		}
		if len(b.held) != 0 || len(b.slots) != 0 {
			t.Errorf("held %v, %d slots in use", b.held, len(b.slots))
		}
	})
}
