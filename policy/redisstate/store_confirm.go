package redisstate

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// pipeliner runs commands on one connection to one server.
type pipeliner interface {
	Pipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error)
}

// confirm waits until s.replicas replicas hold the claim of token on key
// (see Store): the confirm script and WAIT go to the key's primary in
// one pipeline, on one connection, as WAIT requires.
func (s *Store) confirm(ctx context.Context, key, token string) error {
	primary, err := s.primaryFor(ctx, key)
	if err != nil {
		return err
	}
	wait := s.confirmT
	if deadline, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(deadline))
	}
	// WAIT counts in whole milliseconds and waits for ever on 0.
	if wait < time.Millisecond {
		return fmt.Errorf("%w: no time left to wait", ErrUnconfirmed)
	}
	keys := []string{key}
	var owned *redis.Cmd
	var acked *redis.Cmd
	run := func(eval bool) error {
		_, err := primary.Pipelined(ctx, func(p redis.Pipeliner) error {
			if eval {
				owned = s.scripts.confirm.Eval(ctx, p, keys, token)
			} else {
				owned = s.scripts.confirm.EvalSha(ctx, p, keys, token)
			}
			acked = p.Do(ctx, "wait", s.replicas, wait.Milliseconds())
			return nil
		})
		return err
	}
	err = run(false)
	if err != nil && redis.HasErrorPrefix(owned.Err(), "NOSCRIPT") {
		err = run(true) // a server that does not know the script yet
	}
	if err != nil {
		return err
	}
	if n, _ := owned.Int(); n != 1 {
		return fmt.Errorf("%w: the claim is gone from the primary (a failover?)", ErrUnconfirmed)
	}
	if n, _ := acked.Int64(); n < int64(s.replicas) {
		return fmt.Errorf("%w: %d of %d replicas acknowledged within %v", ErrUnconfirmed, n, s.replicas, wait)
	}
	return nil
}

// primaryFor returns a client of the primary that holds key: the client
// itself for a single server or a Sentinel's primary, the node that owns
// the key's slot in a Cluster.
func (s *Store) primaryFor(ctx context.Context, key string) (pipeliner, error) {
	switch c := s.client.(type) {
	case *redis.ClusterClient:
		return c.MasterForKey(ctx, key)
	case *redis.Client:
		return c, nil
	}
	return nil, fmt.Errorf("%w: confirming needs a single-server, Sentinel or Cluster client, not %T", ErrUnconfirmed, s.client)
}

// withdrawUnconfirmed releases a claim that ran but was not confirmed, and
// returns err. Unlike withdraw, it knows the claim exists, so a release that
// fails is tried again in the background whatever the error.
func (s *Store) withdrawUnconfirmed(ctx context.Context, op, key, token string, lease time.Duration, err error) error {
	return s.release(ctx, op, key, token, lease, err, true)
}
