package redisstate

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/toolgate/toolgate/policy"
)

// DefaultPrefix is the Redis store's key prefix when StoreOptions.Prefix
// is not set.
const DefaultPrefix = "toolgate:idem:"

// ProbeKeyPrefix starts the key Ping writes to see whether Redis accepts
// writes; a random suffix per store keeps replicas apart.
const ProbeKeyPrefix = "toolgate:probe:"

// Wait's polling interval starts at minWaitPoll and doubles up to
// StoreOptions.MaxWaitPoll, by default defaultMaxWaitPoll.
const (
	minWaitPoll        = 5 * time.Millisecond
	defaultMaxWaitPoll = 100 * time.Millisecond
)

// withdrawTimeout bounds the release that withdraws a claim whose reply
// never came (see Store). It runs after the call's own deadline, so it
// adds to how late a call answers when Redis stalls.
const withdrawTimeout = 500 * time.Millisecond

// releaseRetryWindow is how long a Release that failed is tried again in
// the background. It outlasts any claim's lease (a tool's timeout plus a
// few seconds): past the lease, the record reads as unknown to the first
// observer, and the release is refused from then on.
const releaseRetryWindow = 2 * time.Minute

// maxBackgroundWithdrawals bounds the withdrawals a store keeps trying after
// the first try failed; beyond it a claim is withdrawn once only.
const maxBackgroundWithdrawals = 1024

// probeTTL is how long the key Ping writes lives.
const probeTTL = 5 * time.Second

// StoreOptions configures a Store. The zero value is usable.
type StoreOptions struct {
	// Prefix is prepended to every key. Empty means DefaultPrefix.
	Prefix string
	// MaxWaitPoll caps the interval at which Wait re-reads an in-flight
	// record; polls start at 5ms and double. Zero or less means 100ms.
	MaxWaitPoll time.Duration
	// ConfirmReplicas, when positive, makes Claim and Reclaim report a
	// claim owned only once that many replicas of the key's primary hold
	// it (WAIT); see Store. Zero or less reports it at once.
	ConfirmReplicas int
	// ConfirmTimeout bounds that wait (and the call's context bounds it
	// too). Zero or less means 500ms.
	ConfirmTimeout time.Duration
	// Now is the clock that times the checks of the scope key (see
	// Store). Nil means time.Now.
	Now func() time.Time
}

// ScopeKeyName is the name, after the prefix, of the Redis key that holds
// the store's scope key (see Store).
const ScopeKeyName = "scope-key"

// scopeKeyCheck is how often a store checks the scope key it holds against
// Redis.
const scopeKeyCheck = 10 * time.Second

// ErrUnconfirmed means a claim was not confirmed by enough replicas in
// time (StoreOptions.ConfirmReplicas): it was withdrawn and nothing may be
// sent.
var ErrUnconfirmed = errors.New("claim not confirmed by enough replicas")

