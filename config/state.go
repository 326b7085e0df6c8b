package config

import (
	"cmp"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/toolgate/toolgate/policy"
)

// This file compiles the state section: the idempotency, budget and rate
// store (memory or Redis: one server, a Cluster or a Sentinel) and its
// bounds.

// state checks where idempotency records, budgets and shared rate limits
// live. Confirmation on replicas needs Redis; a memory store must be
// bounded, since its records are held for every caller until they expire.
func (c *compiler) state(s *stateSpec) policy.State {
	st := policy.State{Backend: s.Backend, OnError: s.OnError, ConfirmReplicas: s.ConfirmReplicas,
		ConfirmTimeout: time.Duration(s.ConfirmTimeout), MaxKeys: s.MaxKeys, MaxBytes: s.MaxBytes}
	switch s.Backend {
	case policy.BackendMemory:
	case policy.BackendRedis:
		st.RedisURL, st.Redis = c.redis(s)
	default:
		c.errorAt("state.backend", "%q is not valid (want memory or redis)", s.Backend)
	}
	switch s.OnError {
	case policy.OnErrorOpen, policy.OnErrorClosed:
	default:
		c.errorAt("state.on_error", "%q is not valid (want open or closed)", s.OnError)
	}
	if s.ConfirmReplicas < 0 {
		c.errorAt("state.confirm_replicas", "must not be negative")
	} else if s.ConfirmReplicas > 0 && s.Backend != policy.BackendRedis {
		c.errorAt("state.confirm_replicas", "needs backend redis")
	}
	if d := time.Duration(s.ConfirmTimeout); d < time.Millisecond || d > maxConfirmTimeout {
		c.errorAt("state.confirm_timeout", "must be between 1ms and %v", maxConfirmTimeout)
	}
	if s.MaxKeys <= 0 {
		c.errorAt("state.max_keys", "must be positive")
	}
	if s.MaxBytes <= 0 {
		c.errorAt("state.max_bytes", "must be positive")
	}
	st.ScopeKey = c.scopeKey(s.ScopeKey)
	return st
}

// scopeKey checks state.scope_key, the key forwarded identities are hashed
// with. It is judged by its length, never quoted.
func (c *compiler) scopeKey(key string) policy.Secret {
	switch {
	case key == "" && c.written("state.scope_key"):
		c.errorAt("state.scope_key", "is empty; remove it to use the store's own key, or set %d or more random characters (openssl rand -hex 32)", policy.MinScopeKeyLen)
	case key != "" && len(key) < policy.MinScopeKeyLen:
		c.errorAt("state.scope_key", "is %d bytes; it must be at least %d (openssl rand -hex 32 makes one)", len(key), policy.MinScopeKeyLen)
	}
	return policy.Secret{Value: key}
}

// maxConfirmTimeout bounds state.confirm_timeout: every side-effecting call
// may wait that long before it is sent, and the wait must end well within
// the Redis client's 3s read timeout.
const maxConfirmTimeout = 2 * time.Second

// redis checks the Redis a redis backend names: exactly one of a URL
// (state.redis.url, or the older state.redis_url), a Cluster's seed
// addresses and a Sentinel.
func (c *compiler) redis(s *stateSpec) (string, policy.RedisSettings) {
	r := s.Redis
	if r == nil {
		r = &redisSpec{}
	}
	kinds := 0
	for _, set := range []bool{s.RedisURL != "", r.URL != "", len(r.Cluster) > 0, r.Sentinel != nil} {
		if set {
			kinds++
		}
	}
	switch {
	case kinds == 0 && s.Redis == nil:
		c.errorAt("state.redis", "is required with backend redis: a url, a cluster or a sentinel")
		return "", policy.RedisSettings{}
	case kinds == 0:
		c.errorAt("state.redis", "needs a url, a cluster or a sentinel")
		return "", policy.RedisSettings{}
	case kinds > 1:
		path := "state.redis"
		if s.RedisURL != "" {
			path = "state.redis_url"
		}
		c.errorAt(path, "name one Redis: redis_url, redis.url, redis.cluster or redis.sentinel")
		return "", policy.RedisSettings{}
	}
	if u := cmp.Or(s.RedisURL, r.URL); u != "" {
		path := "state.redis.url"
		if s.RedisURL != "" {
			path = "state.redis_url"
		}
		if pu, err := url.Parse(u); err != nil || (pu.Scheme != "redis" && pu.Scheme != "rediss" && pu.Scheme != "unix") {
			c.errorAt(path, "must be a redis://, rediss:// or unix:// URL")
		}
		if r.Username != "" || r.Password != "" || r.TLS || r.DB != 0 {
			c.errorAt("state.redis", "with a url, put the username, password, database and TLS (rediss://) in the URL")
		}
		return u, policy.RedisSettings{}
	}
	out := policy.RedisSettings{Username: r.Username, Password: r.Password, TLS: r.TLS, DB: r.DB}
	if len(r.Cluster) > 0 {
		c.addrs("state.redis.cluster", r.Cluster)
		out.Cluster = strings.Join(r.Cluster, ",")
		if r.DB != 0 {
			c.errorAt("state.redis.db", "a Redis Cluster has only database 0")
		}
		return "", out
	}
	sn := r.Sentinel
	if sn.Master == "" {
		c.errorAt("state.redis.sentinel", "master is required: the name the Sentinels monitor the primary by")
	}
	if len(sn.Addresses) == 0 {
		c.errorAt("state.redis.sentinel", "addresses is required: the Sentinels' host:port")
	}
	c.addrs("state.redis.sentinel.addresses", sn.Addresses)
	if r.DB < 0 {
		c.errorAt("state.redis.db", "must not be negative")
	}
	out.SentinelMaster, out.Sentinels = sn.Master, strings.Join(sn.Addresses, ",")
	out.SentinelUsername, out.SentinelPassword = sn.Username, sn.Password
	return "", out
}

// addrs checks a list of host:port addresses.
func (c *compiler) addrs(path string, addrs []string) {
	for i, a := range addrs {
		host, port, err := net.SplitHostPort(a)
		if n, perr := strconv.Atoi(port); err != nil || host == "" || perr != nil || n < 1 || n > 65535 || strings.ContainsAny(a, ", ") {
			c.errorAt(fmt.Sprintf("%s[%d]", path, i), "%q is not a host:port address", a)
		}
	}
}
