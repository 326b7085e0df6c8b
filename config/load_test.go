package config

import (
	"errors"
	"flag"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/policy"
)

func noEnv(string) (string, bool) { return "", false }

var update = flag.Bool("update", false, "rewrite testdata/invalid/*.err with the current messages")

// TestInvalidPolicies pins the exact messages users read: every file under
// testdata/invalid is paired with the output `toolgate check` must print.
// Files named extproc_*.yaml are loaded as `toolgate extproc` loads them
// (and `toolgate check -extproc` checks them): with Options.ByRoute.
func TestInvalidPolicies(t *testing.T) {
	files, err := filepath.Glob("testdata/invalid/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".yaml")
		t.Run(name, func(t *testing.T) {
			errFile := strings.TrimSuffix(f, ".yaml") + ".err"
			_, err := Load(f, Options{LookupEnv: noEnv, ByRoute: strings.HasPrefix(name, "extproc_")})
			var errs Errors
			if !errors.As(err, &errs) {
				t.Fatalf("Load = %v, want config.Errors", err)
			}
			if *update {
				if err := os.WriteFile(errFile, []byte(errs.Error()+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(errFile)
			if err != nil {
				t.Fatal(err)
			}
			if got := errs.Error() + "\n"; got != string(want) {
				t.Errorf("errors:\n%s\nwant:\n%s", got, want)
			}
			for _, e := range errs {
				if e.Pos.Line == 0 || e.Pos.Column == 0 {
					t.Errorf("error without a position: %v", e)
				}
			}
		})
	}
}

func TestExamplePolicyLoads(t *testing.T) {
	snap, err := Load("../examples/policy.yaml", Options{LookupEnv: noEnv})
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Tools) != 2 || snap.Catalog == nil || snap.Checksum == "" {
		t.Fatalf("snapshot = %+v", snap)
	}
	search := snap.Tools["search_articles"]
	if search.Timeout != 500*time.Millisecond || search.Cost != 0.001 {
		t.Errorf("search contract = %+v", search)
	}
	notify := snap.Tools["send_notification"]
	if notify.Timeout != 2*time.Second || notify.Idempotency.TTL != 24*time.Hour || notify.Idempotency.ForwardHeader != "Idempotency-Key" {
		t.Errorf("notify contract = %+v", notify)
	}
	up := snap.Upstreams["search"]
	if up.Retries.Attempts != 2 || up.Breaker.ConsecutiveFailures != 5 || up.MaxConcurrent != 256 {
		t.Errorf("search upstream = %+v", up)
	}
}

func TestDirectoryMergesFilesAndExpandsEnv(t *testing.T) {
	env := func(k string) (string, bool) {
		if k == "TOOLGATE_TEST_TOKEN" {
			return "s3cret", true
		}
		return "", false
	}
	snap, err := Load("testdata/dir", Options{LookupEnv: env})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(snap.ToolNames, ","); got != "search_articles,send_notification" {
		t.Errorf("tools = %s", got)
	}
	if len(snap.Sources) != 3 {
		t.Errorf("sources = %v", snap.Sources)
	}
	h := snap.Upstreams["search"].Headers
	if h.Get("Authorization") != "Bearer s3cret" || h.Get("X-Literal") != "${NOT_EXPANDED}" {
		t.Errorf("headers = %v", h)
	}
	if snap.Access.DefaultAllow {
		t.Error("access.default from 30-notify.yaml was not applied")
	}
	ops := snap.Access.Callers["ops-agent"]
	if ops == nil || ops.Rate.RPS != 5 || ops.ToolRates["send_notification"].Burst != 1 || ops.Budget.Per != time.Hour {
		t.Errorf("ops-agent = %+v", ops)
	}
	if snap.Server.Listen != "127.0.0.1:0" || snap.Server.MaxRequestBytes != 65536 || snap.State.Backend != policy.BackendMemory {
		t.Errorf("server = %+v state = %+v", snap.Server, snap.State)
	}
	// Defaults of an absent section.
	if snap.Server.ObservationMaxChars != 1800 || snap.Server.CallerHeader != "X-Toolgate-Caller" {
		t.Errorf("defaults not applied: %+v", snap.Server)
	}
}

func TestDirectoryRejectsDuplicatesAcrossFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("a.yaml", "version: 1\nserver: {listen: ':1'}\nupstreams:\n  search: {url: 'http://127.0.0.1:1'}\n")
	write("b.yaml", "version: 1\nserver: {listen: ':2'}\nupstreams:\n  search: {url: 'http://127.0.0.1:2'}\n")
	_, err := Load(dir, Options{LookupEnv: noEnv})
	if err == nil {
		t.Fatal("loaded")
	}
	msg := err.Error()
	for _, want := range []string{"b.yaml:2:9: server: server is already set in", "b.yaml:4:3: upstreams.search: upstream search is defined twice"} {
		if !strings.Contains(msg, want) {
			t.Errorf("errors %q lack %q", msg, want)
		}
	}
}

// TestDirectoryPlacesToolErrorsInTheirFiles: errors and warnings inside
// the tools of a directory's files point at the file and line that wrote
// them, a tool defined twice at its second definition, whichever file is
// read first.
func TestDirectoryPlacesToolErrorsInTheirFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("a.yaml", `version: 1
upstreams:
  search: {url: 'http://127.0.0.1:1'}
tools:
  one:
    description: One.
    upstream: search
    request: {method: GET, path: /one}
    response: {data: 'body +'}
`)
	write("b.yaml", `version: 1
tools:
  two:
    description: Two.
    upstream: nowhere
    request: {method: GET, path: /two}
  three:
    description: Three.
    upstream: search
    args: {type: object, additionalProperties: false, required: [x]}
    request: {method: GET, path: /three}
`)
	write("c.yaml", `version: 1
tools:
  one:
    description: One again.
    upstream: search
    request: {method: GET, path: /one}
`)
	tests := []struct {
		name, want string
	}{
		{"a tool defined twice", filepath.Join(dir, "c.yaml") + ":3:3: tools.one: tool one is defined twice"},
	}
	_, err := Load(dir, Options{LookupEnv: noEnv})
	if err == nil {
		t.Fatal("loaded")
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := err.Error(); got != tt.want {
				t.Errorf("errors:\n%s\nwant:\n%s", got, tt.want)
			}
		})
	}
	if err := os.Remove(filepath.Join(dir, "c.yaml")); err != nil {
		t.Fatal(err)
	}
	_, err = Load(dir, Options{LookupEnv: noEnv})
	want := strings.Join([]string{
		filepath.Join(dir, "a.yaml") + ":9:29: tools.one.response.data: Syntax error: mismatched input '<EOF>' expecting {'[', '{', '(', '.', '-', '!', 'true', 'false', 'null', NUM_FLOAT, NUM_INT, NUM_UINT, STRING, BYTES, IDENTIFIER}",
		filepath.Join(dir, "b.yaml") + `:5:15: tools.two.upstream: upstream "nowhere" is not defined`,
		filepath.Join(dir, "b.yaml") + `:10:65: tools.three.args.required[0]: "x" is required, but no property declares it and additionalProperties is false`,
	}, "\n")
	if err == nil || err.Error() != want {
		t.Errorf("errors:\n%v\nwant:\n%s", err, want)
	}
}

