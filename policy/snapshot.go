// Package policy holds the rules around a call: the compiled policy snapshot
// (server settings, upstreams, tools, callers), circuit breakers and the
// retry policy, access control, rate limits and cost budgets, and the
// idempotency stores: the interfaces every state store implements
// (IdempotencyStore, BudgetStore, RateLimiter) and their memory
// implementations. The Redis implementations are package
// policy/redisstate; every store passes the same conformance suites
// (internal/testkit/statetest).
//
// A Snapshot is immutable once built; the runtime state that must survive a
// reload (breakers, limiters, budgets, idempotency records) is kept outside
// it, keyed by the names the snapshot uses.
package policy

import (
	"net/http"
	"net/url"
	"time"

	"github.com/toolgate/toolgate/contracts"
)

// Snapshot is one compiled policy: everything a call needs to know, checked
// and compiled at load time.
type Snapshot struct {
	Server    Server
	State     State
	Upstreams map[string]*Upstream
	Tools     map[string]*contracts.Contract
	ToolNames []string // sorted
	Access    Access
	Catalog   *contracts.Catalog
	Checksum  string   // SHA-256 of the policy files' contents
	Sources   []string // the files the policy was read from
	// ToolOrigins says where each tool is defined (the admin console
	// shows it); a tool compiled from no file has none.
	ToolOrigins map[string]Origin
}

// Origin is where a policy entry is written: a file and a 1-based line.
type Origin struct {
	File string
	Line int
}

// Tool returns the named tool's contract, or nil.
func (s *Snapshot) Tool(name string) *contracts.Contract { return s.Tools[name] }

// Server is the `server` section.
type Server struct {
	Listen              string
	AdminListen         string
	CallerHeader        string
	CallerFrom          string // "header" or "xfcc"
	MaxRequestBytes     int64
	MaxResponseBytes    int64
	ObservationMaxChars int
	Messages            string // catalogue language
	HTTPStatus          string // "mapped" or "always_200"
	Transparent         bool
	Passthrough         []Passthrough
	Tracing             *TracingSettings // nil: tracing off
	// MaxConnections bounds the agent port's open connections; more wait
	// in the kernel's accept queue.
	MaxConnections int
	// ReadTimeout bounds reading a request's headers, and then its body.
	ReadTimeout time.Duration
	// WriteTimeout bounds each write of an answer to the client (not the
	// call before it).
	WriteTimeout time.Duration
	// IdleTimeout closes a keep-alive connection idle this long.
	IdleTimeout time.Duration
	// Learn is server.learn; nil: learning mode off.
	Learn *LearnSettings
	// AllowedHosts are Host names the agent port serves besides IP
	// literals, loopback names and the machine's name, lower case; a
	// "*.example.com" entry names the subdomains. Empty: any Host on a
	// listener that is not loopback.
	AllowedHosts []string
	// AdminAllowedHosts are Host names the admin port serves besides IP
	// literals, loopback names, the machine's name and the host of
	// AdminListen, in AllowedHosts' form.
	AdminAllowedHosts []string
	// AllowedOrigins are the browser origins (scheme://host[:port],
	// canonical) the agent port serves besides the request's own host and
	// loopback origins.
	AllowedOrigins []string
	// UpstreamClient is server.upstream_client: which client sends the
	// tool calls to plain-HTTP backends, UpstreamClientFast (toolgate's
	// own HTTP/1.1 client, also for "") or UpstreamClientNetHTTP.
	UpstreamClient string
	// Console is server.console: the admin port's console at /ui/.
	Console ConsoleSettings
}

// ConsoleSettings is server.console: the operator's console the admin
// port serves at /ui/ (package console).
type ConsoleSettings struct {
	// Disabled turns the console off (console.enabled: false): /ui/ is
	// then not found.
	Disabled bool
	// LiveCalls lets the console's playground call read-only tools for
	// real; side-effecting tools never. Off by default.
	LiveCalls bool
}

