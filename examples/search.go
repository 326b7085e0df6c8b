// Package examples holds two small legacy HTTP backends, a search API and a
// notification API, that toolgate's demo, tests and benchmarks put behind the
// proxy.
//
// They behave like real old services rather than well-designed ones: an
// error code hidden in a 200 body, an HTML stack trace that leaks an internal
// host name, a query that hangs, deduplication only when the caller sends an
// Idempotency-Key. Every quirk is chosen deterministically by the request (see
// NewSearchBackend and NewNotifyBackend), so a test asks for exactly the
// failure it wants. State lives in memory, one copy per constructed backend;
// none of this is meant for production.
package examples

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Queries that make the search backend misbehave. They are compared after
// trimming surrounding white space and ignoring case.
const (
	// QuerySecret, and any query starting with it, is answered 200 with the
	// body {"code":"E_NOPERM","msg":"permission denied"}.
	QuerySecret = "secret"
	// QueryCrash is answered 500 with an HTML page holding a Java stack trace
	// that names CrashInternalHost.
	QueryCrash = "crash"
	// QuerySlow is answered normally after SearchOptions.SlowDelay.
	QuerySlow = "slow"
)

// CrashInternalHost is the internal database address revealed by the search
// backend's crash page. A proxy must never pass it on to an agent.
const CrashInternalHost = "search-db-03.internal:5432"

// DefaultSlowDelay is how long a search for QuerySlow takes when
// SearchOptions.SlowDelay is zero.
const DefaultSlowDelay = 3 * time.Second

// defaultLimit caps the results of a search without a limit parameter.
const defaultLimit = 10

// statusClientClosedRequest is nginx's non-standard code for a request whose
// caller went away before the answer was ready. Nobody reads it; it only keeps
// recorders and access logs from showing an implicit 200.
const statusClientClosedRequest = 499

// SearchOptions configures NewSearchBackend. The zero value is ready to use.
type SearchOptions struct {
	// Logger receives a debug line per search and a warning per crash.
	// Nil discards.
	Logger *slog.Logger
	// SlowDelay is how long a search for QuerySlow sleeps before answering;
	// the sleep ends early when the caller cancels. Zero means
	// DefaultSlowDelay (3s); a negative value answers at once.
	SlowDelay time.Duration
}

// Article is one search result as the search backend returns it.
type Article struct {
	ID      string `json:"id"`
	Title   string `json:"title"`
	Snippet string `json:"snippet"`
	URL     string `json:"url"`
}

// SearchStats is the body of the search backend's GET /admin/stats.
type SearchStats struct {
	Requests    int64 `json:"requests"`     // requests on any route, the stats request included
	Searches    int64 `json:"searches"`     // requests to GET /api/search
	OK          int64 `json:"ok"`           // searches answered with at least one result
	Empty       int64 `json:"empty"`        // searches answered with no result
	Forbidden   int64 `json:"forbidden"`    // searches answered with E_NOPERM
	Crashes     int64 `json:"crashes"`      // searches answered with the 500 page
	BadRequests int64 `json:"bad_requests"` // searches answered 400
	Slow        int64 `json:"slow"`         // slow searches started
	Canceled    int64 `json:"canceled"`     // slow searches abandoned because the caller went away
}