// Store is a policy.IdempotencyStore in Redis (5 or newer, standalone,
// Sentinel or Cluster: every operation touches one key), shared by the
// replicas of a service.
//
// Each record is one string key: the prefix and the hex SHA-256 of the
// length-prefixed caller, tool and key (and the identity scope, when the
// call has one), so its length is bounded whatever the inputs. Every operation is one Lua script, so it is atomic and reads the
// lease deadline from the Redis server's clock, never a replica's. A claim
// creates the key with PX lease+ttl: the key must outlive its lease so that a
// lease that ran out is seen and turned into unknown (then kept for ttl)
// rather than silently vanishing and letting a second call run. Every later
// write re-applies PX ttl (a release: the claim's lease). A value the store cannot decode is reported as
// unknown with a zero fingerprint, never as success, and no token owns it.
//
// Every script is safe to run twice, so a client that retries a command
// whose reply was lost (go-redis does, after EOF) gets the first run's
// result, never a second effect:
//
//   - Claim and Reclaim draw their owner token before the first try, and a
//     claim that finds an in-flight record carrying its own token reports it
//     as owned: the call never waits for itself.
//   - Complete and MarkUnknown keep the finishing token in the record; a
//     repeat by that token, to the same state, succeeds and changes nothing.
//   - Release leaves a tombstone carrying its token for the claim's lease;
//     a repeat finds it and succeeds. A tombstone reads as no record to
//     everyone else, and any other call may claim over it.
//
// A claim whose script call fails after it may have been sent (the deadline
// passed, the connection broke, retries ran out) may have run in Redis, or
// may still run later. Its token is known, so the store withdraws it at
// once, on a fresh context bounded by 500ms: the release replaces the record
// by a tombstone if the claim ran, and otherwise writes the tombstone where
// the record would be, which stops the claim from creating anything should
// it arrive afterwards (within its lease). When that release fails too (Redis stalled
// or unreachable), the store keeps trying in the background, with backoff,
// until it succeeds, the claim's lease is over or the store is closed (at
// most 1024 claims at a time). So no record is left in flight that no owner
// holds, unless Redis stays unreachable for the whole lease; such a record
// reads as unknown once its lease runs out. A claim that failed to dial was
// never sent and is not withdrawn; one Redis refused with an error (out of
// memory, a read-only replica) is withdrawn once, not in the background.
//
// Every command is bounded by its context when the client is built with
// ContextTimeoutEnabled, as ClientOptions does: a stalled Redis holds
// no call past its deadline (plus the withdrawal).
//
// Wait polls, starting at 5ms and doubling up to MaxWaitPoll, bounded by its
// context: a waiter on another replica sees the result at most MaxWaitPoll
// after it is stored, at the cost of one small script call per poll.
//
// Ping writes a short-lived key (ProbeKeyPrefix and a random suffix), so it
// fails when Redis refuses writes: out of memory under noeviction, or a
// read-only replica.
//
// The scope key (ScopeKey) lives in Redis, under the prefix and
// ScopeKeyName, with no expiry: 64 random hex digits that the first store
// to need it creates (SET NX, in a script that then reads the key back) and
// every other store reads, so every replica sharing the Redis hashes a
// forwarded identity alike and a retry that lands on another replica finds
// its record. A store reads it when it first needs it (a call that forwards
// an identity) and checks it again at most every 10s, on the next call that
// needs it. That check proposes the key the store already holds, so a Redis
// that lost the key (a restart without persistence, a failover before it
// was replicated) gets the same key back from the first replica that looks,
// rather than a new one; a store adopts whatever Redis holds, so replicas
// that disagreed (a replica started while the key was missing) agree again
// within 10s. An operator may set the key (any value of 32 bytes or more)
// before the first replica starts. Anyone who reads Redis reads this key
// too: a policy that sets state.scope_key keeps the key out of Redis, and
// out of its dumps.
//
// Redis replicates asynchronously: a claim its primary acknowledged may be
// lost when the primary fails before a replica has it, and the promoted
// replica then lets a retry of the same key claim it and send again. With
// ConfirmReplicas n, a claim is reported owned only after it is confirmed
// on n replicas: on the connection to the key's primary (the Sentinel's
// current primary, or the Cluster node that owns the key's slot), a script
// rewrites the record unchanged if the token still owns it, and WAIT n
// then waits for n replicas to acknowledge everything up to that write,
// the claim included (replication is ordered). If fewer acknowledge within
// ConfirmTimeout (or the call's deadline), or the record is gone (a
// failover came in between), the claim is withdrawn as above and Claim
// returns ErrUnconfirmed: the call fails before anything is sent. A
// primary cut off from its replicas (a stale primary on the wrong side of a
// partition, or one that came back before it was turned into a replica)
// confirms nothing, so it cannot hand out a claim that the new primary
// does not know. Completions, releases and the conversion of a lease that
// ran out are not confirmed: one lost in a failover leaves the record in
// flight on the new primary, where it reads as unknown once its lease runs
// out; a retry then gets unknown, never a second call. And a finishing
// token only ever finishes a record that holds it, so an owner whose
// claim was lost, or taken over after its lease, completes nothing on the
// new primary.
type Store struct {
	client   redis.UniversalClient
	scripts  redisScripts
	prefix   string
	maxPoll  time.Duration
	probeKey string
	replicas int           // ConfirmReplicas
	confirmT time.Duration // ConfirmTimeout
	now      func() time.Time

	// The scope key: the last one read from Redis (nil before the first
	// read), what a store that holds none proposes, and whether a check is
	// under way.
	scope      atomic.Pointer[scopeKeyRead]
	scopeDraw  string
	scopeCheck atomic.Bool

	// Background withdrawals: life ends at Close, which waits for bg.
	life    context.Context
	stop    context.CancelFunc
	bg      sync.WaitGroup
	bgSlots chan struct{}
}