// The values of Server.UpstreamClient (server.upstream_client).
const (
	// UpstreamClientFast sends tool calls to plain-HTTP backends through
	// toolgate's HTTP/1.1 client, on the caller's goroutine; HTTPS
	// backends, and systems where a socket cannot be peeked, use net/http.
	UpstreamClientFast = "fast"
	// UpstreamClientNetHTTP sends every tool call through net/http's
	// transport.
	UpstreamClientNetHTTP = "nethttp"
)

// TracingSettings is server.tracing: where and how to export spans.
type TracingSettings struct {
	Endpoint      string // host:port of the OTLP receiver
	Protocol      string // "grpc" or "http"
	Insecure      bool   // plain text instead of TLS
	SamplingRatio float64
	Headers       map[string]string
	ServiceName   string
}

// Equal reports whether two tracing settings are the same (nil is off).
func (t *TracingSettings) Equal(o *TracingSettings) bool {
	if t == nil || o == nil {
		return t == o
	}
	if t.Endpoint != o.Endpoint || t.Protocol != o.Protocol || t.Insecure != o.Insecure ||
		t.SamplingRatio != o.SamplingRatio || t.ServiceName != o.ServiceName || len(t.Headers) != len(o.Headers) {
		return false
	}
	for k, v := range t.Headers {
		if o.Headers[k] != v {
			return false
		}
	}
	return true
}

// The values of Server.HTTPStatus.
const (
	HTTPStatusMapped    = "mapped"
	HTTPStatusAlways200 = "always_200"
)

// The values of Server.CallerFrom.
const (
	CallerFromHeader = "header"
	CallerFromXFCC   = "xfcc"
)

// Passthrough forwards requests under a path prefix untouched, in
// transparent mode.
type Passthrough struct {
	Prefix   string
	Upstream string
}

// State is the `state` section: where idempotency records, budgets and
// rate limits live. It is comparable (a reload compares it whole: it cannot
// change without a restart), so lists are kept as comma-separated strings.
type State struct {
	Backend string // "memory" or "redis"
	// RedisURL is the URL of a single Redis server (state.redis.url or
	// state.redis_url); empty when Redis names a Cluster or a Sentinel.
	RedisURL string
	// Redis names a Redis Cluster or a Sentinel-managed primary.
	Redis RedisSettings
	// OnError is what a rate-limit check does when Redis fails: OnErrorOpen
	// or OnErrorClosed. Idempotency and budgets always fail closed.
	OnError string
	// ConfirmReplicas is how many replicas must hold a claim before the
	// request is sent (WAIT); 0 sends without waiting.
	ConfirmReplicas int
	// ConfirmTimeout bounds that wait.
	ConfirmTimeout time.Duration
	MaxKeys        int   // the memory store's bound on completed records
	MaxBytes       int64 // the memory store's bound on their bytes
	// ScopeKey is state.scope_key: the key forwarded identities are hashed
	// with (IdentityScope), the same on every replica; empty for the
	// store's own (IdempotencyStore.ScopeKey).
	ScopeKey Secret
}

// The values of State.OnError (state.on_error).
const (
	// OnErrorOpen: a rate check that cannot reach Redis falls back to this
	// replica's own bucket, as with the memory backend.
	OnErrorOpen = "open"
	// OnErrorClosed: a rate check that cannot reach Redis refuses the call.
	OnErrorClosed = "closed"
)

// DefaultConfirmTimeout is State.ConfirmTimeout when state.confirm_timeout
// is not set.
const DefaultConfirmTimeout = 500 * time.Millisecond

