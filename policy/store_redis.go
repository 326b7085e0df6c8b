package policy

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultRedisPrefix is the Redis store's key prefix when RedisOptions.Prefix
// is not set.
const DefaultRedisPrefix = "toolgate:idem:"

// Wait's polling interval starts at minWaitPoll and doubles up to
// RedisOptions.MaxWaitPoll, by default defaultMaxWaitPoll.
const (
	minWaitPoll        = 5 * time.Millisecond
	defaultMaxWaitPoll = 100 * time.Millisecond
)

// RedisOptions configures a RedisStore. The zero value is usable.
type RedisOptions struct {
	// Prefix is prepended to every key. Empty means DefaultRedisPrefix.
	Prefix string
	// MaxWaitPoll caps the interval at which Wait re-reads an in-flight
	// record; polls start at 5ms and double. Zero or less means 100ms.
	MaxWaitPoll time.Duration
}

// RedisStore is an IdempotencyStore in Redis (5 or newer, standalone,
// Sentinel or Cluster: every operation touches one key), shared by the
// replicas of a service.
//
// Each record is one string key: the prefix and the hex SHA-256 of the
// length-prefixed caller, tool and key, so its length is bounded whatever the
// inputs. Every operation is one Lua script, so it is atomic and reads the
// lease deadline from the Redis server's clock, never a replica's. A claim
// creates the key with PX lease+ttl: the key must outlive its lease so that a
// lease that ran out is seen and turned into unknown (then kept for ttl)
// rather than silently vanishing and letting a second call run. Every later
// write re-applies PX ttl. A value the store cannot decode is reported as
// unknown with a zero fingerprint, never as success, and no token owns it.
//
// Wait polls, starting at 5ms and doubling up to MaxWaitPoll, bounded by its
// context: a waiter on another replica sees the result at most MaxWaitPoll
// after it is stored, at the cost of one small script call per poll.
type RedisStore struct {
	client  redis.UniversalClient
	scripts redisScripts
	prefix  string
	maxPoll time.Duration
}

var _ IdempotencyStore = (*RedisStore)(nil)

// NewRedisStore returns a store over client and takes ownership of it: Close
// closes the client.
func NewRedisStore(client redis.UniversalClient, opts RedisOptions) *RedisStore {
	if opts.Prefix == "" {
		opts.Prefix = DefaultRedisPrefix
	}
	if opts.MaxWaitPoll <= 0 {
		opts.MaxWaitPoll = defaultMaxWaitPoll
	}
	return &RedisStore{
		client:  client,
		scripts: newRedisScripts(),
		prefix:  opts.Prefix,
		maxPoll: opts.MaxWaitPoll,
	}
}

// The record value is
//
//	1:<state>:<fingerprint>:<token>:<lease until>:<ttl>:<updated at>:<envelope>
//
// with state F (in flight), C (completed) or U (unknown), the fingerprint in
// 64 hex digits, the owner token (base32, empty unless in flight), the lease
// deadline (0 unless in flight), the retention and the time of the write in
// milliseconds (times on the Redis server's clock since the Unix epoch), and
// the envelope bytes, verbatim, to the end of the value. It reads well in
// redis-cli and Lua parses it with one pattern.
const luaPrelude = `
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- parse returns the fields a script needs, or nil for a value it cannot read.
local function parse(v)
  local st, fp, tok, lease, ttl = string.match(v, '^1:([FCU]):(%x+):(%w*):(%d+):(%d+):%d+:')
  if not st or #fp ~= 64 or (st == 'F' and tok == '') then return nil end
  return {st = st, fp = fp, tok = tok, lease = tonumber(lease), ttl = tonumber(ttl)}
end

local function encode(st, fp, tok, lease, ttl, now, envelope)
  return string.format('1:%s:%s:%s:%d:%d:%d:', st, fp, tok, lease, ttl, now) .. envelope
end

-- observe returns the value of KEYS[1] (false when there is none), after
-- turning an in-flight record whose lease ran out into an unknown one: its
-- owner died mid-call, so the effect may have happened.
local function observe(now)
  local v = redis.call('GET', KEYS[1])
  if not v then return false end
  local r = parse(v)
  if r and r.st == 'F' and now >= r.lease then
    v = encode('U', r.fp, '', 0, r.ttl, now, '')
    redis.call('SET', KEYS[1], v, 'PX', r.ttl)
  end
  return v
end

-- create stores a fresh in-flight record. ARGV: token, fingerprint, lease ms, ttl ms.
local function create(now)
  local lease, ttl = tonumber(ARGV[3]), tonumber(ARGV[4])
  local v = encode('F', ARGV[2], ARGV[1], now + lease, ttl, now, '')
  redis.call('SET', KEYS[1], v, 'PX', lease + ttl)
  return {1, v}
end

-- owned returns the record of KEYS[1] if the token ARGV[1] owns it.
local function owned()
  local v = redis.call('GET', KEYS[1])
  if not v then return nil end
  local r = parse(v)
  if not r or r.st ~= 'F' or r.tok ~= ARGV[1] then return nil end
  return r
end
`

