package proxy_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/internal/testkit/mcptest"
	"github.com/toolgate/toolgate/internal/testkit/proxytest"
	"github.com/toolgate/toolgate/internal/testkit/redistest"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/policy/redisstate"
	"github.com/toolgate/toolgate/proxy"
	"github.com/toolgate/toolgate/proxy/mcpfront"
)

// shopBackend authenticates each end user by their bearer token and
// places an order for them: the answer names the user and counts their
// orders. It never echoes the token.
type shopBackend struct {
	mu     sync.Mutex
	orders map[string]int // user -> orders placed
}

func (b *shopBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	user, _, _ := strings.Cut(token, "-")
	if !ok || user == "" {
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	b.mu.Lock()
	b.orders[user]++
	n := b.orders[user]
	b.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"order":"%s-%d"}`, user, n)
}

func (b *shopBackend) placed(user string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.orders[user]
}

// shopPolicy forwards each end user's credential to a backend that
// authenticates them, and their language, which does not identify them.
const shopPolicy = `
version: 1
server:
  transparent: true
upstreams:
  shop:
    url: {{url}}
    forward_headers: [Authorization, Accept-Language]
    non_identifying_headers: [Accept-Language]
tools:
  place_order:
    description: Place an order for the signed-in user.
    upstream: shop
    side_effect: true
    args: {type: object, required: [item], additionalProperties: false, properties: {item: {type: string}}}
    request: {method: POST, path: /orders, body: {item: item}}
`

// The end users: their tokens are secrets no store may hold.
const (
	aliceToken = "Bearer alice-s3cret-token"
	bobToken   = "Bearer bob-s3cret-token"
)

// endUserCall is what a front answered one end user's call.
type endUserCall struct {
	replayed bool
	data     string
	status   string
}

// endUserFront sends a call of place_order, as one end user behind the
// caller shop-agent, through one of toolgate's fronts.
type endUserFront func(t *testing.T, srv *httptest.Server, token, lang, key string) endUserCall

func endUserHeader(token, lang string) http.Header {
	return http.Header{"Authorization": {token}, "Accept-Language": {lang}, "X-Toolgate-Caller": {"shop-agent"}}
}

// endUserFronts are every front that serves an agent's call from its own
// HTTP request: the tool endpoint, transparent routes, and MCP (the fast
// path of the early revisions and the SDK's of the latest).
func endUserFronts() map[string]endUserFront {
	toolEndpoint := func(t *testing.T, srv *httptest.Server, token, lang, key string) endUserCall {
		t.Helper()
		h := map[string]string{"Idempotency-Key": key}
		for k, v := range endUserHeader(token, lang) {
			h[k] = v[0]
		}
		_, env, err := proxytest.PostCall(srv.Client(), srv.URL, "place_order", `{"item":"book"}`, h)
		if err != nil {
			t.Fatal(err)
		}
		return endUserCall{replayed: env.Replayed, data: string(env.Data), status: string(env.Status)}
	}
	transparent := func(t *testing.T, srv *httptest.Server, token, lang, key string) endUserCall {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/orders", strings.NewReader(`{"item":"book"}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header = endUserHeader(token, lang)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		env, _, err := proxytest.ReadEnvelope(resp)
		if err != nil {
			t.Fatal(err)
		}
		return endUserCall{replayed: env.Replayed, data: string(env.Data), status: string(env.Status)}
	}
	mcpAt := func(revision string) endUserFront {
		return func(t *testing.T, srv *httptest.Server, token, lang, key string) endUserCall {
			t.Helper()
			cs := mcptest.Connect(t, srv.URL+"/mcp", revision, endUserHeader(token, lang))
			res := mcptest.ResultOf(t, mcptest.CallTool(t, cs, "place_order", map[string]any{"item": "book", "idempotency_key": key}))
			return endUserCall{replayed: res.Replayed, data: res.Data(), status: string(res.Status)}
		}
	}
	return map[string]endUserFront{
		"http":                        toolEndpoint,
		"transparent":                 transparent,
		"mcp " + mcptest.Revisions[0]: mcpAt(mcptest.Revisions[0]),
		"mcp " + mcptest.Revisions[len(mcptest.Revisions)-1]: mcpAt(mcptest.Revisions[len(mcptest.Revisions)-1]),
	}
}

// shopReplica is one toolgate in front of the shop backend.
func shopReplica(t *testing.T, backendURL, doc string, store policy.IdempotencyStore) *httptest.Server {
	t.Helper()
	snap, err := config.CompileSource("shop.yaml", []byte(strings.ReplaceAll(doc, "{{url}}", backendURL)), config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	core, err := proxy.NewCore(snap, proxy.Options{Registry: prometheus.NewRegistry(), Store: store})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mcptest.AgentHandler(core, mcpfront.Options{}))
	t.Cleanup(func() {
		srv.Close()
		core.Close()
	})
	return srv
}

