package redistest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// clusterSlots is the number of hash slots of a Redis Cluster.
const clusterSlots = 16384

// Cluster is a Redis Cluster of primaries without replicas, each a
// redis-server in cluster mode on free loopback ports (the client port and
// the cluster bus port), the slots split evenly between them. Its methods
// are for the test goroutine.
type Cluster struct {
	t     testing.TB
	Nodes []*Server
	buses []int // the nodes' cluster bus ports
	ids   []string
	admin []*redis.Client // one plain client per node, for CLUSTER commands
}

// StartCluster starts a Cluster of n primaries and waits until every node
// reports it healthy with every slot served. It is stopped by t.Cleanup.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	c := &Cluster{t: t}
	for range n {
		bus, err := freePort()
		if err != nil {
			t.Fatalf("redistest: cluster bus port: %v", err)
		}
		srv := startServer(t, &Server{extra: []string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-port", strconv.Itoa(bus),
			"--cluster-node-timeout", "5000",
			// A test may stop serving a slot on purpose; the others serve on.
			"--cluster-require-full-coverage", "no",
		}})
		if srv == nil {
			return nil // skipped
		}
		c.Nodes, c.buses = append(c.Nodes, srv), append(c.buses, bus)
		client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		t.Cleanup(func() { client.Close() })
		c.admin = append(c.admin, client)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.form(ctx); err != nil {
		t.Fatalf("redistest: cluster: %v", err)
	}
	return c
}

// form splits the slots, introduces the nodes to each other and waits
// until every node sees them all and the cluster is ok.
func (c *Cluster) form(ctx context.Context) error {
	n := len(c.Nodes)
	for i, a := range c.admin {
		id, err := a.ClusterMyID(ctx).Result()
		if err != nil {
			return err
		}
		c.ids = append(c.ids, id)
		lo, hi := i*clusterSlots/n, (i+1)*clusterSlots/n-1
		if err := a.ClusterAddSlotsRange(ctx, lo, hi).Err(); err != nil {
			return fmt.Errorf("node %d: add slots %d-%d: %w", i, lo, hi, err)
		}
	}
	for i := 1; i < n; i++ {
		if err := c.admin[0].Do(ctx, "cluster", "meet", "127.0.0.1", c.Nodes[i].port, c.buses[i]).Err(); err != nil {
			return fmt.Errorf("meet node %d: %w", i, err)
		}
	}
	for {
		ready := true
		for _, a := range c.admin {
			info, err := a.ClusterInfo(ctx).Result()
			if err != nil || !strings.Contains(info, "cluster_state:ok") ||
				!strings.Contains(info, "cluster_known_nodes:"+strconv.Itoa(n)+"\r") ||
				!strings.Contains(info, "cluster_slots_ok:"+strconv.Itoa(clusterSlots)+"\r") {
				ready = false
				break
			}
		}
		if ready {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the cluster did not become ok: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Addrs are the nodes' host:port addresses, the seeds of a cluster client.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Nodes))
	for i, s := range c.Nodes {
		addrs[i] = s.Addr()
	}
	return addrs
}

// Owner returns the index of the node that serves slot, once every node
// agrees on it.
func (c *Cluster) Owner(ctx context.Context, slot int) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	owner := -1
	var last error
	err := waitFor(ctx, func() bool {
		owner = -1
		for i := range c.admin {
			o, err := c.ownerSeenBy(ctx, i, slot)
			if err != nil || owner >= 0 && o != owner {
				last = err
				return false
			}
			owner = o
		}
		return true
	})
	if err != nil {
		return -1, fmt.Errorf("the nodes do not agree who serves slot %d: %w (%v)", slot, err, last)
	}
	return owner, nil
}

// ownerSeenBy returns the index of the node that serves slot in node i's
// view.
func (c *Cluster) ownerSeenBy(ctx context.Context, i, slot int) (int, error) {
	shards, err := c.admin[i].ClusterShards(ctx).Result()
	if err != nil {
		return -1, err
	}
	for _, sh := range shards {
		for _, r := range sh.Slots {
			if int(r.Start) > slot || slot > int(r.End) {
				continue
			}
			for _, n := range sh.Nodes {
				for j, id := range c.ids {
					if n.Role == "master" && n.ID == id {
						return j, nil
					}
				}
			}
		}
	}
	return -1, fmt.Errorf("node %d sees no node serving slot %d", i, slot)
}

// Slot returns the hash slot of key.
func Slot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return int(crc16(key) % clusterSlots)
}

