package config

import (
	"time"

	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/policy"
)

// fileSpec is one policy file as written. Defaults are set by the
// setDefaults methods, which the decoder calls when it allocates a section.
type fileSpec struct {
	Version   int                      `yaml:"version"`
	Server    *serverSpec              `yaml:"server"`
	State     *stateSpec               `yaml:"state"`
	Upstreams map[string]*upstreamSpec `yaml:"upstreams"`
	Tools     map[string]*toolSpec     `yaml:"tools"`
	Access    *accessSpec              `yaml:"access"`
}

type serverSpec struct {
	Listen              string            `yaml:"listen"`
	AdminListen         string            `yaml:"admin_listen"`
	CallerHeader        string            `yaml:"caller_header"`
	CallerFrom          string            `yaml:"caller_from"`
	MaxRequestBytes     int64             `yaml:"max_request_bytes"`
	MaxResponseBytes    int64             `yaml:"max_response_bytes"`
	ObservationMaxChars int               `yaml:"observation_max_chars"`
	CELCostLimit        int64             `yaml:"cel_cost_limit"`
	Messages            string            `yaml:"messages"`
	HTTPStatus          string            `yaml:"http_status"`
	Transparent         bool              `yaml:"transparent"`
	Passthrough         []passthroughSpec `yaml:"passthrough"`
	Tracing             *tracingSpec      `yaml:"tracing"`
	AllowedHosts        []string          `yaml:"allowed_hosts"`
	AllowedOrigins      []string          `yaml:"allowed_origins"`
	AdminAllowedHosts   []string          `yaml:"admin_allowed_hosts"`
	MaxConnections      int               `yaml:"max_connections"`
	ReadTimeout         duration          `yaml:"read_timeout"`
	WriteTimeout        duration          `yaml:"write_timeout"`
	IdleTimeout         duration          `yaml:"idle_timeout"`
	Learn               *learnSpec        `yaml:"learn"`
	UpstreamClient      string            `yaml:"upstream_client"`
	Console             *consoleSpec      `yaml:"console"`
}

// consoleSpec is server.console: the admin port's console. Absent means
// on, without live calls.
type consoleSpec struct {
	Enabled   *bool `yaml:"enabled"`
	LiveCalls bool  `yaml:"live_calls"`
}

// learnSpec is server.learn: learning mode. Absent means off.
type learnSpec struct {
	File         string   `yaml:"file"`
	SaveInterval duration `yaml:"save_interval"`
	MaxRoutes    int      `yaml:"max_routes"`
	MaxShapes    int      `yaml:"max_shapes"`
	MaxKeys      int      `yaml:"max_keys"`
	MaxDepth     int      `yaml:"max_depth"`
	MaxFields    int      `yaml:"max_fields"`
	MaxValues    int      `yaml:"max_values"`
	MaxBodyBytes int64    `yaml:"max_body_bytes"`
	MaxFileBytes int64    `yaml:"max_file_bytes"`
	EnumValues   bool     `yaml:"enum_values"`
}

func (l *learnSpec) setDefaults() {
	d := policy.DefaultLearnSettings()
	*l = learnSpec{SaveInterval: duration(d.SaveInterval), MaxRoutes: d.MaxRoutes, MaxShapes: d.MaxShapes,
		MaxKeys: d.MaxKeys, MaxDepth: d.MaxDepth, MaxFields: d.MaxFields, MaxValues: d.MaxValues,
		MaxBodyBytes: d.MaxBodyBytes, MaxFileBytes: d.MaxFileBytes, EnumValues: d.EnumValues}
}

// tracingSpec is server.tracing: OTLP export of a span per call. Absent
// means off.
type tracingSpec struct {
	Endpoint      string            `yaml:"endpoint"`
	Protocol      string            `yaml:"protocol"`
	Insecure      bool              `yaml:"insecure"`
	SamplingRatio float64           `yaml:"sampling_ratio"`
	Headers       map[string]string `yaml:"headers"`
	ServiceName   string            `yaml:"service_name"`
}

func (t *tracingSpec) setDefaults() {
	*t = tracingSpec{Protocol: "grpc", SamplingRatio: 1, ServiceName: "toolgate"}
}

func (s *serverSpec) setDefaults() {
	*s = serverSpec{
		Listen: ":8080",
		// Loopback: the admin port has an unauthenticated POST /-/reload.
		// Deployments that scrape it from elsewhere set it explicitly.
		AdminListen:         "127.0.0.1:9090",
		CallerHeader:        "X-Toolgate-Caller",
		CallerFrom:          policy.CallerFromHeader,
		MaxRequestBytes:     64 << 10,
		MaxResponseBytes:    1 << 20,
		ObservationMaxChars: 1800,
		CELCostLimit:        contracts.DefaultRuleCostLimit,
		Messages:            "en",
		HTTPStatus:          policy.HTTPStatusMapped,
		UpstreamClient:      policy.UpstreamClientFast,
		MaxConnections:      1024,
		ReadTimeout:         duration(10 * time.Second),
		WriteTimeout:        duration(10 * time.Second),
		IdleTimeout:         duration(60 * time.Second),
	}
}

