package examples

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// answer is what a test reads back from a backend.
type answer struct {
	status int
	header http.Header
	body   []byte
}

func call(t *testing.T, client *http.Client, method, url, contentType, body string, header map[string]string) answer {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{status: resp.StatusCode, header: resp.Header, body: b}
}

func get(t *testing.T, url string) answer {
	t.Helper()
	return call(t, http.DefaultClient, http.MethodGet, url, "", "", nil)
}

func decode[T any](t *testing.T, body []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("decoding %q: %v", body, err)
	}
	return v
}

func newSearchServer(t *testing.T, opts SearchOptions) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(NewSearchBackend(opts))
	t.Cleanup(srv.Close)
	return srv
}

func TestSearchBackend(t *testing.T) {
	titles := func(r searchResponse) []string {
		var out []string
		for _, a := range r.Results {
			out = append(out, a.Title)
		}
		return out
	}
	tests := []struct {
		name        string
		method      string
		path        string
		wantStatus  int
		wantType    string
		wantBody    string                               // exact, when set
		check       func(t *testing.T, r answer)         // extra checks, when set
		checkSearch func(t *testing.T, r searchResponse) // on a decoded search answer, when set
	}{
		{
			name: "a matching query returns the capped results and the total before the cap",
			path: "/api/search?q=go&limit=2", wantStatus: 200, wantType: "application/json",
			checkSearch: func(t *testing.T, r searchResponse) {
				if len(r.Results) != 2 || r.Total != 6 {
					t.Errorf("got %d results, total %d; want 2, 6", len(r.Results), r.Total)
				}
			},
		},
		{
			name: "title matches come before snippet-only matches",
			path: "/api/search?q=go", wantStatus: 200, wantType: "application/json",
			checkSearch: func(t *testing.T, r searchResponse) {
				want := []string{"Go concurrency patterns", "Effective error handling in Go", "Testing HTTP services in Go",
					"Go 语言并发编程实战", "Circuit breakers and bulkheads", "Tool calling for LLM agents"}
				if got := titles(r); strings.Join(got, "|") != strings.Join(want, "|") {
					t.Errorf("titles = %q, want %q", got, want)
				}
			},
		},
		{
			name: "without a limit at most ten results come back",
			path: "/api/search?q=e", wantStatus: 200, wantType: "application/json",
			checkSearch: func(t *testing.T, r searchResponse) {
				if len(r.Results) != 10 || r.Total <= 10 {
					t.Errorf("got %d results, total %d; want 10 of more than 10", len(r.Results), r.Total)
				}
			},
		},
		{
			name: "a limit above the number of matches returns every match",
			path: "/api/search?q=go&limit=100", wantStatus: 200, wantType: "application/json",
			checkSearch: func(t *testing.T, r searchResponse) {
				if len(r.Results) != 6 || r.Total != 6 {
					t.Errorf("got %d results, total %d; want 6, 6", len(r.Results), r.Total)
				}
			},
		},
		{
			name: "matching ignores case and surrounding white space",
			path: "/api/search?q=%20%20GO%20&limit=2", wantStatus: 200, wantType: "application/json",
			checkSearch: func(t *testing.T, r searchResponse) {
				if r.Total != 6 {
					t.Errorf("total = %d, want 6", r.Total)
				}
			},
		},
		{
			name: "a Chinese query matches Chinese titles",
			path: "/api/search?q=" + url.QueryEscape("量子"), wantStatus: 200, wantType: "application/json",
			checkSearch: func(t *testing.T, r searchResponse) {
				if r.Total != 1 || r.Results[0].Title != "量子计算入门" {
					t.Errorf("got %q, total %d; want [量子计算入门], 1", titles(r), r.Total)
				}
			},
		},
		{
			name: "a query that matches nothing is an empty 200",
			path: "/api/search?q=xyzzy", wantStatus: 200, wantType: "application/json",
			wantBody: `{"results":[],"total":0}`,
		},
		{
			name: "the secret query answers 200 with an error code in the body",
			path: "/api/search?q=secret", wantStatus: 200, wantType: "application/json",
			wantBody: `{"code":"E_NOPERM","msg":"permission denied"}`,
		},
		{
			name: "a query starting with secret is refused the same way",
			path: "/api/search?q=Secret+salaries", wantStatus: 200, wantType: "application/json",
			wantBody: `{"code":"E_NOPERM","msg":"permission denied"}`,
		},
		{
			name: "the crash query answers 500 with a stack trace that leaks an internal host",
			path: "/api/search?q=crash", wantStatus: 500, wantType: "text/html;charset=utf-8",
			check: func(t *testing.T, r answer) {
				for _, want := range []string{CrashInternalHost, "<html", "PSQLException", ".java:"} {
					if !strings.Contains(string(r.body), want) {
						t.Errorf("crash page lacks %q", want)
					}
				}
			},
		},
		{
			name: "a missing q is a 400",
			path: "/api/search?limit=3", wantStatus: 400, wantType: "application/json",
			wantBody: `{"error":"missing q"}`,
		},
		{
			name: "a blank q is a 400",
			path: "/api/search?q=+++", wantStatus: 400, wantType: "application/json",
			wantBody: `{"error":"missing q"}`,
		},
		{
			name: "a limit that is not an integer is a 400",
			path: "/api/search?q=go&limit=ten", wantStatus: 400, wantType: "application/json",
			wantBody: `{"error":"limit must be a positive integer"}`,
		},
		{
			name: "a limit below one is a 400",
			path: "/api/search?q=go&limit=0", wantStatus: 400, wantType: "application/json",
			wantBody: `{"error":"limit must be a positive integer"}`,
		},
		{
			name: "health answers ok in plain text",
			path: "/health", wantStatus: 200, wantType: "text/plain; charset=utf-8",
			wantBody: "ok",
		},
		{
			name: "an unknown route is a JSON 404",
			path: "/api/v2/search?q=go", wantStatus: 404, wantType: "application/json",
			wantBody: `{"error":"not found"}`,
		},
		{
			name:   "the search route with another method is a JSON 405",
			method: http.MethodPost, path: "/api/search?q=go", wantStatus: 405, wantType: "application/json",
			wantBody: `{"error":"method not allowed"}`,
			check: func(t *testing.T, r answer) {
				if got := r.header.Get("Allow"); got != "GET, HEAD" {
					t.Errorf("Allow = %q, want %q", got, "GET, HEAD")
				}
			},
		},
	}
	srv := newSearchServer(t, SearchOptions{})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			method := tt.method
			if method == "" {
				method = http.MethodGet
			}
			r := call(t, srv.Client(), method, srv.URL+tt.path, "", "", nil)
			if r.status != tt.wantStatus {
				t.Fatalf("status = %d, want %d; body %s", r.status, tt.wantStatus, r.body)
			}
			if got := r.header.Get("Content-Type"); got != tt.wantType {
				t.Errorf("Content-Type = %q, want %q", got, tt.wantType)
			}
			if got := r.header.Get("Content-Length"); got != strconv.Itoa(len(r.body)) {
				t.Errorf("Content-Length = %q, body has %d bytes", got, len(r.body))
			}
			if tt.wantBody != "" && string(r.body) != tt.wantBody {
				t.Errorf("body = %s, want %s", r.body, tt.wantBody)
			}
			if tt.checkSearch != nil {
				tt.checkSearch(t, decode[searchResponse](t, r.body))
			}
			if tt.check != nil {
				tt.check(t, r)
			}
		})
	}
}