func TestKubernetesConfigMapLayoutIsRead(t *testing.T) {
	// A mounted ConfigMap: files are symlinks into a hidden ..data
	// directory, which is itself a symlink to a timestamped directory.
	dir := t.TempDir()
	data := filepath.Join(dir, "..2026_11_30_00_00_00.000000001")
	if err := os.Mkdir(data, 0o700); err != nil {
		t.Fatal(err)
	}
	policyYAML, err := os.ReadFile("../examples/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, "policy.yaml"), policyYAML, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Base(data), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("..data/policy.yaml", filepath.Join(dir, "policy.yaml")); err != nil {
		t.Fatal(err)
	}
	snap, err := Load(dir, Options{LookupEnv: noEnv})
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Sources) != 1 || len(snap.Tools) != 2 {
		t.Errorf("sources = %v", snap.Sources)
	}
}

func TestChecksumFollowsContent(t *testing.T) {
	a, err := CompileSource("p.yaml", []byte("version: 1\n"), Options{LookupEnv: noEnv})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := CompileSource("p.yaml", []byte("version: 1\n"), Options{LookupEnv: noEnv})
	c, _ := CompileSource("p.yaml", []byte("version: 1 # changed\n"), Options{LookupEnv: noEnv})
	if a.Checksum != b.Checksum || a.Checksum == c.Checksum {
		t.Errorf("checksums %s %s %s", a.Checksum, b.Checksum, c.Checksum)
	}
}