// The scripts' bodies; each runs after luaPrelude.
const (
	// luaClaim creates the record unless one exists; the script's GET and SET
	// run atomically, which is what SET NX gives a bare command. Returns
	// {1, new value} or {0, existing value}.
	luaClaim = `
local now = now_ms()
local v = observe(now)
if v then return {0, v} end
return create(now)
`

	// luaReclaim takes over a record that is absent, unknown with the same
	// fingerprint (a lease that ran out is unknown by then) or undecodable;
	// otherwise it reports the record as luaClaim does.
	luaReclaim = `
local now = now_ms()
local v = observe(now)
if v then
  local r = parse(v)
  if r and not (r.st == 'U' and r.fp == ARGV[2]) then return {0, v} end
end
return create(now)
`

	// luaFinish completes or marks unknown a record the token owns.
	// ARGV: token, state (C or U), ttl ms, envelope. Returns 1, or 0 when the
	// claim is lost.
	luaFinish = `
local r = owned()
if not r then return 0 end
redis.call('SET', KEYS[1], encode(ARGV[2], r.fp, '', 0, tonumber(ARGV[3]), now_ms(), ARGV[4]), 'PX', ARGV[3])
return 1
`

	// luaRelease deletes a record the token ARGV[1] owns. Returns 1, or 0
	// when the claim is lost.
	luaRelease = `
if not owned() then return 0 end
redis.call('DEL', KEYS[1])
return 1
`

	// luaGet returns the value, converting a lease that ran out, or nil.
	luaGet = `
return observe(now_ms())
`
)

// redisScripts are the store's scripts, run with EVALSHA (EVAL when the
// server does not know them yet, as after a restart).
type redisScripts struct {
	claim, reclaim, finish, release, get *redis.Script
}

func newRedisScripts() redisScripts {
	return redisScripts{
		claim:   redis.NewScript(luaPrelude + luaClaim),
		reclaim: redis.NewScript(luaPrelude + luaReclaim),
		finish:  redis.NewScript(luaPrelude + luaFinish),
		release: redis.NewScript(luaPrelude + luaRelease),
		get:     redis.NewScript(luaPrelude + luaGet),
	}
}

// Claim implements IdempotencyStore.
func (s *RedisStore) Claim(ctx context.Context, k IdempotencyKey, fp Fingerprint, lease, ttl time.Duration) (Claim, error) {
	return s.claim(ctx, s.scripts.claim, "claim", k, fp, lease, ttl)
}

// Reclaim implements IdempotencyStore.
func (s *RedisStore) Reclaim(ctx context.Context, k IdempotencyKey, fp Fingerprint, lease, ttl time.Duration) (Claim, error) {
	return s.claim(ctx, s.scripts.reclaim, "reclaim", k, fp, lease, ttl)
}

func (s *RedisStore) claim(ctx context.Context, script *redis.Script, op string, k IdempotencyKey, fp Fingerprint, lease, ttl time.Duration) (Claim, error) {
	if err := checkDurations(lease, ttl); err != nil {
		return Claim{}, err
	}
	token := rand.Text()
	res, err := script.Run(ctx, s.client, []string{s.key(k)}, token, fp.String(), millis(lease), millis(ttl)).Slice()
	if err != nil {
		return Claim{}, redisError(op, err)
	}
	created, value, err := claimReply(res)
	if err != nil {
		return Claim{}, redisError(op, err)
	}
	r, ok := decodeRedisRecord(value)
	if !ok {
		return Claim{Outcome: ClaimUnknown, Record: r}, nil
	}
	if created && r.Token == token {
		return Claim{Outcome: ClaimOwned, Token: token, Record: r}, nil
	}
	return claimFor(r), nil
}

// Complete implements IdempotencyStore.
func (s *RedisStore) Complete(ctx context.Context, k IdempotencyKey, token string, envelope []byte, ttl time.Duration) error {
	return s.finish(ctx, "complete", k, token, "C", envelope, ttl)
}

