package redistest

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestCluster(t *testing.T) {
	t.Parallel()
	c := StartCluster(t, 3)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	t.Cleanup(func() { client.Close() })

	t.Run("Slot agrees with the server's CLUSTER KEYSLOT", func(t *testing.T) {
		for _, key := range []string{"a", "toolgate:idem:0123", "x{caller}:1", "{}", "a{b}c{d}", "{x"} {
			want, err := client.ClusterKeySlot(ctx, key).Result()
			if err != nil {
				t.Fatal(err)
			}
			if got := Slot(key); got != int(want) {
				t.Errorf("Slot(%q) = %d, want %d", key, got, want)
			}
		}
	})

	t.Run("SameSlot finds names in one slot", func(t *testing.T) {
		name := func(i int) string { return "key-" + strconv.Itoa(i) }
		slot := Slot(name(1))
		found := SameSlot(slot, 3, name)
		if len(found) != 3 || found[0] != 1 {
			t.Fatalf("SameSlot = %v", found)
		}
		for _, i := range found {
			if got, err := client.ClusterKeySlot(ctx, name(i)).Result(); err != nil || int(got) != slot {
				t.Fatalf("slot of %q = %d, %v; want %d", name(i), got, err, slot)
			}
		}
	})

	t.Run("a slot moves to another node with its keys while a client writes to it", func(t *testing.T) {
		const key = "{hot}:counter"
		slot := Slot(key)
		from, err := c.Owner(ctx, slot)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 20 {
			if err := client.Set(ctx, "{hot}:"+strconv.Itoa(i), i, 0).Err(); err != nil {
				t.Fatal(err)
			}
		}
		to := (from + 1) % len(c.Nodes)
		done := make(chan error, 1)
		go func() { done <- c.MigrateSlot(ctx, slot, to, 5*time.Millisecond) }()
		var writes int64
	writing:
		for {
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("MigrateSlot: %v", err)
				}
				break writing
			default:
			}
			if err := client.Incr(ctx, key).Err(); err != nil {
				t.Fatalf("INCR during the migration: %v", err)
			}
			writes++
		}
		if owner, err := c.Owner(ctx, slot); err != nil || owner != to {
			t.Fatalf("owner = %d, %v; want %d", owner, err, to)
		}
		if got, err := client.Get(ctx, key).Int64(); err != nil || got != writes {
			t.Fatalf("counter = %d, %v; want %d", got, err, writes)
		}
		if n := c.admin[to].ClusterCountKeysInSlot(ctx, slot).Val(); n != 21 {
			t.Fatalf("the new owner holds %d keys of the slot, want 21", n)
		}
	})
}

func TestSentinelFailsOver(t *testing.T) {
	t.Parallel()
	s := StartSentinel(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	old, err := s.PrimaryAddr(ctx)
	if err != nil || old != s.Primary.Addr() {
		t.Fatalf("primary = %q, %v; want %s", old, err, s.Primary.Addr())
	}
	s.Primary.Kill()
	primary, err := s.WaitForFailover(ctx, old)
	if err != nil || primary != s.Replica.Addr() {
		t.Fatalf("after the failover: primary = %q, %v; want the replica %s", primary, err, s.Replica.Addr())
	}
	if err := s.RestartAsReplicaOf(s.Primary, primary); err != nil {
		t.Fatal(err)
	}
	if r := role(ctx, s.Primary.Addr()); r != "slave" {
		t.Fatalf("the old primary came back as %q, want a replica", r)
	}
}