var _ policy.IdempotencyStore = (*Store)(nil)

// NewStore returns a store over client and takes ownership of it: Close
// closes the client.
func NewStore(client redis.UniversalClient, opts StoreOptions) *Store {
	if opts.Prefix == "" {
		opts.Prefix = DefaultPrefix
	}
	if opts.MaxWaitPoll <= 0 {
		opts.MaxWaitPoll = defaultMaxWaitPoll
	}
	if opts.ConfirmTimeout <= 0 {
		opts.ConfirmTimeout = policy.DefaultConfirmTimeout
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	life, stop := context.WithCancel(context.Background())
	return &Store{
		client:    client,
		scripts:   newRedisScripts(),
		prefix:    opts.Prefix,
		maxPoll:   opts.MaxWaitPoll,
		probeKey:  ProbeKeyPrefix + rand.Text(),
		replicas:  max(opts.ConfirmReplicas, 0),
		confirmT:  opts.ConfirmTimeout,
		now:       opts.Now,
		scopeDraw: policy.NewScopeKey(),
		life:      life,
		stop:      stop,
		bgSlots:   make(chan struct{}, maxBackgroundWithdrawals),
	}
}

// ClientOptions parses a redis://, rediss:// or unix:// URL into the
// client options toolgate's stores expect:
//
//   - ContextTimeoutEnabled: every command is bounded by its context, the
//     call's deadline, not only by the client's 3s read timeout;
//   - MaxRetries 3: a command whose reply was lost (EOF) is sent again,
//     which every script of the stores tolerates (see Store);
//   - DialerRetries 1 and a dial timeout of at most 1s: while Redis is
//     down, side-effecting calls fail closed quickly instead of hanging on
//     reconnects.
func ClientOptions(rawURL string) (*redis.Options, error) {
	opts, err := redis.ParseURL(rawURL)
	if err != nil {
		return nil, err
	}
	opts.ContextTimeoutEnabled = true
	opts.MaxRetries = 3
	opts.DialerRetries = 1
	if opts.DialTimeout == 0 || opts.DialTimeout > time.Second {
		opts.DialTimeout = time.Second
	}
	return opts, nil
}

// The record value is
//
//	1:<state>:<fingerprint>:<token>:<lease until>:<ttl>:<updated at>:<envelope>
//
// with state F (in flight), C (completed), U (unknown) or R (released: a
// tombstone), the fingerprint in 64 hex digits, a token (base32: the owner
// of an in-flight record, the token that finished a completed or unknown
// one or released a tombstone; empty for an unknown record the store
// declared itself), the lease deadline (0 unless in flight), the retention
// and the time of the write in milliseconds (times on the Redis server's
// clock since the Unix epoch), and the envelope bytes, verbatim, to the end
// of the value. It reads well in redis-cli and Lua parses it with one
// pattern.
const luaPrelude = `
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- parse returns the fields of a value, or nil for a value it cannot read.
local function parse(v)
  local st, fp, tok, lease, ttl, at = string.match(v, '^1:([FCUR]):(%x+):(%w*):(%d+):(%d+):(%d+):')
  if not st or #fp ~= 64 or ((st == 'F' or st == 'R') and tok == '') then return nil end
  return {st = st, fp = fp, tok = tok, lease = tonumber(lease), ttl = tonumber(ttl), at = tonumber(at)}
end

local function encode(st, fp, tok, lease, ttl, now, envelope)
  return string.format('1:%s:%s:%s:%d:%d:%d:', st, fp, tok, lease, ttl, now) .. envelope
end

-- observe returns the value of KEYS[1] (false when there is none) and its
-- fields (nil when unreadable), after turning an in-flight record whose
-- lease ran out into an unknown one: its owner died mid-call, so the effect
-- may have happened.
local function observe(now)
  local v = redis.call('GET', KEYS[1])
  if not v then return false, nil end
  local r = parse(v)
  if r and r.st == 'F' and now >= r.lease then
    v = encode('U', r.fp, '', 0, r.ttl, now, '')
    redis.call('SET', KEYS[1], v, 'PX', r.ttl)
    r = parse(v)
  end
  return v, r
end

-- create stores a fresh in-flight record. ARGV: token, fingerprint, lease ms, ttl ms.
local function create(now)
  local lease, ttl = tonumber(ARGV[3]), tonumber(ARGV[4])
  local v = encode('F', ARGV[2], ARGV[1], now + lease, ttl, now, '')
  redis.call('SET', KEYS[1], v, 'PX', lease + ttl)
  return {1, v}
end
`

// The scripts' bodies; each runs after luaPrelude. Every one may run twice
// with the same arguments (a client's retry after a lost reply) and then
// gives the first run's result.
const (
	// luaClaim creates the record unless one exists; the script's GET and SET
	// run atomically, which is what SET NX gives a bare command. A tombstone
	// of another token counts as no record. Returns {1, value} when the
	// token ARGV[1] owns the record (created now, or by this claim's first
	// run), else {0, existing value}.
	luaClaim = `
local now = now_ms()
local v, r = observe(now)
if not v or (r and r.st == 'R' and r.tok ~= ARGV[1]) then return create(now) end
if r and r.st == 'F' and r.tok == ARGV[1] then return {1, v} end
return {0, v}
`

	// luaReclaim takes over a record that is absent, unknown with the same
	// fingerprint (a lease that ran out is unknown by then), undecodable or
	// another token's tombstone; otherwise it reports the record as luaClaim
	// does.
	luaReclaim = `
local now = now_ms()
local v, r = observe(now)
if r and r.tok == ARGV[1] and (r.st == 'F' or r.st == 'R') then
  if r.st == 'F' then return {1, v} end
  return {0, v}
end
if not v or not r or r.st == 'R' or (r.st == 'U' and r.fp == ARGV[2]) then return create(now) end
return {0, v}
`

	// luaFinish completes or marks unknown a record the token ARGV[1] owns.
	// ARGV: token, state (C or U), ttl ms, envelope. Returns 1, also when the
	// token already finished the record in that state; 0 when the claim is
	// lost.
	luaFinish = `
local v = redis.call('GET', KEYS[1])
if not v then return 0 end
local r = parse(v)
if not r or r.tok ~= ARGV[1] then return 0 end
if r.st == ARGV[2] then return 1 end
if r.st ~= 'F' then return 0 end
redis.call('SET', KEYS[1], encode(ARGV[2], r.fp, ARGV[1], 0, tonumber(ARGV[3]), now_ms(), ARGV[4]), 'PX', ARGV[3])
return 1
`

	// luaRelease replaces a record the token ARGV[1] owns by its tombstone,
	// kept for the claim's lease. Returns 1, also when the token already
	// released it or there is no record (nothing is held either way); 0
	// when another token holds the key or it was finished. ARGV[2], when
	// positive, is how long to keep a tombstone for a record that does not
	// exist (yet): a claim of that token that arrives later then creates
	// nothing.
	luaRelease = `
local v = redis.call('GET', KEYS[1])
if not v then
  local px = tonumber(ARGV[2])
  if px > 0 then
    redis.call('SET', KEYS[1], encode('R', string.rep('0', 64), ARGV[1], 0, 0, now_ms(), ''), 'PX', px)
  end
  return 1
end
local r = parse(v)
if not r or r.tok ~= ARGV[1] then return 0 end
if r.st == 'R' then return 1 end
if r.st ~= 'F' then return 0 end
redis.call('SET', KEYS[1], encode('R', r.fp, ARGV[1], 0, 0, now_ms(), ''), 'PX', math.max(r.lease - r.at, 1))
return 1
`

	// luaGet returns the value, converting a lease that ran out, or nil.
	luaGet = `
local v = observe(now_ms())
return v
`

	// luaConfirm rewrites, unchanged (the same value, the same expiry), an
	// in-flight record the token ARGV[1] owns, so that the connection that
	// runs it has written after the claim, for the WAIT that follows.
	// Returns 1 when the token owns the record, else 0. Like luaFinish it
	// does not observe the lease: until someone else does, the owner may go
	// on.
	luaConfirm = `
local v = redis.call('GET', KEYS[1])
local r = v and parse(v)
if not r or r.st ~= 'F' or r.tok ~= ARGV[1] then return 0 end
local left = redis.call('PTTL', KEYS[1])
if left <= 0 then return 0 end
redis.call('SET', KEYS[1], v, 'PX', left)
return 1
`
)

// luaScopeKey creates the scope key KEYS[1] as ARGV[1] unless it exists,
// and returns what it holds. It may run twice: the second run reads what
// the first wrote.
const luaScopeKey = `
redis.call('SET', KEYS[1], ARGV[1], 'NX')
return redis.call('GET', KEYS[1])
`

// redisScripts are the store's scripts, run with EVALSHA (EVAL when the
// server does not know them yet, as after a restart).
type redisScripts struct {
	claim, reclaim, finish, release, get, confirm, scopeKey *redis.Script
}

// newRedisScripts names each script in its first line, for SCRIPT and
// SLOWLOG readers (and tests that fault one script by its text).
func newRedisScripts() redisScripts {
	script := func(name, body string) *redis.Script {
		return redis.NewScript("-- toolgate idempotency: " + name + "\n" + luaPrelude + body)
	}
	return redisScripts{
		claim:   script("claim", luaClaim),
		reclaim: script("reclaim", luaReclaim),
		finish:  script("finish", luaFinish),
		release: script("release", luaRelease),
		get:     script("get", luaGet),
		confirm: script("confirm", luaConfirm),
		// Not after the prelude: it reads no record.
		scopeKey: redis.NewScript("-- toolgate idempotency: scope key\n" + luaScopeKey),
	}
}

// Claim implements policy.IdempotencyStore.
func (s *Store) Claim(ctx context.Context, k policy.IdempotencyKey, fp policy.Fingerprint, lease, ttl time.Duration) (policy.Claim, error) {
	return s.claim(ctx, s.scripts.claim, "claim", k, fp, lease, ttl)
}

// Reclaim implements policy.IdempotencyStore.
func (s *Store) Reclaim(ctx context.Context, k policy.IdempotencyKey, fp policy.Fingerprint, lease, ttl time.Duration) (policy.Claim, error) {
	return s.claim(ctx, s.scripts.reclaim, "reclaim", k, fp, lease, ttl)
}

func (s *Store) claim(ctx context.Context, script *redis.Script, op string, k policy.IdempotencyKey, fp policy.Fingerprint, lease, ttl time.Duration) (policy.Claim, error) {
	if err := policy.CheckDurations(lease, ttl); err != nil {
		return policy.Claim{}, err
	}
	if err := ctx.Err(); err != nil {
		return policy.Claim{}, redisError(op, err) // nothing was sent
	}
	// Drawn before the first try: a retry of the script carries it too, and
	// finds the record its first run created as its own.
	token := rand.Text()
	key := s.key(k)
	res, err := script.Run(ctx, s.client, []string{key}, token, fp.String(), millis(lease), millis(ttl)).Slice()
	var created bool
	var value string
	if err == nil {
		created, value, err = claimReply(res)
	}
	if err != nil {
		return policy.Claim{}, s.withdraw(ctx, op, key, token, lease, err)
	}
	r, released, ok := decodeRedisRecord(value)
	switch {
	case !ok:
		return policy.Claim{Outcome: policy.ClaimUnknown, Record: r}, nil
	case released:
		// Only this token's own tombstone is reported: the claim ran after
		// it was withdrawn, which a single Claim cannot see.
		return policy.Claim{}, redisError(op, policy.ErrLostClaim)
	case created && r.Token == token:
		if s.replicas > 0 {
			if err := s.confirm(ctx, key, token); err != nil {
				return policy.Claim{}, s.withdrawUnconfirmed(ctx, op, key, token, lease, err)
			}
		}
		return policy.Claim{Outcome: policy.ClaimOwned, Token: token, Record: r}, nil
	}
	return policy.ClaimFor(r), nil
}

// withdraw releases the claim of token after its script call failed with
// err: the claim may have run, or may still run. It returns err, noting a
// failed withdrawal.
func (s *Store) withdraw(ctx context.Context, op, key, token string, lease time.Duration, err error) error {
	if neverSent(err) {
		return redisError(op, err)
	}
	// An error Redis answered was a refused script (see answered): one
	// release is enough, without retries in the background.
	return s.release(ctx, op, key, token, lease, err, !answered(err))
}

// release releases the claim of token after err, and returns err, noting
// a release that failed too; with retry, a failed release is tried again
// in the background.
func (s *Store) release(ctx context.Context, op, key, token string, lease time.Duration, err error, retry bool) error {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), withdrawTimeout)
	defer cancel()
	werr := s.scripts.release.Run(wctx, s.client, []string{key}, token, millis(lease)).Err()
	switch {
	case werr == nil:
		return redisError(op, err)
	case retry && s.withdrawLater(key, token, lease):
		return fmt.Errorf("redis idempotency store: %s: %w (withdrawing the claim failed too, trying again in the background: %v)", op, err, werr)
	}
	return fmt.Errorf("redis idempotency store: %s: %w (withdrawing the claim failed too: %v)", op, err, werr)
}

