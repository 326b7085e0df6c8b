package redisstate

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/toolgate/toolgate/policy"
)

// DefaultRatePrefix is the key prefix of RateLimiters when
// RateOptions.Prefix is not set.
const DefaultRatePrefix = "toolgate:rate:"

// RateOptions configures RateLimiters. The zero value is usable.
type RateOptions struct {
	// Prefix is prepended to every key. Empty means DefaultRatePrefix.
	Prefix string
	// OnError says what a rate check does when Redis fails: policy.OnErrorOpen
	// (the default, also for an empty value) or policy.OnErrorClosed.
	OnError string
	// Now is the clock of the fallback buckets (policy.OnErrorOpen). Nil means
	// time.Now. The shared buckets read the Redis server's clock.
	Now func() time.Time
}

// RateLimiters is a policy.RateLimiter in Redis (5 or newer, standalone,
// Sentinel or Cluster), shared by the replicas of a service: n replicas
// together allow a caller its rate, not n times it.
//
// It picks the bucket as policy.RateLimiters does (the caller's override for the
// tool, else the caller's own rate, else no limit) and runs GCRA, the
// generic cell rate algorithm, in one Lua script: a bucket is one key,
//
//	<prefix>{<hex SHA-256 of the caller>}:<hex SHA-256 of the tool, or *>
//
// holding its theoretical arrival time (TAT) in microseconds on the Redis
// server's clock. A call at now is allowed when TAT+1/rps - burst/rps <= now,
// and then moves TAT to max(TAT, now)+1/rps; the key expires when TAT
// passes, which is when the bucket would be full again, so idle buckets
// clean themselves up. That is the memory limiter's token bucket: it starts
// full with burst tokens and refills at rps; a refused call takes nothing.
// The caller's hash in braces is the Cluster hash tag, the same as its
// budget keys (Budgets), so a caller's keys share a slot.
//
// Every check is one script call: one round trip. The script is not
// idempotent: a reply that is lost and retried by the client takes two
// tokens for one call, which errs on the strict side. Changed settings (a
// reload) apply from the next call: the TAT stays, so a caller keeps the
// debt it had, measured in time.
//
// When Redis fails (unreachable, out of memory, a timeout), Take returns
// the error along with the verdict of OnError: with policy.OnErrorOpen the call is
// checked against this replica's own bucket instead, as the memory backend
// would (the limit then holds per replica, so n replicas allow n times the
// rate while Redis is down); with policy.OnErrorClosed it is refused.
type RateLimiters struct {
	client redis.UniversalClient
	prefix string
	closed bool
	local  *policy.RateLimiters // the fallback of policy.OnErrorOpen
}

// NewRateLimiters returns limiters over client. It does not take
// ownership: whoever created the client closes it. An OnError other than
// policy.OnErrorOpen, policy.OnErrorClosed or empty is an error.
func NewRateLimiters(client redis.UniversalClient, opts RateOptions) (*RateLimiters, error) {
	if opts.Prefix == "" {
		opts.Prefix = DefaultRatePrefix
	}
	switch opts.OnError {
	case "", policy.OnErrorOpen, policy.OnErrorClosed:
	default:
		return nil, fmt.Errorf("redis rate limits: on_error %q is not valid (want open or closed)", opts.OnError)
	}
	return &RateLimiters{
		client: client,
		prefix: opts.Prefix,
		closed: opts.OnError == policy.OnErrorClosed,
		local:  policy.NewRateLimiters(opts.Now),
	}, nil
}

// redisRateAllow: KEYS the bucket; ARGV the emission interval (1/rps) in
// microseconds, possibly fractional, and the burst. Replies {1, 0} when the
// call may go ahead, {0, wait in microseconds} when not. A value that is
// not a number is an error, not an empty bucket.
var redisRateAllow = redis.NewScript(`-- toolgate rate: allow
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval, burst = tonumber(ARGV[1]), tonumber(ARGV[2])
local v = redis.call('GET', KEYS[1])
local tat = now
if v then
  tat = tonumber(v)
  if not tat then return redis.error_reply('rate key holds a non-number') end
  if tat < now then tat = now end
end
local next = tat + interval
local wait = next - burst * interval - now
if wait > 0 then return {0, math.ceil(wait)} end
redis.call('SET', KEYS[1], string.format('%.17g', next), 'PX', math.max(1, math.ceil((next - now) / 1000)))
return {1, 0}
`)

// Take implements policy.RateLimiter.
func (r *RateLimiters) Take(ctx context.Context, caller *policy.Caller, tool string) (bool, time.Duration, error) {
	s, k, limited := policy.RateFor(caller, tool)
	if !limited {
		return true, 0, nil
	}
	if !s.Valid() {
		return false, 0, nil
	}
	interval := 1e6 / s.RPS
	res, err := redisRateAllow.Run(ctx, r.client, []string{r.key(k)}, strconv.FormatFloat(interval, 'g', 17, 64), s.Burst).Int64Slice()
	if err == nil && len(res) != 2 {
		err = fmt.Errorf("unexpected script reply %v", res)
	}
	if err != nil {
		err = fmt.Errorf("redis rate limits: %w", err)
		if r.closed {
			return false, 0, err
		}
		ok, wait := r.local.Allow(caller, tool)
		return ok, wait, err
	}
	if res[0] == 1 {
		return true, 0, nil
	}
	return false, policy.WaitMillis(float64(res[1]) / 1e6), nil
}

// Retain implements policy.RateLimiter. The shared buckets expire by themselves;
// the fallback buckets of this replica are dropped as policy.RateLimiters drops
// them.
func (r *RateLimiters) Retain(callers map[string]*policy.Caller) { r.local.Retain(callers) }

// key returns the Redis key of bucket k. Caller and tool are hashed so the
// key's length is bounded and its characters plain.
func (r *RateLimiters) key(k policy.RateKey) string {
	caller := sha256.Sum256([]byte(k.Caller))
	buf := make([]byte, 0, len(r.prefix)+2*sha256.Size+3+2*sha256.Size)
	buf = append(buf, r.prefix...)
	buf = append(buf, '{')
	buf = hex.AppendEncode(buf, caller[:])
	buf = append(buf, '}', ':')
	if k.Tool == policy.RateAllTools {
		buf = append(buf, policy.RateAllTools...)
	} else {
		tool := sha256.Sum256([]byte(k.Tool))
		buf = hex.AppendEncode(buf, tool[:])
	}
	return string(buf)
}