type passthroughSpec struct {
	Prefix   string `yaml:"prefix"`
	Upstream string `yaml:"upstream"`
}

type stateSpec struct {
	Backend string `yaml:"backend"`
	// RedisURL is the older spelling of redis.url.
	RedisURL        string     `yaml:"redis_url"`
	Redis           *redisSpec `yaml:"redis"`
	OnError         string     `yaml:"on_error"`
	ConfirmReplicas int        `yaml:"confirm_replicas"`
	ConfirmTimeout  duration   `yaml:"confirm_timeout"`
	MaxKeys         int        `yaml:"max_keys"`
	MaxBytes        int64      `yaml:"max_bytes"`
	ScopeKey        string     `yaml:"scope_key"`
}

func (s *stateSpec) setDefaults() {
	*s = stateSpec{Backend: policy.BackendMemory, OnError: policy.OnErrorOpen, ConfirmTimeout: duration(policy.DefaultConfirmTimeout),
		MaxKeys: policy.DefaultMaxKeys, MaxBytes: policy.DefaultMaxBytes}
}

// redisSpec is state.redis: exactly one of url, cluster and sentinel.
type redisSpec struct {
	URL      string        `yaml:"url"`
	Cluster  []string      `yaml:"cluster"`
	Sentinel *sentinelSpec `yaml:"sentinel"`
	Username string        `yaml:"username"`
	Password string        `yaml:"password"`
	TLS      bool          `yaml:"tls"`
	DB       int           `yaml:"db"`
}

type sentinelSpec struct {
	Master    string   `yaml:"master"`
	Addresses []string `yaml:"addresses"`
	Username  string   `yaml:"username"`
	Password  string   `yaml:"password"`
}

type upstreamSpec struct {
	URL           string   `yaml:"url"`
	Timeout       duration `yaml:"timeout"`
	MaxConcurrent int      `yaml:"max_concurrent"`
	// MaxConcurrentPerCaller is 0 when unset: 7/8 of MaxConcurrent.
	MaxConcurrentPerCaller int               `yaml:"max_concurrent_per_caller"`
	Headers                map[string]string `yaml:"headers"`
	Breaker                *breakerSpec      `yaml:"breaker"`
	Retries                *retriesSpec      `yaml:"retries"`
	Auth                   *authSpec         `yaml:"auth"`
	// Credentials are named credentials, each in auth's form, that a tool
	// picks with its credential key instead of auth.
	Credentials           map[string]*authSpec `yaml:"credentials"`
	TLS                   *tlsSpec             `yaml:"tls"`
	ForwardHeaders        []string             `yaml:"forward_headers"`
	NonIdentifyingHeaders []string             `yaml:"non_identifying_headers"`
}

// authSpec is upstreams.<name>.auth: exactly one kind of credential.
// Every secret is written as a value (through ${VAR}, usually) or as a
// file (the key with _file), never both.
type authSpec struct {
	Basic  *basicAuthSpec `yaml:"basic"`
	Bearer *bearerSpec    `yaml:"bearer"`
	APIKey *apiKeySpec    `yaml:"api_key"`
	OAuth2 *oauth2Spec    `yaml:"oauth2"`
}

type basicAuthSpec struct {
	Username     string `yaml:"username"`
	UsernameFile string `yaml:"username_file"`
	Password     string `yaml:"password"`
	PasswordFile string `yaml:"password_file"`
}

type bearerSpec struct {
	Token     string `yaml:"token"`
	TokenFile string `yaml:"token_file"`
}

// apiKeySpec is auth.api_key: a key in a header (with an optional scheme
// before it), in a query parameter, or in a cookie.
type apiKeySpec struct {
	Header    string `yaml:"header"`
	Scheme    string `yaml:"scheme"`
	Query     string `yaml:"query"`
	Cookie    string `yaml:"cookie"`
	Value     string `yaml:"value"`
	ValueFile string `yaml:"value_file"`
}

// oauth2Spec is auth.oauth2: the client-credentials grant.
type oauth2Spec struct {
	TokenURL         string            `yaml:"token_url"`
	ClientID         string            `yaml:"client_id"`
	ClientIDFile     string            `yaml:"client_id_file"`
	ClientSecret     string            `yaml:"client_secret"`
	ClientSecretFile string            `yaml:"client_secret_file"`
	Scopes           []string          `yaml:"scopes"`
	Params           map[string]string `yaml:"params"`
	AuthStyle        string            `yaml:"auth_style"`
	TLS              *tlsSpec          `yaml:"tls"`
}