// NewSearchBackend returns a legacy search API over a built-in corpus of
// twenty articles in English and Chinese (see Articles).
//
// Routes:
//
//	GET /api/search?q=&limit=  200 {"results":[{"id","title","snippet","url"},…],"total":N}
//	GET /health                200 "ok" (text/plain)
//	GET /admin/stats           200 SearchStats as JSON
//	anything else              404 {"error":"not found"}; a known path with another method is 405
//
// A search matches q, without surrounding white space, as a case-insensitive
// substring of an article's title or snippet. Title matches come first, then
// snippet-only matches, each in corpus order. limit (default 10) caps the
// results; total counts every match. Answers by query:
//
//	no match                       200 {"results":[],"total":0}
//	QuerySecret or secret…         200 {"code":"E_NOPERM","msg":"permission denied"}
//	QueryCrash                     500 text/html Java stack trace naming CrashInternalHost
//	QuerySlow                      sleeps SearchOptions.SlowDelay, then answers normally;
//	                               if the caller goes away first it returns at once (499)
//	q missing or blank             400 {"error":"missing q"}
//	limit not an integer, or < 1   400 {"error":"limit must be a positive integer"}
//
// Every body carries Content-Length. A typical answer, q=go&limit=5, is about
// 1 KiB of JSON. The handler is safe for concurrent use.
func NewSearchBackend(opts SearchOptions) http.Handler {
	s := &searchBackend{
		log:       loggerOrDiscard(opts.Logger),
		slowDelay: opts.SlowDelay,
	}
	if s.slowDelay == 0 {
		s.slowDelay = DefaultSlowDelay
	}
	for _, a := range Articles() {
		s.corpus = append(s.corpus, indexedArticle{
			Article: a,
			title:   strings.ToLower(a.Title),
			snippet: strings.ToLower(a.Snippet),
		})
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/search", s.handleSearch)
	mux.Handle("/api/search", methodNotAllowed(http.MethodGet, http.MethodHead))
	mux.HandleFunc("GET /health", handleHealth)
	mux.HandleFunc("GET /admin/stats", s.handleStats)
	mux.HandleFunc("/", handleNotFound)
	s.mux = mux
	return s
}

type searchBackend struct {
	log       *slog.Logger
	slowDelay time.Duration
	corpus    []indexedArticle
	mux       *http.ServeMux

	requests    atomic.Int64
	searches    atomic.Int64
	ok          atomic.Int64
	empty       atomic.Int64
	forbidden   atomic.Int64
	crashes     atomic.Int64
	badRequests atomic.Int64
	slow        atomic.Int64
	canceled    atomic.Int64
}

// indexedArticle keeps the lower-cased text next to the article so that a
// search does not lower-case the corpus on every request.
type indexedArticle struct {
	Article
	title, snippet string
}

type searchResponse struct {
	Results []Article `json:"results"`
	Total   int       `json:"total"`
}

type legacyError struct {
	Code string `json:"code"`
	Msg  string `json:"msg"`
}

func (s *searchBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.requests.Add(1)
	s.mux.ServeHTTP(w, r)
}

func (s *searchBackend) handleSearch(w http.ResponseWriter, r *http.Request) {
	s.searches.Add(1)
	params := r.URL.Query()
	q := strings.TrimSpace(params.Get("q"))
	if q == "" {
		s.badRequests.Add(1)
		writeError(w, http.StatusBadRequest, "missing q")
		return
	}
	limit := defaultLimit
	if v := params.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			s.badRequests.Add(1)
			writeError(w, http.StatusBadRequest, "limit must be a positive integer")
			return
		}
		limit = n
	}

	key := strings.ToLower(q)
	switch {
	case strings.HasPrefix(key, QuerySecret):
		s.forbidden.Add(1)
		s.logSearch(r.Context(), q, http.StatusOK, "E_NOPERM")
		writeJSON(w, http.StatusOK, legacyError{Code: "E_NOPERM", Msg: "permission denied"})
		return
	case key == QueryCrash:
		s.crashes.Add(1)
		s.log.LogAttrs(r.Context(), slog.LevelWarn, "search crashed",
			slog.String("q", q), slog.String("db", CrashInternalHost))
		writeBody(w, http.StatusInternalServerError, "text/html;charset=utf-8", []byte(crashPage))
		return
	case key == QuerySlow:
		s.slow.Add(1)
		if !sleep(r.Context(), s.slowDelay) {
			s.canceled.Add(1)
			s.logSearch(r.Context(), q, statusClientClosedRequest, "canceled")
			w.WriteHeader(statusClientClosedRequest)
			return
		}
	}

	results, total := s.search(key, limit)
	if total == 0 {
		s.empty.Add(1)
	} else {
		s.ok.Add(1)
	}
	s.logSearch(r.Context(), q, http.StatusOK, strconv.Itoa(total)+" matches")
	writeJSON(w, http.StatusOK, searchResponse{Results: results, Total: total})
}

// search returns at most limit matches of the lower-cased query and the number
// of all matches. Results is never nil, so it encodes as [] rather than null.
func (s *searchBackend) search(key string, limit int) (results []Article, total int) {
	results = make([]Article, 0, min(limit, len(s.corpus)))
	var snippetOnly []Article
	for i := range s.corpus {
		a := &s.corpus[i]
		switch {
		case strings.Contains(a.title, key):
			total++
			if len(results) < limit {
				results = append(results, a.Article)
			}
		case strings.Contains(a.snippet, key):
			total++
			snippetOnly = append(snippetOnly, a.Article)
		}
	}
	for _, a := range snippetOnly {
		if len(results) == limit {
			break
		}
		results = append(results, a)
	}
	return results, total
}