// withdrawLater keeps trying to release the claim of token until that
// succeeds, its lease is over or the store closes. It reports false when
// too many withdrawals are pending already.
func (s *Store) withdrawLater(key, token string, lease time.Duration) bool {
	select {
	case s.bgSlots <- struct{}{}:
	default:
		return false
	}
	until := time.Now().Add(lease)
	s.bg.Go(func() {
		defer func() { <-s.bgSlots }()
		delay := 50 * time.Millisecond
		timer := time.NewTimer(delay)
		defer timer.Stop()
		for {
			select {
			case <-s.life.Done():
				return
			case <-timer.C:
			}
			ctx, cancel := context.WithTimeout(s.life, withdrawTimeout)
			err := s.scripts.release.Run(ctx, s.client, []string{key}, token, millis(lease)).Err()
			cancel()
			if err == nil || !time.Now().Before(until) {
				return
			}
			delay = min(2*delay, time.Second)
			timer.Reset(delay)
		}
	})
	return true
}

// neverSent reports an error that proves the command was not written: the
// connection could not even be dialled.
func neverSent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// answered reports an error Redis itself returned (out of memory, a
// read-only replica): the script was refused before its first write. Only
// an earlier try whose reply was lost may have run, which is rare enough
// for one withdrawal, without retries in the background.
func answered(err error) bool {
	var answer redis.Error
	return errors.As(err, &answer)
}

