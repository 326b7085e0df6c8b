package proxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/toolgate/toolgate/contracts"
)

// refusingBackend answers the first `refusals` requests of each path with
// code (and Retry-After: 1 on /w), then 200; it records every request it
// received, with the idempotency key it carried.
type refusingBackend struct {
	code     int
	refusals int

	mu   sync.Mutex
	seen map[string][]string // path -> Idempotency-Key of each request
}

func (b *refusingBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	b.mu.Lock()
	b.seen[r.URL.Path] = append(b.seen[r.URL.Path], r.Header.Get("Idempotency-Key"))
	n := len(b.seen[r.URL.Path])
	b.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if n <= b.refusals {
		if r.URL.Path == "/w" {
			w.Header().Set("Retry-After", "1")
		}
		w.WriteHeader(b.code)
		_, _ = io.WriteString(w, `{"error":"try later"}`)
		return
	}
	_, _ = io.WriteString(w, `{"id":"done"}`)
}

// requests returns the idempotency keys of the requests path received.
func (b *refusingBackend) requests(path string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.seen[path]...)
}

const resendPolicy = `
version: 1
upstreams:
  legacy:
    url: {{url}}
    timeout: 5s
    retries: {attempts: 3, backoff: 10ms, max_backoff: 20ms}
tools:
  write:
    description: Write something.
    upstream: legacy
    side_effect: true
    args: {type: object}
    request: {method: POST, path: /w}
  write_dedupe:
    description: Write something at a backend that dedupes on the key.
    upstream: legacy
    side_effect: true
    idempotency: {forward_header: Idempotency-Key}
    args: {type: object}
    request: {method: POST, path: /d}
  read:
    description: Read something.
    upstream: legacy
    args: {type: object}
    request: {method: GET, path: /r}
`

// TestRefusalsOfSideEffectsAreNotResentWithinTheCall: a 503, 429 or 408
// answer to a side-effecting call ends the call, with retries.attempts 3,
// after exactly one request on the wire: the answer may come from a proxy
// in front of an app that already acted. The envelope is the one such a
// refusal always got (retryable, nothing done, the backend's Retry-After)
// and the key is released, so the agent's own retry is the only resend. A
// read-only tool still retries, and so does a side-effecting tool whose
// backend dedupes on the forwarded key, with the same key each time.
func TestRefusalsOfSideEffectsAreNotResentWithinTheCall(t *testing.T) {
	codes := []struct {
		code       int
		status     contracts.Status
		httpCode   int
		retryAfter int64 // the envelope's retry_after_ms for /w: the backend's Retry-After, which a 408 does not carry
	}{
		{503, contracts.StatusUpstream, 503, 1000},
		{429, contracts.StatusUpstream, 503, 1000},
		{408, contracts.StatusTimeout, 504, 0},
	}
	for _, c := range codes {
		t.Run(http.StatusText(c.code), func(t *testing.T) {
			t.Run("a side-effecting call is sent once and its key released", func(t *testing.T) {
				b := &refusingBackend{code: c.code, refusals: 2, seen: map[string][]string{}}
				front := resendFront(t, b)
				resp, env := postCall(t, front, "write", `{}`, map[string]string{"Idempotency-Key": "k-1"})
				if got := len(b.requests("/w")); got != 1 {
					t.Fatalf("requests on the wire = %d, want exactly 1", got)
				}
				if env.Status != c.status || !env.Retryable || env.SideEffect != contracts.SideEffectNone || env.Replayed || env.Cost != 0 {
					t.Errorf("envelope = %+v", env)
				}
				if resp.StatusCode != c.httpCode || env.RetryAfterMS != c.retryAfter {
					t.Errorf("HTTP %d, retry_after_ms %d; want %d, %d", resp.StatusCode, env.RetryAfterMS, c.httpCode, c.retryAfter)
				}
				if c.httpCode == 503 && resp.Header.Get("Retry-After") != "1" {
					t.Errorf("Retry-After = %q, want the backend's 1", resp.Header.Get("Retry-After"))
				}
				// The agent's retry is sent (the key was released): the
				// second and last refusal, then the backend's answer.
				_, env = postCall(t, front, "write", `{}`, map[string]string{"Idempotency-Key": "k-1"})
				if env.Status != c.status || env.Replayed {
					t.Errorf("the agent's first retry = %+v, want it sent and refused again", env)
				}
				_, env = postCall(t, front, "write", `{}`, map[string]string{"Idempotency-Key": "k-1"})
				if env.Status != contracts.StatusOK || env.Replayed || env.SideEffect != contracts.SideEffectDone {
					t.Errorf("the agent's second retry = %+v, want it sent and done", env)
				}
				if got := len(b.requests("/w")); got != 3 {
					t.Errorf("requests on the wire = %d after two retries by the agent, want 3", got)
				}
			})
			t.Run("a read-only call is still retried", func(t *testing.T) {
				b := &refusingBackend{code: c.code, refusals: 2, seen: map[string][]string{}}
				front := resendFront(t, b)
				_, env := postCall(t, front, "read", `{}`, nil)
				if env.Status != contracts.StatusOK || len(b.requests("/r")) != 3 {
					t.Errorf("envelope = %+v after %d requests, want ok after 3", env, len(b.requests("/r")))
				}
			})
			t.Run("a side-effecting call whose backend dedupes is retried with the same key", func(t *testing.T) {
				b := &refusingBackend{code: c.code, refusals: 2, seen: map[string][]string{}}
				front := resendFront(t, b)
				_, env := postCall(t, front, "write_dedupe", `{}`, map[string]string{"Idempotency-Key": "k-d"})
				keys := b.requests("/d")
				if env.Status != contracts.StatusOK || strings.Join(keys, ",") != "k-d,k-d,k-d" {
					t.Errorf("envelope = %+v, keys sent %q; want ok after three requests carrying k-d", env, keys)
				}
			})
		})
	}
}

// resendFront serves resendPolicy in front of b.
func resendFront(t *testing.T, b *refusingBackend) *httptest.Server {
	t.Helper()
	backend := httptest.NewServer(b)
	t.Cleanup(backend.Close)
	return serveCore(t, newTestCore(t, strings.ReplaceAll(resendPolicy, "{{url}}", backend.URL), Options{}))
}