// SameSlot returns the first n numbers i = 1, 2, … for which key(i) has
// hash slot slot: for keys a test wants in one slot, such as idempotency
// records (whose names are hashes) on a slot that moves. About 16384
// numbers are tried per one found.
func SameSlot(slot, n int, key func(i int) string) []int {
	table := crc16Table()
	var found []int
	for i := 1; len(found) < n; i++ {
		if slotWith(&table, key(i)) == slot {
			found = append(found, i)
		}
	}
	return found
}

// slotWith is Slot with a CRC table, for many keys.
func slotWith(table *[256]uint16, key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc = crc<<8 ^ table[byte(crc>>8)^key[i]]
	}
	return int(crc % clusterSlots)
}

// crc16Table is the table of CRC-16/XMODEM, the Cluster's key hash.
func crc16Table() [256]uint16 {
	var t [256]uint16
	for b := range t {
		crc := uint16(b) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
		t[b] = crc
	}
	return t
}

// crc16 is CRC-16/XMODEM, the Cluster's key hash.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// MigrateSlot moves slot, with its keys, to node to, the way redis-cli
// --cluster reshard does: the target imports it, the source marks it
// migrating, the keys move with MIGRATE, pause apart one key at a time
// (so calls meet the slot half moved: ASK redirections and TRYAGAIN), then
// every node is told the new owner. Keys written meanwhile move too.
func (c *Cluster) MigrateSlot(ctx context.Context, slot, to int, pause time.Duration) error {
	from, err := c.Owner(ctx, slot)
	if err != nil {
		return err
	}
	if from == to {
		return nil
	}
	src, dst := c.admin[from], c.admin[to]
	if err := dst.Do(ctx, "cluster", "setslot", slot, "importing", c.ids[from]).Err(); err != nil {
		return fmt.Errorf("importing: %w", err)
	}
	if err := src.Do(ctx, "cluster", "setslot", slot, "migrating", c.ids[to]).Err(); err != nil {
		return fmt.Errorf("migrating: %w", err)
	}
	batch := 100
	if pause > 0 {
		batch = 1
	}
	for {
		keys, err := src.ClusterGetKeysInSlot(ctx, slot, batch).Result()
		if err != nil {
			return fmt.Errorf("keys in slot: %w", err)
		}
		if len(keys) == 0 {
			break
		}
		args := []any{"migrate", "127.0.0.1", c.Nodes[to].port, "", 0, 5000, "keys"}
		for _, k := range keys {
			args = append(args, k)
		}
		if err := src.Do(ctx, args...).Err(); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
		if pause > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(pause):
			}
		}
	}
	// The target first, so that the slot is never served by nobody.
	for _, i := range append([]int{to, from}, c.others(from, to)...) {
		if err := c.admin[i].Do(ctx, "cluster", "setslot", slot, "node", c.ids[to]).Err(); err != nil {
			return fmt.Errorf("node %d: setslot node: %w", i, err)
		}
	}
	// Gossip sent before the move must not undo it: wait until every node
	// agrees.
	owner, err := c.Owner(ctx, slot)
	if err == nil && owner != to {
		err = fmt.Errorf("slot %d went back to node %d", slot, owner)
	}
	return err
}

// others returns the indexes of the nodes other than a and b.
func (c *Cluster) others(a, b int) []int {
	var out []int
	for i := range c.Nodes {
		if i != a && i != b {
			out = append(out, i)
		}
	}
	return out
}