// Complete implements policy.IdempotencyStore.
func (s *Store) Complete(ctx context.Context, k policy.IdempotencyKey, token string, envelope []byte, ttl time.Duration) error {
	return s.finish(ctx, "complete", k, token, "C", envelope, ttl)
}

// MarkUnknown implements policy.IdempotencyStore.
func (s *Store) MarkUnknown(ctx context.Context, k policy.IdempotencyKey, token string, envelope []byte, ttl time.Duration) error {
	return s.finish(ctx, "mark unknown", k, token, "U", envelope, ttl)
}

func (s *Store) finish(ctx context.Context, op string, k policy.IdempotencyKey, token, state string, envelope []byte, ttl time.Duration) error {
	if err := policy.CheckTTL(ttl); err != nil {
		return err
	}
	if token == "" {
		return policy.ErrLostClaim
	}
	if envelope == nil {
		envelope = []byte{}
	}
	n, err := s.scripts.finish.Run(ctx, s.client, []string{s.key(k)}, token, state, millis(ttl), envelope).Int()
	if err != nil {
		return redisError(op, err)
	}
	if n != 1 {
		return policy.ErrLostClaim
	}
	return nil
}

// Release implements policy.IdempotencyStore.
func (s *Store) Release(ctx context.Context, k policy.IdempotencyKey, token string) error {
	if token == "" {
		return policy.ErrLostClaim
	}
	key := s.key(k)
	n, err := s.scripts.release.Run(ctx, s.client, []string{key}, token, 0).Int()
	if err != nil {
		// A claim left in flight would read as unknown once its lease ran
		// out, although nothing was sent: keep trying in the background, as
		// for a claim whose own reply was lost.
		if !answered(err) && !neverSent(err) && s.withdrawLater(key, token, releaseRetryWindow) {
			return fmt.Errorf("redis idempotency store: release: %w (trying again in the background)", err)
		}
		return redisError("release", err)
	}
	if n != 1 {
		return policy.ErrLostClaim
	}
	return nil
}