func (s *searchBackend) handleStats(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, SearchStats{
		Requests:    s.requests.Load(),
		Searches:    s.searches.Load(),
		OK:          s.ok.Load(),
		Empty:       s.empty.Load(),
		Forbidden:   s.forbidden.Load(),
		Crashes:     s.crashes.Load(),
		BadRequests: s.badRequests.Load(),
		Slow:        s.slow.Load(),
		Canceled:    s.canceled.Load(),
	})
}

func (s *searchBackend) logSearch(ctx context.Context, q string, status int, outcome string) {
	s.log.LogAttrs(ctx, slog.LevelDebug, "search",
		slog.String("q", q), slog.Int("status", status), slog.String("outcome", outcome))
}

// sleep waits for d and reports whether it did; it returns false as soon as
// ctx is done.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// PaddedSearchAnswer is a search answer of at least size bytes and at
// least one result: the corpus repeated as results, and their total. It is
// what bench/backend -size serves, and what the benchmarks and tests of
// large answers read.
func PaddedSearchAnswer(size int) []byte {
	articles := Articles()
	encoded := make([][]byte, len(articles))
	for i, a := range articles {
		b, err := json.Marshal(a)
		if err != nil {
			panic(err) // an Article is strings only
		}
		encoded[i] = b
	}
	body := []byte(`{"results":[`)
	n := 0
	for ; n == 0 || len(body) < size; n++ {
		if n > 0 {
			body = append(body, ',')
		}
		body = append(body, encoded[n%len(encoded)]...)
	}
	body = append(body, `],"total":`...)
	body = strconv.AppendInt(body, int64(n), 10)
	return append(body, '}')
}

// Articles returns a fresh copy of the search backend's built-in corpus, in
// corpus order.
func Articles() []Article {
	const base = "https://kb.example.com/articles/"
	return []Article{
		{"kb-1001", "Go concurrency patterns", "Goroutines, channels and select: pipelines, fan-out and fan-in, and cancellation with context in idiomatic code.", base + "go-concurrency-patterns"},
		{"kb-1002", "Effective error handling in Go", "Wrapping errors with %w, sentinel versus typed errors, and when errors.Is and errors.As pay for themselves.", base + "go-error-handling"},
		{"kb-1003", "Designing idempotent HTTP APIs", "Idempotency keys, safe retries and how payment providers avoid charging a customer twice for one order.", base + "idempotent-http-apis"},
		{"kb-1004", "Why your database queries are slow", "Reading query plans, missing indexes, N+1 queries and connection pool exhaustion in legacy services.", base + "slow-database-queries"},
		{"kb-1005", "Introduction to quantum computing", "Qubits, superposition and entanglement explained without the maths, and what today's machines can really do.", base + "quantum-computing-intro"},
		{"kb-1006", "Circuit breakers and bulkheads", "Stopping cascading failures with thresholds, half-open probes and isolation, with examples in Go and Java.", base + "circuit-breakers"},
		{"kb-1007", "Prometheus metric naming", "Base units, _total suffixes on counters, histogram buckets and keeping label cardinality bounded.", base + "prometheus-naming"},
		{"kb-1008", "Tool calling for LLM agents", "How models pick tools, why explicit result statuses matter, and short observations, with Go and Python code.", base + "llm-tool-calling"},
		{"kb-1009", "Kubernetes sidecar patterns", "Ambassadors, adapters and proxies next to the main container: lifecycle, readiness and resource limits.", base + "kubernetes-sidecars"},
		{"kb-1010", "Testing HTTP services in Go", "httptest servers, table-driven tests, golden files and running everything under the race detector.", base + "testing-http-services"},
		{"kb-2001", "量子计算入门", "从量子比特、叠加态与纠缠讲起，介绍量子门、量子线路，以及当前量子计算机的能力边界。", base + "quantum-computing-zh"},
		{"kb-2002", "Go 语言并发编程实战", "goroutine 与 channel 的常见用法，用 context 控制超时与取消，避免协程泄漏。", base + "go-concurrency-zh"},
		{"kb-2003", "微服务中的幂等设计", "幂等键、去重表与重试策略：如何保证通知、支付等有副作用的接口只执行一次。", base + "idempotency-zh"},
		{"kb-2004", "大语言模型的工具调用", "模型如何选择工具，为什么返回结果必须带有明确的状态，以及如何压缩观察结果。", base + "llm-tools-zh"},
		{"kb-2005", "机器学习基础：线性回归", "最小二乘法、梯度下降与正则化，用一个房价预测的例子把它们串起来。", base + "linear-regression-zh"},
		{"kb-2006", "分布式系统中的熔断与限流", "熔断器的三种状态、令牌桶限流算法，以及如何为下游服务设置合理的超时。", base + "breakers-rate-limits-zh"},
		{"kb-2007", "Redis 缓存设计与常见问题", "缓存穿透、缓存击穿与缓存雪崩的成因和应对办法，附 SET NX 分布式锁示例。", base + "redis-cache-zh"},
		{"kb-2008", "Kubernetes 服务网格入门", "Envoy 与 Istio 的基本概念：sidecar 注入、流量管理与 mTLS 身份。", base + "service-mesh-zh"},
		{"kb-2009", "深度学习中的注意力机制", "从 Seq2Seq 到 Transformer，图解自注意力与多头注意力的计算过程。", base + "attention-zh"},
		{"kb-2010", "遗留系统改造指南", "在不停机的前提下，给老旧接口加上超时、重试、监控与契约校验。", base + "legacy-modernization-zh"},
	}
}