func TestSearchBackendTypicalAnswerIsAboutOneKiB(t *testing.T) {
	srv := newSearchServer(t, SearchOptions{})
	r := get(t, srv.URL+"/api/search?q=go&limit=5")
	if r.status != 200 {
		t.Fatalf("status = %d", r.status)
	}
	if n := len(r.body); n < 700 || n > 1500 {
		t.Errorf("q=go&limit=5 answered %d bytes, want 700..1500 (benchmarks rely on ~1 KiB)", n)
	}
	if got := decode[searchResponse](t, r.body); len(got.Results) != 5 {
		t.Errorf("got %d results, want 5", len(got.Results))
	}
}

func TestSearchBackendSlowQuery(t *testing.T) {
	t.Run("the slow query answers normally after the delay", func(t *testing.T) {
		srv := newSearchServer(t, SearchOptions{SlowDelay: 50 * time.Millisecond})
		start := time.Now()
		r := get(t, srv.URL+"/api/search?q=slow")
		if elapsed := time.Since(start); elapsed < 50*time.Millisecond {
			t.Errorf("answered after %v, want at least 50ms", elapsed)
		}
		if r.status != 200 {
			t.Fatalf("status = %d, want 200", r.status)
		}
		got := decode[searchResponse](t, r.body)
		if got.Total != 1 || got.Results[0].Title != "Why your database queries are slow" {
			t.Errorf("got %+v", got)
		}
	})

	t.Run("the slow query stops as soon as the caller gives up", func(t *testing.T) {
		srv := newSearchServer(t, SearchOptions{SlowDelay: time.Hour})
		client := &http.Client{Timeout: 100 * time.Millisecond}
		start := time.Now()
		resp, err := client.Get(srv.URL + "/api/search?q=slow")
		if err == nil {
			resp.Body.Close()
			t.Fatalf("got status %d, want a client timeout", resp.StatusCode)
		}
		if elapsed := time.Since(start); elapsed > 2*time.Second {
			t.Errorf("client gave up after %v", elapsed)
		}
		// The handler must notice the cancellation; srv.Close in cleanup
		// would otherwise wait an hour for it.
		deadline := time.Now().Add(2 * time.Second)
		for {
			stats := decode[SearchStats](t, get(t, srv.URL+"/admin/stats").body)
			if stats.Canceled == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("handler still sleeping 2s after the caller left: %+v", stats)
			}
			time.Sleep(10 * time.Millisecond)
		}
	})

	t.Run("a cancelled context ends the sleep with 499", func(t *testing.T) {
		h := NewSearchBackend(SearchOptions{SlowDelay: time.Hour})
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequestWithContext(ctx, http.MethodGet, "/api/search?q=slow", nil))
		if rec.Code != statusClientClosedRequest {
			t.Errorf("status = %d, want %d", rec.Code, statusClientClosedRequest)
		}
	})

	t.Run("a zero SlowDelay means three seconds and a negative one none", func(t *testing.T) {
		if d := NewSearchBackend(SearchOptions{}).(*searchBackend).slowDelay; d != 3*time.Second {
			t.Errorf("zero SlowDelay became %v, want 3s", d)
		}
		h := NewSearchBackend(SearchOptions{SlowDelay: -1})
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/api/search?q=slow", nil))
		if rec.Code != 200 {
			t.Errorf("status = %d, want 200", rec.Code)
		}
	})
}