// Get implements policy.IdempotencyStore.
func (s *Store) Get(ctx context.Context, k policy.IdempotencyKey) (policy.Record, bool, error) {
	r, ok, err := s.get(ctx, s.key(k))
	if err != nil {
		return policy.Record{}, false, redisError("get", err)
	}
	return r, ok, nil
}

func (s *Store) get(ctx context.Context, key string) (policy.Record, bool, error) {
	value, err := s.scripts.get.Run(ctx, s.client, []string{key}).Text()
	if errors.Is(err, redis.Nil) {
		return policy.Record{}, false, nil
	}
	if err != nil {
		return policy.Record{}, false, err
	}
	r, released, _ := decodeRedisRecord(value)
	if released {
		return policy.Record{}, false, nil
	}
	return r, true, nil
}

// Wait implements policy.IdempotencyStore by polling.
func (s *Store) Wait(ctx context.Context, k policy.IdempotencyKey) (policy.Record, error) {
	key := s.key(k)
	delay := minWaitPoll
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		r, ok, err := s.get(ctx, key)
		switch {
		case ctx.Err() != nil:
			return policy.Record{}, ctx.Err()
		case err != nil:
			return policy.Record{}, redisError("wait", err)
		case !ok:
			return policy.Record{}, policy.ErrNoRecord
		case r.State != policy.RecordInFlight:
			return r, nil
		}
		if timer == nil {
			timer = time.NewTimer(delay)
		} else {
			timer.Reset(delay)
		}
		select {
		case <-timer.C:
		case <-ctx.Done():
			return policy.Record{}, ctx.Err()
		}
		delay = min(2*delay, s.maxPoll)
	}
}

