package redisstate

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/toolgate/toolgate/policy"
)

// DefaultBudgetPrefix is the key prefix of Budgets when
// BudgetOptions.Prefix is not set.
const DefaultBudgetPrefix = "toolgate:budget:"

// budgetKeyGrace is how long a window's key outlives the window: long enough
// for a replica whose clock runs behind to still find the window's total,
// and for the refund of a call that straddled the boundary to land. A
// charge's token key outlives the spend's deadline by as much, so the
// refund at the end of the call finds it.
const budgetKeyGrace = time.Minute

// BudgetOptions configures Budgets. The zero value is usable.
type BudgetOptions struct {
	// Prefix is prepended to every key. Empty means DefaultBudgetPrefix.
	Prefix string
	// Now is the clock that places a call in its window. Nil means time.Now.
	Now func() time.Time
}

// Budgets is a policy.BudgetStore in Redis (5 or newer, standalone, Sentinel or
// Cluster: the keys of one caller share a hash slot), shared by the replicas
// of a service.
//
// Each window of each caller is one integer key,
//
//	<prefix>{<hex SHA-256 of the caller>}:<window start, Unix milliseconds>
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
//
// Each charge carries a random token, drawn before the first try, and
// leaves a small key beside its window,
//
//	<prefix>{<hex SHA-256 of the caller>}:charge:<token>
//
// saying "charged" until the spend's deadline plus a minute (at most the
// window's key's life), then "refunded" once refunded. A script run twice
// (a client's retry after a lost reply) therefore charges once and refunds
// once: a lost spend reply never charges a call twice, and a lost refund
// reply never gives a caller back more than it spent. A spend whose script
// call fails after it may have been sent is withdrawn at once by its token
// (on a fresh context bounded by 500ms): it is refunded if it ran, and
// marked refunded otherwise, so that it charges nothing should it arrive
// later. If that fails too, the charge may stay: the caller pays for a call
// that did not happen, never the reverse.
type Budgets struct {
	client redis.UniversalClient
	prefix string
	now    func() time.Time
}

var _ policy.BudgetStore = (*Budgets)(nil)