func TestSearchBackendStatsCountRequests(t *testing.T) {
	srv := newSearchServer(t, SearchOptions{})
	for _, path := range []string{
		"/api/search?q=go", "/api/search?q=xyzzy", "/api/search?q=secret", "/api/search?q=crash",
		"/api/search", "/api/search?q=go&limit=x", "/health", "/nowhere",
	} {
		get(t, srv.URL+path)
	}
	r := get(t, srv.URL+"/admin/stats")
	if r.status != 200 || r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("status %d, Content-Type %q", r.status, r.header.Get("Content-Type"))
	}
	want := SearchStats{Requests: 9, Searches: 6, OK: 1, Empty: 1, Forbidden: 1, Crashes: 1, BadRequests: 2}
	if got := decode[SearchStats](t, r.body); got != want {
		t.Errorf("stats = %+v, want %+v", got, want)
	}
}

func TestSearchBackendLogsCrashesToTheGivenLogger(t *testing.T) {
	var buf bytes.Buffer
	h := NewSearchBackend(SearchOptions{Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/api/search?q=crash", nil))
	if got := buf.String(); !strings.Contains(got, "level=WARN") || !strings.Contains(got, CrashInternalHost) {
		t.Errorf("log = %q, want a warning naming the database", got)
	}
}

func TestSearchBackendIsSafeForConcurrentUse(t *testing.T) {
	srv := newSearchServer(t, SearchOptions{SlowDelay: -1})
	queries := []string{"go", "xyzzy", "secret", "crash", "slow", "量子"}
	var wg sync.WaitGroup
	for i := range 60 {
		wg.Go(func() {
			resp, err := srv.Client().Get(srv.URL + "/api/search?q=" + url.QueryEscape(queries[i%len(queries)]))
			if err != nil {
				t.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		})
	}
	wg.Wait()
	if got := decode[SearchStats](t, get(t, srv.URL+"/admin/stats").body); got.Searches != 60 || got.Crashes != 10 {
		t.Errorf("stats = %+v, want 60 searches and 10 crashes", got)
	}
}

// fixedNow is the clock of every notify backend under test.
func fixedNow() time.Time { return time.Date(2025, 3, 1, 9, 30, 0, 0, time.UTC) }

func newNotifyServer(t *testing.T) (*NotifyBackend, *httptest.Server) {
	t.Helper()
	b := NewNotifyBackend(NotifyOptions{
		Users: []string{"erin"},
		Now:   fixedNow,
	})
	srv := httptest.NewServer(b)
	t.Cleanup(srv.Close)
	return b, srv
}

func TestNotifyBackend(t *testing.T) {
	const jsonType = "application/json"
	tests := []struct {
		name        string
		method      string
		path        string
		contentType string
		body        string
		wantStatus  int
		wantBody    string
		wantSends   int
	}{
		{
			name: "a send to a known user is created", method: "POST",
			path: "/v1/users/alice/notifications", contentType: jsonType, body: `{"text":"build finished"}`,
			wantStatus: 201, wantSends: 1,
			wantBody: `{"id":"ntf_000001","user_id":"alice","text":"build finished","created_at":"2025-03-01T09:30:00Z"}`,
		},
		{
			name: "a user from the options is known", method: "POST",
			path: "/v1/users/erin/notifications", contentType: jsonType, body: `{"text":"你好"}`,
			wantStatus: 201, wantSends: 1,
			wantBody: `{"id":"ntf_000001","user_id":"erin","text":"你好","created_at":"2025-03-01T09:30:00Z"}`,
		},
		{
			name: "a JSON content type with parameters is accepted", method: "POST",
			path: "/v1/users/bob/notifications", contentType: "application/json; charset=utf-8", body: `{"text":"hi"}`,
			wantStatus: 201, wantSends: 1,
			wantBody: `{"id":"ntf_000001","user_id":"bob","text":"hi","created_at":"2025-03-01T09:30:00Z"}`,
		},
		{
			name: "an unknown user is a 404", method: "POST",
			path: "/v1/users/mallory/notifications", contentType: jsonType, body: `{"text":"hi"}`,
			wantStatus: 404, wantBody: `{"error":"no such user"}`,
		},
		{
			name: "a missing text is a 400", method: "POST",
			path: "/v1/users/alice/notifications", contentType: jsonType, body: `{"message":"hi"}`,
			wantStatus: 400, wantBody: `{"error":"missing text"}`,
		},
		{
			name: "an empty text is a 400", method: "POST",
			path: "/v1/users/alice/notifications", contentType: jsonType, body: `{"text":"  "}`,
			wantStatus: 400, wantBody: `{"error":"missing text"}`,
		},
		{
			name: "a body that is not JSON is a 400", method: "POST",
			path: "/v1/users/alice/notifications", contentType: jsonType, body: `text=hi`,
			wantStatus: 400, wantBody: `{"error":"body must be a JSON object with a string text"}`,
		},
		{
			name: "a JSON null body is a 400", method: "POST",
			path: "/v1/users/alice/notifications", contentType: jsonType, body: `null`,
			wantStatus: 400, wantBody: `{"error":"body must be a JSON object with a string text"}`,
		},
		{
			name: "a text that is not a string is a 400", method: "POST",
			path: "/v1/users/alice/notifications", contentType: jsonType, body: `{"text":42}`,
			wantStatus: 400, wantBody: `{"error":"body must be a JSON object with a string text"}`,
		},
		{
			name: "an empty body is a 400", method: "POST",
			path: "/v1/users/alice/notifications", contentType: jsonType,
			wantStatus: 400, wantBody: `{"error":"body must be a JSON object with a string text"}`,
		},
		{
			name: "a body over 64 KiB is a 413", method: "POST",
			path: "/v1/users/alice/notifications", contentType: jsonType,
			body:       `{"text":"` + strings.Repeat("x", maxNotifyBody) + `"}`,
			wantStatus: 413, wantBody: `{"error":"body too large"}`,
		},
		{
			name: "a plain text content type is a 415", method: "POST",
			path: "/v1/users/alice/notifications", contentType: "text/plain", body: `{"text":"hi"}`,
			wantStatus: 415, wantBody: `{"error":"content type must be application/json"}`,
		},
		{
			name: "a missing content type is a 415", method: "POST",
			path: "/v1/users/alice/notifications", body: `{"text":"hi"}`,
			wantStatus: 415, wantBody: `{"error":"content type must be application/json"}`,
		},
		{
			name: "the notifications route with another method is a 405", method: "GET",
			path: "/v1/users/alice/notifications", wantStatus: 405, wantBody: `{"error":"method not allowed"}`,
		},
		{
			name: "an unknown route is a JSON 404", method: "POST",
			path: "/v1/users/alice/messages", contentType: jsonType, body: `{"text":"hi"}`,
			wantStatus: 404, wantBody: `{"error":"not found"}`,
		},
		{
			name: "health answers ok in plain text", method: "GET",
			path: "/health", wantStatus: 200, wantBody: "ok",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, srv := newNotifyServer(t)
			r := call(t, srv.Client(), tt.method, srv.URL+tt.path, tt.contentType, tt.body, nil)
			if r.status != tt.wantStatus {
				t.Errorf("status = %d, want %d", r.status, tt.wantStatus)
			}
			if string(r.body) != tt.wantBody {
				t.Errorf("body = %s, want %s", r.body, tt.wantBody)
			}
			if got := r.header.Get("Content-Length"); got != strconv.Itoa(len(r.body)) {
				t.Errorf("Content-Length = %q, body has %d bytes", got, len(r.body))
			}
			if got := b.Count(); got != tt.wantSends {
				t.Errorf("Count() = %d, want %d", got, tt.wantSends)
			}
		})
	}
}

func send(t *testing.T, srv *httptest.Server, user, text, key string) answer {
	t.Helper()
	var h map[string]string
	if key != "" {
		h = map[string]string{"Idempotency-Key": key}
	}
	body, err := json.Marshal(map[string]string{"text": text})
	if err != nil {
		t.Fatal(err)
	}
	return call(t, srv.Client(), http.MethodPost, srv.URL+"/v1/users/"+user+"/notifications", "application/json", string(body), h)
}

func TestNotifyBackendIdempotency(t *testing.T) {
	t.Run("a repeated key replays the first answer without sending again", func(t *testing.T) {
		b, srv := newNotifyServer(t)
		first := send(t, srv, "alice", "deploy done", "k-1")
		second := send(t, srv, "alice", "deploy done", "k-1")
		if first.status != 201 || second.status != 201 {
			t.Fatalf("statuses %d, %d; want 201, 201", first.status, second.status)
		}
		if string(first.body) != string(second.body) {
			t.Errorf("replay %s differs from first answer %s", second.body, first.body)
		}
		if first.header.Get("Idempotent-Replayed") != "" || second.header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("Idempotent-Replayed: first %q, second %q; want \"\", \"true\"",
				first.header.Get("Idempotent-Replayed"), second.header.Get("Idempotent-Replayed"))
		}
		if b.Count() != 1 {
			t.Errorf("Count() = %d, want 1", b.Count())
		}
	})

	t.Run("a repeated key with another text still replays the first answer", func(t *testing.T) {
		b, srv := newNotifyServer(t)
		send(t, srv, "alice", "one", "k-1")
		r := send(t, srv, "alice", "two", "k-1")
		if n := decode[Notification](t, r.body); n.Text != "one" || b.Count() != 1 {
			t.Errorf("got text %q and %d sends; want \"one\" and 1", n.Text, b.Count())
		}
	})

	t.Run("keys are scoped per user", func(t *testing.T) {
		b, srv := newNotifyServer(t)
		a := decode[Notification](t, send(t, srv, "alice", "hi", "k-1").body)
		c := decode[Notification](t, send(t, srv, "bob", "hi", "k-1").body)
		if a.ID == c.ID || b.Count() != 2 {
			t.Errorf("ids %s, %s and %d sends; want distinct ids and 2 sends", a.ID, c.ID, b.Count())
		}
	})

	t.Run("without a key every request sends", func(t *testing.T) {
		b, srv := newNotifyServer(t)
		send(t, srv, "alice", "hi", "")
		send(t, srv, "alice", "hi", "")
		if b.Count() != 2 {
			t.Errorf("Count() = %d, want 2", b.Count())
		}
	})

	t.Run("a failed request does not use up its key", func(t *testing.T) {
		b, srv := newNotifyServer(t)
		if r := send(t, srv, "alice", "", "k-1"); r.status != 400 {
			t.Fatalf("status = %d, want 400", r.status)
		}
		if r := send(t, srv, "alice", "hi", "k-1"); r.status != 201 || r.header.Get("Idempotent-Replayed") != "" {
			t.Errorf("status %d, replayed %q; want a fresh 201", r.status, r.header.Get("Idempotent-Replayed"))
		}
		if b.Count() != 1 {
			t.Errorf("Count() = %d, want 1", b.Count())
		}
	})

	t.Run("a key over 255 bytes is a 400", func(t *testing.T) {
		b, srv := newNotifyServer(t)
		r := send(t, srv, "alice", "hi", strings.Repeat("k", 256))
		if r.status != 400 || string(r.body) != `{"error":"idempotency key too long"}` || b.Count() != 0 {
			t.Errorf("status %d, body %s, %d sends", r.status, r.body, b.Count())
		}
	})
}

func TestNotifyBackendRecordsSendsInOrder(t *testing.T) {
	b, srv := newNotifyServer(t)
	send(t, srv, "alice", "one", "k-1")
	send(t, srv, "bob", "two", "")
	send(t, srv, "alice", "one", "k-1") // replay
	send(t, srv, "carol", "three", "k-3")

	want := []Notification{
		{ID: "ntf_000001", UserID: "alice", Text: "one", CreatedAt: fixedNow(), IdempotencyKey: "k-1"},
		{ID: "ntf_000002", UserID: "bob", Text: "two", CreatedAt: fixedNow()},
		{ID: "ntf_000003", UserID: "carol", Text: "three", CreatedAt: fixedNow(), IdempotencyKey: "k-3"},
	}
	got := b.Sent()
	if !slices.Equal(got, want) {
		t.Fatalf("Sent() = %+v\nwant %+v", got, want)
	}
	got[0].Text = "changed"
	if b.Sent()[0].Text != "one" {
		t.Error("Sent() returned the backend's own slice, not a copy")
	}
}

func TestNotifyBackendConcurrentSends(t *testing.T) {
	t.Run("distinct keys each send once", func(t *testing.T) {
		b, srv := newNotifyServer(t)
		const n = 50
		ids := make([]string, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				r := sendNoFatal(srv, "dave", "hi", fmt.Sprintf("key-%d", i))
				if r.err != nil || r.status != 201 {
					t.Errorf("send %d: status %d, err %v", i, r.status, r.err)
					return
				}
				ids[i] = r.id
			})
		}
		wg.Wait()
		seen := make(map[string]bool)
		for _, id := range ids {
			seen[id] = true
		}
		if b.Count() != n || len(seen) != n {
			t.Errorf("Count() = %d with %d distinct ids, want %d and %d", b.Count(), len(seen), n, n)
		}
	})

	t.Run("one key sent concurrently sends once", func(t *testing.T) {
		b, srv := newNotifyServer(t)
		const n = 50
		ids := make([]string, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				r := sendNoFatal(srv, "dave", "hi", "same-key")
				if r.err != nil || r.status != 201 {
					t.Errorf("send %d: status %d, err %v", i, r.status, r.err)
					return
				}
				ids[i] = r.id
			})
		}
		wg.Wait()
		for _, id := range ids {
			if id != "ntf_000001" {
				t.Fatalf("got id %q, want every answer to be ntf_000001", id)
			}
		}
		if b.Count() != 1 {
			t.Errorf("Count() = %d, want 1", b.Count())
		}
	})
}

type sendResult struct {
	status int
	id     string
	err    error
}

// sendNoFatal is send for goroutines, where t.Fatal must not be called.
func sendNoFatal(srv *httptest.Server, user, text, key string) sendResult {
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/v1/users/"+user+"/notifications",
		strings.NewReader(`{"text":`+strconv.Quote(text)+`}`))
	if err != nil {
		return sendResult{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := srv.Client().Do(req)
	if err != nil {
		return sendResult{err: err}
	}
	defer resp.Body.Close()
	var n Notification
	if err := json.NewDecoder(resp.Body).Decode(&n); err != nil {
		return sendResult{status: resp.StatusCode, err: err}
	}
	if n.ID == "" {
		return sendResult{status: resp.StatusCode, err: errors.New("answer without id")}
	}
	return sendResult{status: resp.StatusCode, id: n.ID}
}