// tlsSpec is an https:// upstream's (or token endpoint's) TLS: a private
// CA, a client certificate, the server name.
type tlsSpec struct {
	CAFile     string `yaml:"ca_file"`
	CertFile   string `yaml:"cert_file"`
	KeyFile    string `yaml:"key_file"`
	ServerName string `yaml:"server_name"`
}

func (u *upstreamSpec) setDefaults() {
	*u = upstreamSpec{Timeout: duration(2 * time.Second), MaxConcurrent: 256}
}

type breakerSpec struct {
	ConsecutiveFailures uint32   `yaml:"consecutive_failures"`
	FailureRatio        float64  `yaml:"failure_ratio"`
	MinRequests         uint32   `yaml:"min_requests"`
	Window              duration `yaml:"window"`
	OpenFor             duration `yaml:"open_for"`
	HalfOpenRequests    uint32   `yaml:"half_open_requests"`
}

func (b *breakerSpec) setDefaults() {
	d := policy.DefaultBreakerSettings()
	*b = breakerSpec{
		ConsecutiveFailures: d.ConsecutiveFailures,
		FailureRatio:        d.FailureRatio,
		MinRequests:         d.MinRequests,
		Window:              duration(d.Window),
		OpenFor:             duration(d.OpenFor),
		HalfOpenRequests:    d.HalfOpenRequests,
	}
}

type retriesSpec struct {
	Attempts   int      `yaml:"attempts"`
	Backoff    duration `yaml:"backoff"`
	MaxBackoff duration `yaml:"max_backoff"`
}

func (r *retriesSpec) setDefaults() {
	d := policy.DefaultRetrySettings()
	*r = retriesSpec{Attempts: d.Attempts, Backoff: duration(d.Backoff), MaxBackoff: duration(d.MaxBackoff)}
}

type toolSpec struct {
	Description string `yaml:"description"`
	Upstream    string `yaml:"upstream"`
	// Credential names one of the upstream's credentials; empty for its
	// auth.
	Credential  string            `yaml:"credential"`
	SideEffect  bool              `yaml:"side_effect"`
	Cost        float64           `yaml:"cost"`
	Timeout     duration          `yaml:"timeout"`
	Args        any               `yaml:"args"`
	Request     *requestSpec      `yaml:"request"`
	Response    *responseSpec     `yaml:"response"`
	Errors      []errorRuleSpec   `yaml:"errors"`
	Messages    map[string]string `yaml:"messages"`
	Idempotency *idempotencySpec  `yaml:"idempotency"`
	// TruncationHint: how the model gets what an observation cut.
	TruncationHint string `yaml:"truncation_hint"`
}

type requestSpec struct {
	Method   string           `yaml:"method"`
	Path     string           `yaml:"path"`
	Encoding string           `yaml:"encoding"`
	Query    *contracts.Shape `yaml:"query"`
	Headers  *contracts.Shape `yaml:"headers"`
	Body     *contracts.Shape `yaml:"body"`
}

type responseSpec struct {
	Data        string `yaml:"data"`
	Empty       string `yaml:"empty"`
	ErrorDetail string `yaml:"error_detail"`
	// Schema is a JSON Schema of the 2xx JSON answer (observed, not
	// enforced); ${VAR} is not expanded in it, as in argument schemas.
	Schema any `yaml:"schema"`
}

type errorRuleSpec struct {
	When       string `yaml:"when"`
	Status     string `yaml:"status"`
	Retryable  *bool  `yaml:"retryable"`
	SideEffect string `yaml:"side_effect"`
}

type idempotencySpec struct {
	TTL           duration `yaml:"ttl"`
	ForwardHeader string   `yaml:"forward_header"`
}

type accessSpec struct {
	Default    string                 `yaml:"default"`
	Identities map[string]string      `yaml:"identities"`
	Callers    map[string]*callerSpec `yaml:"callers"`
	// SharedCredentials are the upstreams whose credentials callers
	// toolgate cannot identify may use (credentials.go).
	SharedCredentials []string `yaml:"shared_credentials"`
}

type callerSpec struct {
	Tools     []string             `yaml:"tools"`
	Rate      *rateSpec            `yaml:"rate"`
	ToolRates map[string]*rateSpec `yaml:"tool_rates"`
	Budget    *budgetSpec          `yaml:"budget"`
}

type rateSpec struct {
	RPS   float64 `yaml:"rps"`
	Burst int     `yaml:"burst"`
}

type budgetSpec struct {
	Cost float64  `yaml:"cost"`
	Per  duration `yaml:"per"`
}