// NewBudgets returns a store over client. It does not take ownership:
// whoever created the client (usually shared with the idempotency store)
// closes it.
func NewBudgets(client redis.UniversalClient, opts BudgetOptions) *Budgets {
	if opts.Prefix == "" {
		opts.Prefix = DefaultBudgetPrefix
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Budgets{client: client, prefix: opts.Prefix, now: opts.Now}
}

var (
	// redisBudgetSpend: KEYS the window key and the charge's token key; ARGV
	// cost, limit (both in micro-units), the window key's expiry and the
	// token key's, in ms. Replies 1 when spent (now, or by this token's
	// first run), 0 when refused, 2 when this token was withdrawn before the
	// script ran. A value that is not a number is an error, not a free
	// budget.
	redisBudgetSpend = redis.NewScript(`-- toolgate budget: spend
local t = redis.call('GET', KEYS[2])
if t == 'c' then return 1 end
if t == 'r' then return 2 end
local spent = tonumber(redis.call('GET', KEYS[1]) or '0')
if not spent then return redis.error_reply('budget key holds a non-number') end
local cost, limit = tonumber(ARGV[1]), tonumber(ARGV[2])
if spent + cost > limit then return 0 end
redis.call('INCRBY', KEYS[1], ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('SET', KEYS[2], 'c', 'PX', ARGV[4])
return 1
`)
	// redisBudgetRefund: KEYS the window key and the charge's token key;
	// ARGV cost in micro-units, the token key's expiry in ms. Gives back a
	// charge its token key says was taken and not yet refunded, and marks it
	// refunded in any case (a spend that runs later then takes nothing).
	// Subtracts from an existing window key (DECRBY and INCRBY keep its
	// expiry), never below zero; a missing one (an ended window) is left
	// alone. Replies 1 when refunded, 0 when there was nothing to refund.
	redisBudgetRefund = redis.NewScript(`-- toolgate budget: refund
local t = redis.call('GET', KEYS[2])
if t == 'r' then return 0 end
redis.call('SET', KEYS[2], 'r', 'PX', ARGV[2])
if t ~= 'c' or redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local left = redis.call('DECRBY', KEYS[1], ARGV[1])
if left < 0 then redis.call('INCRBY', KEYS[1], -left) end
return 1
`)
)

// errChargeWithdrawn is a spend that ran after its own withdrawal, which a
// single Spend cannot see.
var errChargeWithdrawn = errors.New("charge withdrawn before it ran")

// Spend implements policy.BudgetStore.
func (s *Budgets) Spend(ctx context.Context, caller string, cost float64, b policy.BudgetSettings) (policy.BudgetCharge, error) {
	ch, units, limit, start, err := policy.PrepareSpend(caller, cost, b, s.now())
	if err != nil || units == 0 {
		return ch, err
	}
	if err := ctx.Err(); err != nil {
		return policy.BudgetCharge{}, fmt.Errorf("redis budgets: spend: %w", err) // nothing was sent
	}
	windowTTL := ch.ResetIn + budgetKeyGrace
	tokenTTL := windowTTL
	if deadline, ok := ctx.Deadline(); ok {
		tokenTTL = min(tokenTTL, time.Until(deadline)+budgetKeyGrace)
	}
	// Drawn before the first try: a retry of the script carries it too.
	ch.Token = rand.Text()
	keys := []string{s.windowKey(caller, start), s.chargeKey(caller, ch.Token)}
	n, err := redisBudgetSpend.Run(ctx, s.client, keys, units, limit, millis(windowTTL), millis(tokenTTL)).Int64()
	switch {
	case err != nil:
		return policy.BudgetCharge{}, s.withdraw(ctx, keys, units, tokenTTL, err)
	case n == 2:
		return policy.BudgetCharge{}, fmt.Errorf("redis budgets: spend: %w", errChargeWithdrawn)
	case n != 1:
		ch.OK, ch.Token = false, ""
		return ch, nil
	}
	ch.Window = start
	return ch, nil
}

var _ policy.BudgetInspector = (*Budgets)(nil)

// Spent implements policy.BudgetInspector: one GET of the caller's current
// window, as every replica counts it.
func (s *Budgets) Spent(ctx context.Context, caller string, b policy.BudgetSettings) (float64, time.Duration, error) {
	start, resetIn, ok := policy.CurrentWindow(b, s.now())
	if !ok {
		return 0, 0, nil
	}
	units, err := s.client.Get(ctx, s.windowKey(caller, start)).Int64()
	switch {
	case errors.Is(err, redis.Nil):
		return 0, resetIn, nil
	case err != nil:
		return 0, 0, fmt.Errorf("redis budgets: spent: %w", err)
	}
	return float64(units) / 1e6, resetIn, nil
}

// withdraw refunds a charge whose script call failed with err: it may have
// run, or may still run. It returns err, noting a failed withdrawal.
func (s *Budgets) withdraw(ctx context.Context, keys []string, units int64, tokenTTL time.Duration, err error) error {
	if neverSent(err) {
		return fmt.Errorf("redis budgets: spend: %w", err)
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), withdrawTimeout)
	defer cancel()
	if werr := redisBudgetRefund.Run(wctx, s.client, keys, units, millis(max(tokenTTL, budgetKeyGrace))).Err(); werr != nil {
		return fmt.Errorf("redis budgets: spend: %w (withdrawing the charge failed too: %v)", err, werr)
	}
	return fmt.Errorf("redis budgets: spend: %w", err)
}

// Refund implements policy.BudgetStore. A charge is refunded at most once, however
// often Refund runs for it; a charge without a token (not made by Spend) is
// an error.
func (s *Budgets) Refund(ctx context.Context, c policy.BudgetCharge) error {
	units := policy.BudgetUnits(c.Cost)
	if !c.OK || c.Window.IsZero() || units == 0 {
		return nil
	}
	if c.Token == "" {
		return errors.New("redis budgets: refund: the charge has no token")
	}
	keys := []string{s.windowKey(c.Caller, c.Window), s.chargeKey(c.Caller, c.Token)}
	if err := redisBudgetRefund.Run(ctx, s.client, keys, units, millis(budgetKeyGrace)).Err(); err != nil {
		return fmt.Errorf("redis budgets: refund: %w", err)
	}
	return nil
}

// callerPrefix starts every key of caller. The caller is hashed so the key's
// length is bounded and its characters are plain; braces make the hash the
// Cluster hash tag, so a caller's keys share a slot and one script may touch
// two of them.
func (s *Budgets) callerPrefix(caller string) []byte {
	sum := sha256.Sum256([]byte(caller))
	buf := make([]byte, 0, len(s.prefix)+2*len(sum)+64)
	buf = append(buf, s.prefix...)
	buf = append(buf, '{')
	buf = hex.AppendEncode(buf, sum[:])
	return append(buf, '}', ':')
}

// windowKey returns the Redis key of caller's window starting at start.
func (s *Budgets) windowKey(caller string, start time.Time) string {
	return string(strconv.AppendInt(s.callerPrefix(caller), start.UnixMilli(), 10))
}

// chargeKey returns the Redis key of the charge with token.
func (s *Budgets) chargeKey(caller, token string) string {
	return string(append(append(s.callerPrefix(caller), "charge:"...), token...))
}