// newShopRedisStore is a Redis store on srv, as toolgate serves with.
func newShopRedisStore(t *testing.T, srv *redistest.Server) *redisstate.Store {
	t.Helper()
	opts, err := redisstate.ClientOptions("redis://" + srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	return redisstate.NewStore(redis.NewClient(opts), redisstate.StoreOptions{})
}

// TestForwardedIdentityScopesTheIdempotencyKey: two end users behind one
// caller who send the same key and arguments, each with their own
// credential forwarded to a backend that authenticates them, are two
// orders: each gets a backend call and their own answer, never the other's
// replayed. A user's own retry still replays, also in another language
// (Accept-Language is marked not identifying). On every front, on the
// memory and the Redis store; no Redis key or value holds a token.
func TestForwardedIdentityScopesTheIdempotencyKey(t *testing.T) {
	rs := redistest.Start(t)
	for _, storeKind := range []string{"memory", "redis"} {
		for name, call := range endUserFronts() {
			t.Run(storeKind+"/"+name, func(t *testing.T) {
				b := &shopBackend{orders: map[string]int{}}
				backend := httptest.NewServer(b)
				t.Cleanup(backend.Close)
				var store policy.IdempotencyStore
				if storeKind == "redis" {
					store = newShopRedisStore(t, rs)
				}
				srv := shopReplica(t, backend.URL, shopPolicy, store)
				key := "order-" + strings.ReplaceAll(name, " ", "-")

				alice := call(t, srv, aliceToken, "en", key)
				if alice.status != "ok" || alice.replayed || alice.data != `{"order":"alice-1"}` {
					t.Fatalf("alice = %+v", alice)
				}
				bob := call(t, srv, bobToken, "en", key)
				if bob.status != "ok" || bob.replayed || bob.data != `{"order":"bob-1"}` {
					t.Fatalf("bob, same caller, key and arguments = %+v; want his own order, not alice's replayed", bob)
				}
				again := call(t, srv, aliceToken, "de", key)
				if !again.replayed || again.data != `{"order":"alice-1"}` {
					t.Errorf("alice's retry in another language = %+v; want her order replayed", again)
				}
				if b.placed("alice") != 1 || b.placed("bob") != 1 {
					t.Errorf("orders placed: alice %d, bob %d; want one each", b.placed("alice"), b.placed("bob"))
				}
				if storeKind == "redis" {
					assertRedisHoldsNo(t, rs, "s3cret")
				}
			})
		}
	}
}

// TestForwardedIdentityScopeIsSharedByReplicas: a retry that lands on
// another replica sharing the Redis store replays (the replicas hash the
// identity with one key: the one in Redis, or the policy's
// state.scope_key), and another user still gets their own call.
func TestForwardedIdentityScopeIsSharedByReplicas(t *testing.T) {
	rs := redistest.Start(t)
	const scopeKey = "0123456789abcdef0123456789abcdef0123456789abcdef"
	tests := []struct {
		name string
		doc  string
	}{
		{"with the key the first replica created in Redis", shopPolicy},
		{"with state.scope_key", strings.Replace(shopPolicy, "server:", "state: {scope_key: "+scopeKey+"}\nserver:", 1)},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := &shopBackend{orders: map[string]int{}}
			backend := httptest.NewServer(b)
			t.Cleanup(backend.Close)
			one := shopReplica(t, backend.URL, tt.doc, newShopRedisStore(t, rs))
			two := shopReplica(t, backend.URL, tt.doc, newShopRedisStore(t, rs))
			call := endUserFronts()["http"]
			key := fmt.Sprintf("replicas-%d", i)
			if first := call(t, one, aliceToken, "en", key); first.replayed || first.data != `{"order":"alice-1"}` {
				t.Fatalf("alice on replica one = %+v", first)
			}
			if retry := call(t, two, aliceToken, "en", key); !retry.replayed || retry.data != `{"order":"alice-1"}` {
				t.Errorf("alice's retry on replica two = %+v; want her order replayed", retry)
			}
			if bob := call(t, two, bobToken, "en", key); bob.replayed || bob.data != `{"order":"bob-1"}` {
				t.Errorf("bob on replica two = %+v; want his own order", bob)
			}
			if b.placed("alice") != 1 || b.placed("bob") != 1 {
				t.Errorf("orders placed: alice %d, bob %d; want one each", b.placed("alice"), b.placed("bob"))
			}
			assertRedisHoldsNo(t, rs, "s3cret")
			assertRedisHoldsNo(t, rs, scopeKey)
		})
	}
}

// assertRedisHoldsNo fails when any key or string value in Redis contains
// secret.
func assertRedisHoldsNo(t *testing.T, srv *redistest.Server, secret string) {
	t.Helper()
	client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer client.Close()
	keys, err := client.Keys(t.Context(), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if strings.Contains(k, secret) {
			t.Errorf("Redis key %q holds %q", k, secret)
		}
		if v, err := client.Get(t.Context(), k).Result(); err == nil && strings.Contains(v, secret) {
			t.Errorf("Redis value of %q holds %q", k, secret)
		}
	}
}