// MarkUnknown implements IdempotencyStore.
func (s *RedisStore) MarkUnknown(ctx context.Context, k IdempotencyKey, token string, envelope []byte, ttl time.Duration) error {
	return s.finish(ctx, "mark unknown", k, token, "U", envelope, ttl)
}

func (s *RedisStore) finish(ctx context.Context, op string, k IdempotencyKey, token, state string, envelope []byte, ttl time.Duration) error {
	if err := checkTTL(ttl); err != nil {
		return err
	}
	if envelope == nil {
		envelope = []byte{}
	}
	n, err := s.scripts.finish.Run(ctx, s.client, []string{s.key(k)}, token, state, millis(ttl), envelope).Int()
	if err != nil {
		return redisError(op, err)
	}
	if n != 1 {
		return ErrLostClaim
	}
	return nil
}

// Release implements IdempotencyStore.
func (s *RedisStore) Release(ctx context.Context, k IdempotencyKey, token string) error {
	n, err := s.scripts.release.Run(ctx, s.client, []string{s.key(k)}, token).Int()
	if err != nil {
		return redisError("release", err)
	}
	if n != 1 {
		return ErrLostClaim
	}
	return nil
}

// Get implements IdempotencyStore.
func (s *RedisStore) Get(ctx context.Context, k IdempotencyKey) (Record, bool, error) {
	r, ok, err := s.get(ctx, s.key(k))
	if err != nil {
		return Record{}, false, redisError("get", err)
	}
	return r, ok, nil
}

func (s *RedisStore) get(ctx context.Context, key string) (Record, bool, error) {
	value, err := s.scripts.get.Run(ctx, s.client, []string{key}).Text()
	if errors.Is(err, redis.Nil) {
		return Record{}, false, nil
	}
	if err != nil {
		return Record{}, false, err
	}
	r, _ := decodeRedisRecord(value)
	return r, true, nil
}

// Wait implements IdempotencyStore by polling.
func (s *RedisStore) Wait(ctx context.Context, k IdempotencyKey) (Record, error) {
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
			return Record{}, ctx.Err()
		case err != nil:
			return Record{}, redisError("wait", err)
		case !ok:
			return Record{}, ErrNoRecord
		case r.State != RecordInFlight:
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
			return Record{}, ctx.Err()
		}
		delay = min(2*delay, s.maxPoll)
	}
}

// Ping implements IdempotencyStore.
func (s *RedisStore) Ping(ctx context.Context) error {
	if err := s.client.Ping(ctx).Err(); err != nil {
		return redisError("ping", err)
	}
	return nil
}

// Close closes the Redis client.
func (s *RedisStore) Close() error {
	return s.client.Close()
}

// key returns the Redis key of k. Each part is hashed with its length in
// front, so no choice of caller, tool and key can collide with another.
func (s *RedisStore) key(k IdempotencyKey) string {
	h := sha256.New()
	var n [binary.MaxVarintLen64]byte
	for _, part := range [...]string{k.Caller, k.Tool, k.Key} {
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

// decodeRedisRecord decodes a record value. A value it cannot read gives an
// unknown record with a zero fingerprint and false.
func decodeRedisRecord(v string) (Record, bool) {
	unreadable := Record{State: RecordUnknown}
	f := strings.SplitN(v, ":", 8)
	if len(f) != 8 || f[0] != "1" {
		return unreadable, false
	}
	var r Record
	switch f[1] {
	case "F":
		r.State = RecordInFlight
	case "C":
		r.State = RecordCompleted
	case "U":
		r.State = RecordUnknown
	default:
		return unreadable, false
	}
	if len(f[2]) != 2*len(r.Fingerprint) {
		return unreadable, false
	}
	if _, err := hex.Decode(r.Fingerprint[:], []byte(f[2])); err != nil {
		return unreadable, false
	}
	if !isAlphanumeric(f[3]) || (r.State == RecordInFlight) != (f[3] != "") {
		return unreadable, false
	}
	lease, ok1 := parseMillis(f[4])
	_, ok2 := parseMillis(f[5])
	updated, ok3 := parseMillis(f[6])
	if !ok1 || !ok2 || !ok3 {
		return unreadable, false
	}
	r.UpdatedAt = time.UnixMilli(updated)
	if r.State == RecordInFlight {
		r.Token = f[3]
		r.LeaseUntil = time.UnixMilli(lease)
	}
	if f[7] != "" {
		r.Envelope = []byte(f[7])
	}
	return r, true
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
