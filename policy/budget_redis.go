package policy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultRedisBudgetPrefix is the key prefix of RedisBudgets when
// RedisBudgetOptions.Prefix is not set.
const DefaultRedisBudgetPrefix = "toolgate:budget:"

// budgetKeyGrace is how long a window's key outlives the window: long enough
// for a replica whose clock runs behind to still find the window's total,
// and for the refund of a call that straddled the boundary to land.
const budgetKeyGrace = time.Minute

// RedisBudgetOptions configures RedisBudgets. The zero value is usable.
type RedisBudgetOptions struct {
	// Prefix is prepended to every key. Empty means DefaultRedisBudgetPrefix.
	Prefix string
	// Now is the clock that places a call in its window. Nil means time.Now.
	Now func() time.Time
}

// RedisBudgets is a BudgetStore in Redis (5 or newer, standalone, Sentinel or
// Cluster: every operation touches one key), shared by the replicas of a
// service.
//
// Each window of each caller is one integer key,
//
//	<prefix><hex SHA-256 of the caller>:<window start, Unix milliseconds>
//
// holding the micro-units spent in it, with an expiry a minute after the
// window ends: a new window is a new key and starts at zero, and old windows
// clean themselves up. The window is computed from the replica's clock (see
// the package's notes on budgets), so the key can be named in KEYS as Redis
// Cluster requires. Spend is one Lua script that reads the total, refuses the
// cost if it would pass the limit, and otherwise adds it and sets the
// expiry, so concurrent spends from any number of replicas never overshoot.
// Refund is one script that subtracts from an existing key, never below zero,
// and never creates one.
type RedisBudgets struct {
	client redis.UniversalClient
	prefix string
	now    func() time.Time
}

var _ BudgetStore = (*RedisBudgets)(nil)

// NewRedisBudgets returns a store over client. It does not take ownership:
// whoever created the client (usually shared with the idempotency store)
// closes it.
func NewRedisBudgets(client redis.UniversalClient, opts RedisBudgetOptions) *RedisBudgets {
	if opts.Prefix == "" {
		opts.Prefix = DefaultRedisBudgetPrefix
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &RedisBudgets{client: client, prefix: opts.Prefix, now: opts.Now}
}

var (
	// redisBudgetSpend: KEYS[1] the window key; ARGV cost, limit (both in
	// micro-units), expiry in ms. Replies 1 when spent, 0 when refused. A
	// value that is not a number is an error, not a free budget.
	redisBudgetSpend = redis.NewScript(`
local spent = tonumber(redis.call('GET', KEYS[1]) or '0')
if not spent then return redis.error_reply('budget key holds a non-number') end
local cost, limit = tonumber(ARGV[1]), tonumber(ARGV[2])
if spent + cost > limit then return 0 end
redis.call('INCRBY', KEYS[1], ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
`)
	// redisBudgetRefund: KEYS[1] the window key; ARGV cost in micro-units.
	// Subtracts from an existing key (DECRBY and INCRBY keep its expiry),
	// never below zero; a missing key (an ended window) is left alone.
	// Replies 1 when refunded, 0 when there was nothing to refund.
	redisBudgetRefund = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local left = redis.call('DECRBY', KEYS[1], ARGV[1])
if left < 0 then redis.call('INCRBY', KEYS[1], -left) end
return 1
`)
)

// Spend implements BudgetStore.
func (s *RedisBudgets) Spend(ctx context.Context, caller string, cost float64, b BudgetSettings) (BudgetCharge, error) {
	ch, units, limit, start, err := prepareSpend(caller, cost, b, s.now())
	if err != nil || units == 0 {
		return ch, err
	}
	ttl := (ch.ResetIn + budgetKeyGrace + time.Millisecond - 1) / time.Millisecond
	n, err := redisBudgetSpend.Run(ctx, s.client, []string{s.key(caller, start)}, units, limit, int64(ttl)).Int64()
	if err != nil {
		return BudgetCharge{}, fmt.Errorf("redis budgets: spend: %w", err)
	}
	if n != 1 {
		ch.OK = false
		return ch, nil
	}
	ch.Window = start
	return ch, nil
}

// Refund implements BudgetStore.
func (s *RedisBudgets) Refund(ctx context.Context, c BudgetCharge) error {
	units := budgetUnits(c.Cost)
	if !c.OK || c.Window.IsZero() || units == 0 {
		return nil
	}
	if err := redisBudgetRefund.Run(ctx, s.client, []string{s.key(c.Caller, c.Window)}, units).Err(); err != nil {
		return fmt.Errorf("redis budgets: refund: %w", err)
	}
	return nil
}

// key returns the Redis key of caller's window starting at start. The caller
// is hashed so the key's length is bounded and its characters are plain.
func (s *RedisBudgets) key(caller string, start time.Time) string {
	sum := sha256.Sum256([]byte(caller))
	buf := make([]byte, 0, len(s.prefix)+2*len(sum)+1+20)
	buf = append(buf, s.prefix...)
	buf = hex.AppendEncode(buf, sum[:])
	buf = append(buf, ':')
	buf = strconv.AppendInt(buf, start.UnixMilli(), 10)
	return string(buf)
}