// FuzzDecodePolicy: no policy document, however broken, panics the loader;
// a rejected one always explains itself with positions.
func FuzzDecodePolicy(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/invalid/*.yaml")
	seeds = append(seeds, "../examples/policy.yaml")
	for _, s := range seeds {
		if b, err := os.ReadFile(s); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte("version: 1\ntools: {a: *x}\n"))
	f.Add([]byte("a: &a [*a]\n"))
	f.Fuzz(func(t *testing.T, doc []byte) {
		_, err := CompileSource("fuzz.yaml", doc, Options{LookupEnv: noEnv})
		if err == nil {
			return
		}
		var errs Errors
		if !errors.As(err, &errs) || len(errs) == 0 {
			t.Fatalf("error is %T %v, not config.Errors", err, err)
		}
		for _, e := range errs {
			if e.Pos.File != "fuzz.yaml" || e.Pos.Line < 1 {
				t.Fatalf("error without a position: %v", e)
			}
		}
	})
}

func TestAliasBombIsRefused(t *testing.T) {
	doc := "version: 1\nupstreams: {s: {url: 'http://127.0.0.1:1'}}\ntools:\n  t:\n    description: d\n    upstream: s\n    request: {path: /}\n    args:\n      a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n"
	for i := 1; i < 12; i++ {
		prev := "*a" + string(rune('0'+i-1))
		if i > 10 {
			prev = "*a9"
		}
		doc += "      a" + string(rune('0'+i%10)) + ": &a" + string(rune('0'+i%10)) + " [" + strings.Repeat(prev+", ", 9) + prev + "]\n"
	}
	_, err := CompileSource("bomb.yaml", []byte(doc), Options{LookupEnv: noEnv})
	if err == nil {
		t.Fatal("loaded")
	}
}

// TestServerDefaults pins the defaults of an absent server section; the
// admin port listens on loopback only (its POST /-/reload has no
// authentication), so exposing it is an explicit setting.
func TestServerDefaults(t *testing.T) {
	snap, err := CompileSource("p.yaml", []byte("version: 1\n"), Options{LookupEnv: noEnv})
	if err != nil {
		t.Fatal(err)
	}
	s := snap.Server
	if s.Listen != ":8080" {
		t.Errorf("listen = %q", s.Listen)
	}
	if s.AdminListen != "127.0.0.1:9090" {
		t.Errorf("admin_listen = %q, want loopback 127.0.0.1:9090", s.AdminListen)
	}
}

func TestStateBounds(t *testing.T) {
	for _, tc := range []struct {
		name     string
		state    string
		keys     int
		maxBytes int64
	}{
		{"an absent state section gets the default bounds", "", policy.DefaultMaxKeys, policy.DefaultMaxBytes},
		{"a state section without bounds gets the defaults", "state: {backend: memory}\n", policy.DefaultMaxKeys, policy.DefaultMaxBytes},
		{"bounds are read in keys and bytes", "state: {backend: memory, max_keys: 500, max_bytes: 1048576}\n", 500, 1 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := "version: 1\n" + tc.state + "upstreams:\n  search: {url: http://127.0.0.1:7001}\n"
			snap, err := CompileSource("state.yaml", []byte(doc), Options{LookupEnv: noEnv})
			if err != nil {
				t.Fatal(err)
			}
			if snap.State.MaxKeys != tc.keys || snap.State.MaxBytes != tc.maxBytes {
				t.Fatalf("state = %+v, want %d keys and %d bytes", snap.State, tc.keys, tc.maxBytes)
			}
		})
	}
}

// TestAmbiguousRoutesHaveOneRule: whether two tools' routes may overlap is
// decided in one place for every front. Transparent mode and ext_proc
// refuse them with the position of the second route; a policy served only
// by name (/v1/tools, MCP) loads, and says why it would not run elsewhere.
func TestAmbiguousRoutesHaveOneRule(t *testing.T) {
	doc := func(server string) string {
		return "version: 1\n" + server + `upstreams:
  svc: {url: "http://127.0.0.1:7001"}
tools:
  get_doc:
    description: Get a document.
    upstream: svc
    args: {type: object, properties: {id: {type: string}}}
    request: {method: GET, path: "/docs/{id}"}
  get_page:
    description: Get a page.
    upstream: svc
    args: {type: object, properties: {n: {type: string}}}
    request: {method: GET, path: "/docs/{n}"}
`
	}
	const at = "p.yaml:14:34: tools.get_page.request.path: route GET /docs/{n} is ambiguous with tool get_doc (GET /docs/{id})"
	for _, tc := range []struct {
		name    string
		server  string
		byRoute bool
		err     string // the whole error; empty: loads
		warn    string // the whole warning; empty: none
	}{
		{"served by name, the policy loads with a warning", "", false, "",
			at + ": toolgate extproc and transparent mode would refuse this policy"},
		{"under ext_proc, the policy is refused", "", true,
			at + ": toolgate extproc identifies every call by its route", ""},
		{"in transparent mode, the policy is refused", "server: {transparent: true}\n", false,
			"p.yaml:15:34: tools.get_page.request.path: route GET /docs/{n} is ambiguous with tool get_doc (GET /docs/{id}) in transparent mode", ""},
		{"in transparent mode under ext_proc, the policy is refused once", "server: {transparent: true}\n", true,
			"p.yaml:15:34: tools.get_page.request.path: route GET /docs/{n} is ambiguous with tool get_doc (GET /docs/{id}) in transparent mode", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var warns []string
			opts := Options{LookupEnv: noEnv, ByRoute: tc.byRoute, Warn: func(e *Error) { warns = append(warns, e.Error()) }}
			_, err := CompileSource("p.yaml", []byte(doc(tc.server)), opts)
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tc.err {
				t.Errorf("error %q, want %q", got, tc.err)
			}
			if w := strings.Join(warns, "\n"); w != tc.warn {
				t.Errorf("warnings %q, want %q", w, tc.warn)
			}
		})
	}
	t.Run("routes that do not overlap load without a warning", func(t *testing.T) {
		warned := false
		d := strings.Replace(doc(""), `path: "/docs/{n}"`, `path: "/pages/{n}"`, 1)
		if _, err := CompileSource("p.yaml", []byte(d), Options{LookupEnv: noEnv, ByRoute: true, Warn: func(*Error) { warned = true }}); err != nil || warned {
			t.Errorf("error %v, warned %v", err, warned)
		}
	})
}

// TestListenFlagsOverrideThePolicy: -listen and -admin take the place of
// server.listen and server.admin_listen, while the policy's own values are
// still checked.
func TestListenFlagsOverrideThePolicy(t *testing.T) {
	doc := "version: 1\nserver: {listen: \"127.0.0.1:8081\", admin_listen: \"127.0.0.1:9091\"}\n"
	for _, tc := range []struct {
		name                string
		opts                Options
		listen, adminListen string
	}{
		{"without flags the policy says", Options{}, "127.0.0.1:8081", "127.0.0.1:9091"},
		{"-listen replaces server.listen", Options{Listen: ":8080"}, ":8080", "127.0.0.1:9091"},
		{"-admin replaces server.admin_listen", Options{AdminListen: ":9090"}, "127.0.0.1:8081", ":9090"},
		{"both flags replace both", Options{Listen: ":8080", AdminListen: ":9090"}, ":8080", ":9090"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.LookupEnv = noEnv
			snap, err := CompileSource("p.yaml", []byte(doc), tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if snap.Server.Listen != tc.listen || snap.Server.AdminListen != tc.adminListen {
				t.Errorf("listen %q, admin_listen %q; want %q, %q", snap.Server.Listen, snap.Server.AdminListen, tc.listen, tc.adminListen)
			}
		})
	}
	t.Run("a broken server.listen is reported even with -listen", func(t *testing.T) {
		_, err := CompileSource("p.yaml", []byte("version: 1\nserver: {listen: nowhere}\n"), Options{LookupEnv: noEnv, Listen: ":8080"})
		if err == nil || !strings.Contains(err.Error(), "p.yaml:2:18: server.listen") {
			t.Errorf("error %v", err)
		}
	})
}

func TestStateRedis(t *testing.T) {
	defaults := func(st policy.State) policy.State {
		st.Backend, st.MaxKeys, st.MaxBytes = policy.BackendRedis, policy.DefaultMaxKeys, policy.DefaultMaxBytes
		if st.OnError == "" {
			st.OnError = policy.OnErrorOpen
		}
		if st.ConfirmTimeout == 0 {
			st.ConfirmTimeout = policy.DefaultConfirmTimeout
		}
		return st
	}
	for _, tc := range []struct {
		name  string
		state string
		want  policy.State
	}{
		{"redis_url names a single server, as before", "redis_url: redis://127.0.0.1:6379/0",
			policy.State{RedisURL: "redis://127.0.0.1:6379/0"}},
		{"redis.url names a single server", "redis: {url: rediss://u:p@redis:6380/2}",
			policy.State{RedisURL: "rediss://u:p@redis:6380/2"}},
		{"redis.cluster names a Cluster by its seeds, with credentials and TLS",
			"redis: {cluster: [10.0.0.1:6379, 10.0.0.2:6379], username: tg, password: pw, tls: true}",
			policy.State{Redis: policy.RedisSettings{Cluster: "10.0.0.1:6379,10.0.0.2:6379", Username: "tg", Password: "pw", TLS: true}}},
		{"redis.sentinel names a primary by its Sentinels",
			"redis: {sentinel: {master: mymaster, addresses: [s1:26379, s2:26379, s3:26379], password: spw}, password: pw, db: 3}",
			policy.State{Redis: policy.RedisSettings{SentinelMaster: "mymaster", Sentinels: "s1:26379,s2:26379,s3:26379",
				SentinelPassword: "spw", Password: "pw", DB: 3}}},
		{"rate limits may fail closed and claims may wait for replicas",
			"redis_url: redis://r:6379/0\n  on_error: closed\n  confirm_replicas: 2\n  confirm_timeout: 250ms",
			policy.State{RedisURL: "redis://r:6379/0", OnError: policy.OnErrorClosed, ConfirmReplicas: 2, ConfirmTimeout: 250 * time.Millisecond}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := "version: 1\nstate:\n  backend: redis\n  " + tc.state + "\nupstreams:\n  search: {url: http://127.0.0.1:7001}\n"
			snap, err := CompileSource("state.yaml", []byte(doc), Options{LookupEnv: noEnv})
			if err != nil {
				t.Fatal(err)
			}
			if want := defaults(tc.want); snap.State != want {
				t.Fatalf("state = %+v\nwant    %+v", snap.State, want)
			}
		})
	}
}

// TestBareEnvironmentReferencesWarn: "$TOKEN" is sent as the literal text;
// only "${TOKEN}" is expanded, so check says so (the policy still loads).
func TestBareEnvironmentReferencesWarn(t *testing.T) {
	doc := `version: 1
upstreams:
  svc:
    url: "http://127.0.0.1:7001"
    headers: {Authorization: "Bearer $SEARCH_TOKEN", X-Price: "$5 flat", X-Ok: "${SEARCH_TOKEN}", X-Lit: "$${NOT}"}
tools:
  t:
    description: T.
    upstream: svc
    args: {type: object, properties: {id: {type: string, pattern: "^[a-z]+$"}}}
    request: {method: GET, path: /t}
access: {shared_credentials: [svc]}
`
	var warns []string
	lookup := func(name string) (string, bool) { return "tok", name == "SEARCH_TOKEN" }
	if _, err := CompileSource("p.yaml", []byte(doc), Options{LookupEnv: lookup, Warn: func(e *Error) { warns = append(warns, e.Error()) }}); err != nil {
		t.Fatal(err)
	}
	want := []string{`p.yaml:5:30: upstreams.svc.headers.Authorization: $SEARCH_TOKEN is sent as written: toolgate expands only ${SEARCH_TOKEN}`}
	if !slices.Equal(warns, want) {
		t.Errorf("warnings %q, want %q", warns, want)
	}
	for _, s := range []string{"$A", "$$HOME", "$Total", "cost $5", "^a$"} {
		if got := bareEnvReference(s); got != "" {
			t.Errorf("bareEnvReference(%q) = %q, want none", s, got)
		}
	}
}

// TestTemplatesNamingValuesTheToolCannotHaveWarn: a message template that
// prints a value the tool's calls never have would always fall back to
// the catalogue, so check says where (the policy still loads).
func TestTemplatesNamingValuesTheToolCannotHaveWarn(t *testing.T) {
	doc := `version: 1
upstreams:
  svc: {url: "http://127.0.0.1:7001"}
tools:
  search:
    description: Search.
    upstream: svc
    args: {type: object, additionalProperties: false, properties: {q: {type: string}}}
    request: {method: GET, path: /s, query: {q: q}}
    response:
      data: '{"items": body.hits, "total": body.count}'
    messages:
      ok: '命中 {{.data.totl}} 条（{{.args.q}}）。'
      empty: 'Nothing for {{.args.query}}.'
      not_found: 'No {{.data.id}}: {{.detail}}'
      budget: 'Spent: {{.detail}}'
  lookup:
    description: Look up.
    upstream: svc
    args: {type: object, properties: {id: {type: string}}}
    request: {method: GET, path: /l}
    response:
      error_detail: body.message
    messages:
      ok: 'Found {{.data.name}} for {{.args.anything}}.'
      empty: 'Nothing: {{.detail}}'
      bad_args: 'Refused: {{.detail}}'
      rate_limited: 'Slow down: {{.detail}}'
`
	var warns []string
	if _, err := CompileSource("p.yaml", []byte(doc), Options{LookupEnv: noEnv, Warn: func(e *Error) { warns = append(warns, e.Error()) }}); err != nil {
		t.Fatal(err)
	}
	want := []string{
		`p.yaml:13:11: tools.search.messages.ok: {{.data.totl}} never has a value: the data has no key totl (it has items, total)`,
		`p.yaml:14:14: tools.search.messages.empty: {{.args.query}} never has a value: query is not an argument of this tool`,
		`p.yaml:15:18: tools.search.messages.not_found: {{.data.id}} never has a value: a not_found outcome carries no data, so the catalogue's message is used`,
		`p.yaml:15:18: tools.search.messages.not_found: {{.detail}} never has a value: the tool has no response.error_detail`,
		`p.yaml:16:15: tools.search.messages.budget: {{.detail}} never has a value: the tool has no response.error_detail`,
		`p.yaml:26:14: tools.lookup.messages.empty: {{.detail}} never has a value: error_detail describes failures, not empty outcomes`,
		`p.yaml:28:21: tools.lookup.messages.rate_limited: {{.detail}} never has a value: toolgate decides rate_limited itself, without a backend answer`,
	}
	if !slices.Equal(warns, want) {
		t.Errorf("warnings:\n%s\nwant:\n%s", strings.Join(warns, "\n"), strings.Join(want, "\n"))
	}
}

// TestConsoleSettingsAndToolOrigins: server.console is on without live
// calls unless the policy says otherwise, and every tool knows the file
// and line it is defined at.
func TestConsoleSettingsAndToolOrigins(t *testing.T) {
	for _, c := range []struct {
		name, server string
		want         policy.ConsoleSettings
	}{
		{"absent", "", policy.ConsoleSettings{}},
		{"live calls on", "server: {console: {live_calls: true}}\n", policy.ConsoleSettings{LiveCalls: true}},
		{"turned off", "server: {console: {enabled: false}}\n", policy.ConsoleSettings{Disabled: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			doc := "version: 1\n" + c.server + "upstreams:\n  svc: {url: \"http://127.0.0.1:1\"}\ntools:\n  a:\n    description: A.\n    upstream: svc\n    request: {path: /a}\n  b:\n    description: B.\n    upstream: svc\n    request: {path: /b}\n"
			snap, err := CompileSource("p.yaml", []byte(doc), Options{LookupEnv: noEnv})
			if err != nil {
				t.Fatal(err)
			}
			if snap.Server.Console != c.want {
				t.Errorf("console settings %+v, want %+v", snap.Server.Console, c.want)
			}
			line := 5 + strings.Count(c.server, "\n")
			want := map[string]policy.Origin{"a": {File: "p.yaml", Line: line}, "b": {File: "p.yaml", Line: line + 4}}
			if !maps.Equal(snap.ToolOrigins, want) {
				t.Errorf("tool origins %v, want %v", snap.ToolOrigins, want)
			}
		})
	}
}