// RedisSettings is state.redis for a Redis Cluster (Cluster set) or a
// primary that Sentinels manage (SentinelMaster set). With a single server
// (State.RedisURL) it is zero: the URL carries everything.
type RedisSettings struct {
	// Cluster holds the seed addresses (host:port) of a Cluster,
	// comma-separated.
	Cluster string
	// SentinelMaster is the name the Sentinels monitor the primary by;
	// Sentinels holds their addresses, comma-separated.
	SentinelMaster   string
	Sentinels        string
	SentinelUsername string
	SentinelPassword string
	// Username and Password authenticate to the data nodes.
	Username string
	Password string
	// TLS connects to every node (and Sentinel) with TLS.
	TLS bool
	// DB is the database number (Sentinel only; a Cluster has only 0).
	DB int
}

// The values of State.Backend.
const (
	BackendMemory = "memory"
	BackendRedis  = "redis"
)

// Upstream is one backend service.
type Upstream struct {
	Name          string
	URL           *url.URL
	Timeout       time.Duration
	MaxConcurrent int
	// MaxConcurrentPerCaller bounds the calls one caller may have in flight
	// to this upstream, so that no caller can take the whole bulkhead.
	MaxConcurrentPerCaller int
	Headers                http.Header
	// HeaderSecrets are the values of the ${VAR} references written in
	// Headers: secrets, which toolgate keeps out of what it says.
	HeaderSecrets []string
	Breaker       BreakerSettings
	Retries       RetrySettings
	// Auth is the upstream's default credential: added to every request of
	// its passthrough routes and of the tools that name no credential;
	// nil for none.
	Auth *UpstreamAuth
	// Credentials are the upstream's named credentials
	// (upstreams.<name>.credentials): a tool that names one
	// (tools.<name>.credential, contracts.Contract.Credential) sends it in
	// place of Auth. Nil for none.
	Credentials map[string]*UpstreamAuth
	// TLS is an https:// upstream's private CA, client certificate and
	// server name; nil for the system's roots and no client certificate.
	TLS *TLSSettings
	// ForwardHeaders are the agent's request headers (canonical names)
	// passed on to the backend when the agent sent them.
	ForwardHeaders []string
	// IdentityHeaders are the forwarded headers that identify the end user
	// (ForwardHeaders but those non_identifying_headers lists, in the same
	// order): what the agent sent in them scopes a side-effecting call's
	// idempotency key (IdentityScope).
	IdentityHeaders []string
}

// CredentialOf returns the credential a tool that names credential sends:
// the named one, or Auth for "". Nil for none (or a name the upstream does
// not hold, which the loader refuses).
func (u *Upstream) CredentialOf(credential string) *UpstreamAuth {
	if credential == "" {
		return u.Auth
	}
	return u.Credentials[credential]
}

// Access is the `access` section.
type Access struct {
	DefaultAllow bool
	// DefaultSet says access.default was written, rather than implied.
	DefaultSet bool
	Identities map[string]string // SPIFFE ID -> caller name
	Callers    map[string]*Caller
}

// Caller is one entry of access.callers.
type Caller struct {
	Name  string
	Tools []string // tool names, or "*"
	Rate  *RateSettings
	// ToolRates overrides Rate per tool.
	ToolRates map[string]RateSettings
	Budget    *BudgetSettings
}

// RateSettings is a token bucket: rps tokens per second, up to burst.
type RateSettings struct {
	RPS   float64
	Burst int
}

// BudgetSettings caps the sum of call costs over a fixed window.
type BudgetSettings struct {
	Cost float64
	Per  time.Duration
}

// CallerLabel is the caller's name as a metric label: callers the policy
// does not name are "unknown", so label values stay bounded.
func (a *Access) CallerLabel(caller string) string {
	if _, ok := a.Callers[caller]; ok {
		return caller
	}
	return "unknown"
}

// DefaultMaxConcurrentPerCaller is a caller's share of a bulkhead of
// maxConcurrent when the policy names none: all of it but an eighth, so
// that one caller can never take the slots every other caller needs, while
// a lone caller loses little. At least one.
func DefaultMaxConcurrentPerCaller(maxConcurrent int) int {
	return max(1, maxConcurrent-maxConcurrent/8)
}
