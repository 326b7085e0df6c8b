package redistest

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// SentinelMaster is the name the Sentinels of StartSentinel monitor their
// primary by.
const SentinelMaster = "toolgate"

// Sentinel is a primary, one replica and three Sentinels (quorum 2) that
// fail the primary over to the replica half a second after it stops answering.
// All are redis-server processes on free loopback ports; its methods are
// for the test goroutine.
type Sentinel struct {
	t         testing.TB
	Primary   *Server
	Replica   *Server
	Sentinels []*Server
}

// Sentinel timings: a primary is down after half a second without answers, and
// a failover that stalls is tried again after five.
const (
	sentinelDownAfter       = 500
	sentinelFailoverTimeout = 5000
)

// StartSentinel starts the primary, the replica (and waits until it is in
// sync), then the Sentinels, and waits until each knows the replica and the
// other two Sentinels, so that a failover can be voted for. Everything is
// stopped by t.Cleanup.
func StartSentinel(t testing.TB) *Sentinel {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := &Sentinel{t: t}
	if s.Primary = Start(t); s.Primary == nil {
		return nil // skipped
	}
	s.Replica = StartReplicaOf(t, s.Primary)
	primaryPort := s.Primary.port
	conf := func(int) string {
		return fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d 2\n"+
			"sentinel down-after-milliseconds %[1]s %[3]d\n"+
			"sentinel failover-timeout %[1]s %[4]d\n"+
			"sentinel parallel-syncs %[1]s 1\n",
			SentinelMaster, primaryPort, sentinelDownAfter, sentinelFailoverTimeout)
	}
	for range 3 {
		s.Sentinels = append(s.Sentinels, startServer(t, &Server{sentinelConf: conf}))
	}
	for _, sn := range s.Sentinels {
		c := redis.NewSentinelClient(&redis.Options{Addr: sn.Addr()})
		err := waitFor(ctx, func() bool {
			replicas, err1 := c.Replicas(ctx, SentinelMaster).Result()
			peers, err2 := c.Sentinels(ctx, SentinelMaster).Result()
			return err1 == nil && err2 == nil && len(replicas) == 1 && len(peers) == 2
		})
		c.Close()
		if err != nil {
			t.Fatalf("redistest: sentinel %s did not discover the replica and its peers: %v", sn.Addr(), err)
		}
	}
	return s
}

// StartReplicaOf starts a replica of primary and waits until it is in
// sync. It is stopped by t.Cleanup.
func StartReplicaOf(t testing.TB, primary *Server) *Server {
	t.Helper()
	r := startServer(t, &Server{extra: []string{"--replicaof", "127.0.0.1", strconv.Itoa(primary.port)}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := waitInSync(ctx, r.Addr()); err != nil {
		t.Fatalf("redistest: %v", err)
	}
	return r
}

// Addrs are the Sentinels' host:port addresses.
func (s *Sentinel) Addrs() []string {
	addrs := make([]string, len(s.Sentinels))
	for i, sn := range s.Sentinels {
		addrs[i] = sn.Addr()
	}
	return addrs
}

// PrimaryAddr asks the Sentinels which address is the primary: the answer
// of the first Sentinel that answers.
func (s *Sentinel) PrimaryAddr(ctx context.Context) (string, error) {
	var last error
	for _, sn := range s.Sentinels {
		c := redis.NewSentinelClient(&redis.Options{Addr: sn.Addr()})
		hp, err := c.GetMasterAddrByName(ctx, SentinelMaster).Result()
		c.Close()
		if err == nil && len(hp) == 2 {
			return net.JoinHostPort(hp[0], hp[1]), nil
		}
		last = err
	}
	return "", fmt.Errorf("no sentinel named the primary: %v", last)
}

// WaitForFailover waits until every Sentinel names a primary other than
// old and that server says it is a primary, and returns its address.
func (s *Sentinel) WaitForFailover(ctx context.Context, old string) (string, error) {
	var primary string
	err := waitFor(ctx, func() bool {
		primary = ""
		for _, sn := range s.Sentinels {
			c := redis.NewSentinelClient(&redis.Options{Addr: sn.Addr()})
			hp, err := c.GetMasterAddrByName(ctx, SentinelMaster).Result()
			c.Close()
			if err != nil || len(hp) != 2 {
				return false
			}
			addr := net.JoinHostPort(hp[0], hp[1])
			if addr == old || primary != "" && addr != primary {
				return false
			}
			primary = addr
		}
		return role(ctx, primary) == "master"
	})
	if err != nil {
		return "", fmt.Errorf("no failover away from %s: %w", old, err)
	}
	return primary, nil
}

// RestartAsReplicaOf starts a stopped or killed server again, empty, as a
// replica of primary, and waits until it is in sync: a crashed primary
// rejoining the topology the Sentinels have since changed.
func (s *Sentinel) RestartAsReplicaOf(srv *Server, primary string) error {
	host, port, err := net.SplitHostPort(primary)
	if err != nil {
		return err
	}
	srv.Stop()
	srv.extra = []string{"--replicaof", host, port}
	srv.Restart()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return waitInSync(ctx, srv.Addr())
}

// waitInSync waits until the replica at addr has its link to the primary
// up and its initial sync done.
func waitInSync(ctx context.Context, addr string) error {
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	err := waitFor(ctx, func() bool {
		info, err := c.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "master_link_status:up") && strings.Contains(info, "master_sync_in_progress:0")
	})
	if err != nil {
		return fmt.Errorf("replica %s did not sync: %w", addr, err)
	}
	return nil
}

// role returns what the server at addr says it is: master, slave, or ""
// when it does not answer.
func role(ctx context.Context, addr string) string {
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	res, err := c.Do(ctx, "role").Slice()
	if err != nil || len(res) == 0 {
		return ""
	}
	r, _ := res[0].(string)
	return r
}

// waitFor polls cond every 50ms until it holds or ctx ends.
func waitFor(ctx context.Context, cond func() bool) error {
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}