// Ping implements policy.IdempotencyStore with a write: a Redis that answers but
// refuses writes (out of memory, a read-only replica) fails every claim, so
// it is not ready either.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.client.Set(ctx, s.probeKey, "1", probeTTL).Err(); err != nil {
		return redisError("write probe", err)
	}
	return nil
}

// scopeKeyRead is a scope key as a store last read it from Redis.
type scopeKeyRead struct {
	key []byte
	at  time.Time
}

// ScopeKey implements policy.IdempotencyStore: the key in Redis (see Store).
// A store that holds a key uses it while a check is due or under way, and
// keeps it when a check fails (the call's own store commands then say
// whether Redis answers); one that holds none yet fails when Redis does.
func (s *Store) ScopeKey(ctx context.Context) ([]byte, error) {
	cur := s.scope.Load()
	now := s.now()
	if cur != nil && now.Sub(cur.at) < scopeKeyCheck {
		return cur.key, nil
	}
	propose := s.scopeDraw
	if cur != nil {
		if !s.scopeCheck.CompareAndSwap(false, true) {
			return cur.key, nil // another call checks it
		}
		defer s.scopeCheck.Store(false)
		propose = string(cur.key)
	}
	v, err := s.scripts.scopeKey.Run(ctx, s.client, []string{s.prefix + ScopeKeyName}, propose).Text()
	if err == nil && len(v) < policy.MinScopeKeyLen {
		err = fmt.Errorf("the key %s holds %d bytes, fewer than %d", s.prefix+ScopeKeyName, len(v), policy.MinScopeKeyLen)
	}
	if err != nil {
		if cur != nil {
			s.scope.Store(&scopeKeyRead{key: cur.key, at: now})
			return cur.key, nil
		}
		return nil, redisError("scope key", err)
	}
	if cur != nil && v == string(cur.key) {
		s.scope.Store(&scopeKeyRead{key: cur.key, at: now})
		return cur.key, nil
	}
	key := []byte(v)
	s.scope.Store(&scopeKeyRead{key: key, at: now})
	return key, nil
}