// crashPage is what an unhandled exception looks like on an old Spring
// application in Tomcat: HTML, a stack trace, and the database's address.
const crashPage = `<!doctype html><html lang="en"><head><title>HTTP Status 500 – Internal Server Error</title></head><body>
<h1>HTTP Status 500 – Internal Server Error</h1><hr class="line" />
<p><b>Type</b> Exception Report</p>
<p><b>Message</b> Request processing failed; nested exception is org.springframework.jdbc.CannotGetJdbcConnectionException: Failed to obtain JDBC Connection</p>
<p><b>Exception</b></p><pre>org.springframework.web.util.NestedServletException: Request processing failed; nested exception is org.springframework.jdbc.CannotGetJdbcConnectionException: Failed to obtain JDBC Connection
	org.springframework.web.servlet.FrameworkServlet.processRequest(FrameworkServlet.java:1014)
	org.springframework.web.servlet.FrameworkServlet.doGet(FrameworkServlet.java:898)
	javax.servlet.http.HttpServlet.service(HttpServlet.java:655)
	com.example.search.web.SearchController.search(SearchController.java:87)
</pre>
<p><b>Root Cause</b></p><pre>org.postgresql.util.PSQLException: Connection to ` + CrashInternalHost + ` refused. Check that the hostname and port are correct and that the postmaster is accepting TCP/IP connections.
	org.postgresql.core.v3.ConnectionFactoryImpl.openConnectionImpl(ConnectionFactoryImpl.java:319)
	com.zaxxer.hikari.pool.HikariPool.getConnection(HikariPool.java:162)
	com.example.search.repo.ArticleRepository.findByKeyword(ArticleRepository.java:42)
</pre>
<p><b>Note</b> The full stack trace of the root cause is available in the server logs.</p>
<hr class="line" /><h3>Apache Tomcat/9.0.41</h3></body></html>
`

// The helpers below are shared by both backends.

type errorBody struct {
	Error string `json:"error"`
}

// writeJSON encodes v and writes it with status, Content-Type and
// Content-Length.
func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		// Only this package's own plain structs reach here, and they encode.
		writeBody(w, http.StatusInternalServerError, "text/plain; charset=utf-8", []byte("internal error\n"))
		return
	}
	writeBody(w, status, "application/json", body)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, errorBody{Error: msg})
}

func writeBody(w http.ResponseWriter, status int, contentType string, body []byte) {
	h := w.Header()
	h.Set("Content-Type", contentType)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func handleHealth(w http.ResponseWriter, _ *http.Request) {
	writeBody(w, http.StatusOK, "text/plain; charset=utf-8", []byte("ok"))
}

func handleNotFound(w http.ResponseWriter, _ *http.Request) {
	writeError(w, http.StatusNotFound, "not found")
}

// methodNotAllowed answers a known path requested with another method, as the
// mux would, but in JSON like every other error of these backends.
func methodNotAllowed(allowed ...string) http.Handler {
	allow := strings.Join(allowed, ", ")
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Allow", allow)
		writeError(w, http.StatusMethodNotAllowed, "method not allowed")
	})
}

func loggerOrDiscard(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.New(slog.DiscardHandler)
	}
	return l
}
