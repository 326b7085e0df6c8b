package config

import (
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/toolgate/toolgate/policy"
)

// This file compiles the upstreams: the backends' URLs, timeouts,
// bulkheads, static headers, breakers and retries. Their credentials
// (auth, tls, forward_headers) are upstream_auth.go's.

// upstream checks and builds one backend: its URL carries no credentials
// (they belong in auth, which is never logged), its static headers must be
// writable on the wire, and the breaker and retry settings replace the
// defaults only when given. A nil result means the upstream had errors;
// the tools that name it are still checked.
func (c *compiler) upstream(name string, s *upstreamSpec, callerHeader string) *policy.Upstream {
	base := "upstreams." + name
	if s == nil {
		c.errorAt(base, "must not be empty")
		return nil
	}
	n := len(c.errs)
	u, err := url.Parse(s.URL)
	switch {
	case s.URL == "":
		c.errorAt(base+".url", "is required")
	case err != nil:
		c.errorAt(base+".url", "%q is not a URL", s.URL)
	case u.Scheme != "http" && u.Scheme != "https":
		c.errorAt(base+".url", "must be an http:// or https:// URL")
	case u.Host == "":
		c.errorAt(base+".url", "has no host")
	case u.RawQuery != "" || u.Fragment != "" || u.User != nil:
		c.errorAt(base+".url", "must not carry a query, fragment or credentials (use auth for credentials)")
	}
	if s.Timeout <= 0 {
		c.errorAt(base+".timeout", "must be positive")
	}
	if s.MaxConcurrent <= 0 {
		c.errorAt(base+".max_concurrent", "must be positive")
	}
	perCaller := policy.DefaultMaxConcurrentPerCaller(s.MaxConcurrent)
	switch {
	case s.MaxConcurrentPerCaller < 0:
		c.errorAt(base+".max_concurrent_per_caller", "must be positive")
	case s.MaxConcurrentPerCaller > 0 && s.MaxConcurrent > 0 && s.MaxConcurrentPerCaller > s.MaxConcurrent:
		c.errorAt(base+".max_concurrent_per_caller", "must be at most max_concurrent (%d)", s.MaxConcurrent)
	case s.MaxConcurrentPerCaller > 0:
		perCaller = s.MaxConcurrentPerCaller
	}
	headers := http.Header{}
	var headerSecrets []string
	for _, k := range slices.Sorted(maps.Keys(s.Headers)) {
		if !headerNameRE.MatchString(k) {
			c.errorAt(base+".headers."+k, "%q is not a valid header name", k)
			continue
		}
		if strings.ContainsAny(s.Headers[k], "\r\n\x00") {
			c.errorAt(base+".headers."+k, "header value must not contain CR, LF or NUL")
			continue
		}
		headers.Set(k, s.Headers[k])
		headerSecrets = append(headerSecrets, c.envValues[base+".headers."+k]...)
	}
	up := &policy.Upstream{
		Name:                   name,
		URL:                    u,
		Timeout:                time.Duration(s.Timeout),
		MaxConcurrent:          s.MaxConcurrent,
		MaxConcurrentPerCaller: perCaller,
		Headers:                headers,
		HeaderSecrets:          headerSecrets,
		Breaker:                policy.DefaultBreakerSettings(),
		Retries:                policy.DefaultRetrySettings(),
	}
	if b := s.Breaker; b != nil {
		if b.FailureRatio < 0 || b.FailureRatio > 1 {
			c.errorAt(base+".breaker.failure_ratio", "must be between 0 and 1")
		}
		if b.OpenFor <= 0 {
			c.errorAt(base+".breaker.open_for", "must be positive")
		}
		if b.HalfOpenRequests == 0 {
			c.errorAt(base+".breaker.half_open_requests", "must be at least 1")
		}
		up.Breaker = policy.BreakerSettings{
			ConsecutiveFailures: b.ConsecutiveFailures,
			FailureRatio:        b.FailureRatio,
			MinRequests:         b.MinRequests,
			Window:              time.Duration(b.Window),
			OpenFor:             time.Duration(b.OpenFor),
			HalfOpenRequests:    b.HalfOpenRequests,
		}
	}
	if r := s.Retries; r != nil {
		if r.Attempts < 1 || r.Attempts > 10 {
			c.errorAt(base+".retries.attempts", "must be between 1 and 10 (the total number of attempts)")
		}
		if r.MaxBackoff < r.Backoff {
			c.errorAt(base+".retries.max_backoff", "must not be less than backoff")
		}
		up.Retries = policy.RetrySettings{Attempts: r.Attempts, Backoff: time.Duration(r.Backoff), MaxBackoff: time.Duration(r.MaxBackoff)}
	}
	if err != nil {
		u = nil
	}
	c.upstreamAuth(base, s, u, up, callerHeader)
	if len(c.errs) > n {
		return nil
	}
	return up
}