// Close stops the background withdrawals and closes the Redis client.
func (s *Store) Close() error {
	s.stop()
	s.bg.Wait()
	return s.client.Close()
}

// Key returns the Redis key that holds k's record: for operators reading
// Redis, and for tests that need to know its hash slot.
func (s *Store) Key(k policy.IdempotencyKey) string { return s.key(k) }

// key returns the Redis key of k. Each part is hashed with its length in
// front, so no choice of caller, tool, key and scope can collide with
// another. A key without a scope hashes its three parts only, as before
// scopes existed, so records written then are still found; three parts
// can never read as four, since the lengths delimit them.
func (s *Store) key(k policy.IdempotencyKey) string {
	h := sha256.New()
	var n [binary.MaxVarintLen64]byte
	parts := [...]string{k.Caller, k.Tool, k.Key, k.Scope}
	count := len(parts)
	if k.Scope == "" {
		count--
	}
	for _, part := range parts[:count] {
		h.Write(n[:binary.PutUvarint(n[:], uint64(len(part)))])
		h.Write([]byte(part))
	}
	var sum [sha256.Size]byte
	return s.prefix + hex.EncodeToString(h.Sum(sum[:0]))
}

// claimReply unpacks a {created, value} reply of the claim scripts.
func claimReply(res []any) (created bool, value string, err error) {
	if len(res) != 2 {
		return false, "", fmt.Errorf("unexpected script reply %v", res)
	}
	n, ok1 := res[0].(int64)
	v, ok2 := res[1].(string)
	if !ok1 || !ok2 {
		return false, "", fmt.Errorf("unexpected script reply %v", res)
	}
	return n == 1, v, nil
}

// decodeRedisRecord decodes a record value. released reports a tombstone,
// which stands for no record; its Token is the releasing token. A value it
// cannot read gives an unknown record with a zero fingerprint and ok=false.
// policy.Record.Token is set for in-flight records only, as policy.IdempotencyStore
// promises; the token that finished a record stays in Redis.
func decodeRedisRecord(v string) (r policy.Record, released, ok bool) {
	unreadable := policy.Record{State: policy.RecordUnknown}
	f := strings.SplitN(v, ":", 8)
	if len(f) != 8 || f[0] != "1" {
		return unreadable, false, false
	}
	switch f[1] {
	case "F":
		r.State = policy.RecordInFlight
	case "C":
		r.State = policy.RecordCompleted
	case "U":
		r.State = policy.RecordUnknown
	case "R":
		released = true
	default:
		return unreadable, false, false
	}
	if len(f[2]) != 2*len(r.Fingerprint) {
		return unreadable, false, false
	}
	if _, err := hex.Decode(r.Fingerprint[:], []byte(f[2])); err != nil {
		return unreadable, false, false
	}
	if !isAlphanumeric(f[3]) || (r.State == policy.RecordInFlight || released) && f[3] == "" {
		return unreadable, false, false
	}
	lease, ok1 := parseMillis(f[4])
	_, ok2 := parseMillis(f[5])
	updated, ok3 := parseMillis(f[6])
	if !ok1 || !ok2 || !ok3 {
		return unreadable, false, false
	}
	if released {
		return policy.Record{Token: f[3]}, true, true
	}
	r.UpdatedAt = time.UnixMilli(updated)
	if r.State == policy.RecordInFlight {
		r.Token = f[3]
		r.LeaseUntil = time.UnixMilli(lease)
	}
	if f[7] != "" {
		r.Envelope = []byte(f[7])
	}
	return r, false, true
}

func isAlphanumeric(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z') {
			return false
		}
	}
	return true
}

// parseMillis parses a non-negative decimal, as the Lua pattern %d+ accepts.
func parseMillis(s string) (int64, bool) {
	if s == "" || s[0] < '0' || s[0] > '9' {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

// millis rounds d up to whole milliseconds, Redis's resolution.
func millis(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

func redisError(op string, err error) error {
	return fmt.Errorf("redis idempotency store: %s: %w", op, err)
}
