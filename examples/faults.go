package examples

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// FaultKind is one way the fault backend answers a request.
type FaultKind string

// The fault kinds. A write (POST /send) performs its side effect when the
// request arrives, before the fault shows, for the kinds whose
// PerformsEffect is true; the others refuse before acting.
const (
	FaultNone        FaultKind = "none"         // 200 with data (a write answers 201)
	FaultEmpty       FaultKind = "empty"        // 200 with no result; a write answers 204 No Content
	FaultDelay       FaultKind = "delay"        // answers as none after FaultOptions.Delay
	FaultHang        FaultKind = "hang"         // never answers; returns when the caller goes away
	FaultResetBefore FaultKind = "reset_before" // resets the connection (RST) without acting
	FaultResetAfter  FaultKind = "reset_after"  // acts, then resets the connection
	Fault500         FaultKind = "500"          // an HTML error page, without acting
	Fault502         FaultKind = "502"          // acts, then an HTML error page (a proxy lost the answer)
	Fault503         FaultKind = "503"          // Retry-After and an error page, without acting
	Fault504         FaultKind = "504"          // acts, then an HTML error page (a gateway gave up waiting)
	Fault429         FaultKind = "429"          // Retry-After and an error body, without acting
	Fault404         FaultKind = "404"          // an error body, without acting
	FaultNonJSON     FaultKind = "non_json"     // acts, then 200 with an HTML body that says it is JSON
	FaultTruncated   FaultKind = "truncated"    // acts, then 200 with half the body Content-Length promises, then closes
	FaultOversized   FaultKind = "oversized"    // acts, then 200 with a JSON body of FaultOptions.OversizedBytes
	FaultDrip        FaultKind = "drip"         // acts, then sends the body one byte per FaultOptions.DripInterval
	FaultRefuse      FaultKind = "refuse"       // resets the connection and refuses connections for FaultOptions.RefuseFor
	FaultStray       FaultKind = "stray"        // acts, answers as none, then bytes past the answer on a connection it keeps serving (Start only; elsewhere as none)
	FaultCloseEarly  FaultKind = "close_early"  // acts, answers as none without Connection: close, and closes the connection at once
)

// FaultKinds returns every fault kind, in a stable order.
func FaultKinds() []FaultKind {
	return []FaultKind{FaultNone, FaultEmpty, FaultDelay, FaultHang, FaultResetBefore, FaultResetAfter,
		Fault500, Fault502, Fault503, Fault504, Fault429, Fault404,
		FaultNonJSON, FaultTruncated, FaultOversized, FaultDrip, FaultRefuse, FaultStray, FaultCloseEarly}
}

// PerformsEffect reports whether a write that meets the fault performs its
// side effect.
func (k FaultKind) PerformsEffect() bool {
	switch k {
	case FaultNone, FaultEmpty, FaultDelay, FaultHang, FaultResetAfter, Fault502, Fault504,
		FaultNonJSON, FaultTruncated, FaultOversized, FaultDrip, FaultStray, FaultCloseEarly:
		return true
	}
	return false
}

// burst reports whether the kind comes in bursts: a failing backend answers
// 5xx to many requests in a row.
func (k FaultKind) burst() bool {
	return k == Fault500 || k == Fault502 || k == Fault503 || k == Fault504
}

// DefaultFaultWeights is a schedule in which most requests succeed and every
// fault shows up: about one request in four misbehaves, and one in ten
// thousand makes the backend refuse connections for a while.
func DefaultFaultWeights() map[FaultKind]int {
	return map[FaultKind]int{
		FaultNone: 5700, FaultEmpty: 400, FaultDelay: 600, FaultHang: 150,
		FaultResetBefore: 300, FaultResetAfter: 300,
		Fault500: 250, Fault502: 250, Fault503: 300, Fault504: 150, Fault429: 300, Fault404: 100,
		FaultNonJSON: 200, FaultTruncated: 200, FaultOversized: 200, FaultDrip: 500, FaultRefuse: 1,
		FaultStray: 300, FaultCloseEarly: 300,
	}
}

// FaultInternalHost appears in every error page of the fault backend. A proxy
// must never pass it on to an agent.
const FaultInternalHost = "faults-db-01.internal:5432"

// FaultOptions configures NewFaultBackend. The zero value answers every
// request normally unless the request names a fault.
type FaultOptions struct {
	// Seed seeds the schedule: with one seed, the n-th request that draws
	// from the schedule meets the same fault in every run.
	Seed uint64
	// Weights are the relative weights of the kinds the schedule draws for
	// a request that names no fault (or names "random"). Nil or all zero
	// means FaultNone for such requests.
	Weights map[FaultKind]int
	// BurstMax: a drawn 500, 502, 503 or 504 also answers the next 0 to
	// BurstMax-1 requests that draw from the schedule. Zero or one means
	// no bursts.
	BurstMax int
	// Delay is how long FaultDelay waits. Zero means 50ms.
	Delay time.Duration
	// DripInterval is the pause between the bytes of FaultDrip. Zero means
	// 2ms.
	DripInterval time.Duration
	// RetryAfter is the Retry-After of 429 and 503 answers, rounded up to
	// whole seconds. Zero means 1s.
	RetryAfter time.Duration
	// OversizedBytes is the size of the FaultOversized body. Zero means
	// 2 MiB, over toolgate's default max_response_bytes.
	OversizedBytes int
	// RefuseFor is how long FaultRefuse refuses connections. Zero means
	// 200ms. Only a backend serving its own listener (Start) can refuse;
	// behind another server FaultRefuse only resets.
	RefuseFor time.Duration
	// Logger receives a debug line per request. Nil discards.
	Logger *slog.Logger
}

// Arrival is one request the fault backend received and what it did.
type Arrival struct {
	Seq       uint64    // order of arrival, from 1
	At        time.Time // when the request arrived
	RequestID string    // the X-Request-Id header
	Method    string
	Nonce     string // the write's nonce (see NewFaultBackend); empty for reads
	Key       string // the Idempotency-Key header
	Fault     FaultKind
	Named     bool // the request named its fault; false when the schedule drew it
	Effect    bool // a side effect was performed for this request
	Deduped   bool // the write's key was seen before: answered from memory, nothing performed
}

// Outage is a span of time during which the backend refused connections.
// To is zero while the outage lasts.
type Outage struct {
	From, To time.Time
}

// FaultStats counts what the fault backend did.
type FaultStats struct {
	Requests int64               // requests to /search and /send
	Effects  int64               // side effects performed
	Deduped  int64               // writes answered from the dedupe memory
	Faults   map[FaultKind]int64 // requests by the fault they met
	Outages  int                 // times the backend refused connections
}

// FaultBackend is a legacy service that misbehaves on purpose, per request,
// for soak tests and `toolgate demo -faults`. It records every request and
// every side effect it performs, and is safe for concurrent use.
type FaultBackend struct {
	opts FaultOptions
	log  *slog.Logger

	mu        sync.Mutex
	rng       *rand.Rand
	cumWeight []int // cumulative weights, in FaultKinds order
	burstKind FaultKind
	burstLeft int
	seq       uint64
	arrivals  map[string][]Arrival // by request id
	effects   map[string]int       // by nonce
	answers   map[string][]byte    // dedupe memory, by Idempotency-Key
	stats     FaultStats
	outages   []Outage

	// The listener, when the backend serves its own (Start).
	addr     string
	srv      *http.Server
	ln       net.Listener
	refuseAt *time.Timer
	closed   bool
	// closing is done once Close begins: hanging requests return and
	// shutdowns stop waiting.
	closing  context.Context
	closeNow context.CancelFunc
	wg       sync.WaitGroup
}

// NewFaultBackend returns a fault-injecting backend.
//
// Routes:
//
//	GET  /search?q=&fault=                    200 {"results":[{"id","title"}],"total":N}
//	POST /send  {"nonce","text","fault"}      201 {"id":"eff_000001","nonce":…}: one side effect
//	GET  /health                              200 "ok"
//	anything else                             404 {"error":"not found"}
//
// A request names its fault with the query parameter fault (any method) or,
// for a write, the body field fault; an unknown name is 400. A request that
// names none, or names "random", meets the next fault of the seeded schedule
// (FaultOptions.Weights). A write's nonce names its side effect; without
// one, the Idempotency-Key header and then X-Request-Id stand in. A write
// carrying Idempotency-Key is deduplicated like a backend that is told
// about keys: a key already acted on performs nothing and answers the first
// answer again, after its fault.
func NewFaultBackend(opts FaultOptions) *FaultBackend {
	if opts.Delay == 0 {
		opts.Delay = 50 * time.Millisecond
	}
	if opts.DripInterval == 0 {
		opts.DripInterval = 2 * time.Millisecond
	}
	if opts.RetryAfter == 0 {
		opts.RetryAfter = time.Second
	}
	if opts.OversizedBytes == 0 {
		opts.OversizedBytes = 2 << 20
	}
	if opts.RefuseFor == 0 {
		opts.RefuseFor = 200 * time.Millisecond
	}
	b := &FaultBackend{
		opts:     opts,
		log:      loggerOrDiscard(opts.Logger),
		rng:      rand.New(rand.NewPCG(opts.Seed, opts.Seed^0x9e3779b97f4a7c15)),
		arrivals: map[string][]Arrival{},
		effects:  map[string]int{},
		answers:  map[string][]byte{},
	}
	b.closing, b.closeNow = context.WithCancel(context.Background())
	b.stats.Faults = map[FaultKind]int64{}
	total := 0
	for _, k := range FaultKinds() {
		total += max(opts.Weights[k], 0)
		b.cumWeight = append(b.cumWeight, total)
	}
	if total == 0 {
		b.cumWeight = nil
	}
	return b
}

// ServeHTTP implements http.Handler.
func (b *FaultBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == "/search" && r.Method == http.MethodGet:
		b.serve(w, r, false)
	case r.URL.Path == "/send" && r.Method == http.MethodPost:
		b.serve(w, r, true)
	case r.URL.Path == "/health" && r.Method == http.MethodGet:
		handleHealth(w, r)
	default:
		handleNotFound(w, r)
	}
}

// faultRequest is the body of a write.
type faultRequest struct {
	Nonce string `json:"nonce"`
	Text  string `json:"text"`
	Fault string `json:"fault"`
}

func (b *FaultBackend) serve(w http.ResponseWriter, r *http.Request, write bool) {
	name := r.URL.Query().Get("fault")
	var body faultRequest
	if write {
		raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxNotifyBody))
		if err != nil || (len(raw) > 0 && json.Unmarshal(raw, &body) != nil) {
			writeError(w, http.StatusBadRequest, "body must be a JSON object")
			return
		}
		if body.Fault != "" {
			name = body.Fault
		}
		if body.Nonce == "" {
			body.Nonce = r.Header.Get("Idempotency-Key")
		}
		if body.Nonce == "" {
			body.Nonce = r.Header.Get("X-Request-Id")
		}
	}
	named := name != "" && name != "random"
	kind := FaultKind(name)
	if named && !slices.Contains(FaultKinds(), kind) {
		writeError(w, http.StatusBadRequest, "unknown fault "+strconv.Quote(name))
		return
	}
	key := r.Header.Get("Idempotency-Key")
	b.mu.Lock()
	if !named {
		kind = b.drawLocked()
	}
	b.seq++
	a := Arrival{Seq: b.seq, At: time.Now(), RequestID: r.Header.Get("X-Request-Id"), Method: r.Method,
		Key: key, Fault: kind, Named: named}
	var answer []byte
	if write {
		a.Nonce = body.Nonce
		if kind.PerformsEffect() {
			answer, a.Effect, a.Deduped = b.actLocked(body.Nonce, key)
		}
	}
	b.arrivals[a.RequestID] = append(b.arrivals[a.RequestID], a)
	b.stats.Requests++
	b.stats.Faults[kind]++
	b.mu.Unlock()
	b.log.LogAttrs(r.Context(), slog.LevelDebug, "fault", slog.String("fault", string(kind)),
		slog.Bool("named", named), slog.Bool("effect", a.Effect), slog.String("request_id", a.RequestID))
	b.answer(w, r, kind, write, answer, a.Seq)
}

// drawLocked draws the next fault of the schedule.
func (b *FaultBackend) drawLocked() FaultKind {
	if b.burstLeft > 0 {
		b.burstLeft--
		return b.burstKind
	}
	if b.cumWeight == nil {
		return FaultNone
	}
	n := b.rng.IntN(b.cumWeight[len(b.cumWeight)-1])
	i, _ := slices.BinarySearch(b.cumWeight, n+1)
	kind := FaultKinds()[i]
	if kind.burst() && b.opts.BurstMax > 1 {
		b.burstKind, b.burstLeft = kind, b.rng.IntN(b.opts.BurstMax)
	}
	return kind
}

// actLocked performs a write's side effect, or finds the one its key
// already performed.
func (b *FaultBackend) actLocked(nonce, key string) (answer []byte, effect, deduped bool) {
	if key != "" {
		if prev, ok := b.answers[key]; ok {
			b.stats.Deduped++
			return prev, false, true
		}
	}
	b.effects[nonce]++
	b.stats.Effects++
	answer, _ = json.Marshal(map[string]string{"id": fmt.Sprintf("eff_%06d", b.stats.Effects), "nonce": nonce})
	if key != "" {
		b.answers[key] = answer
	}
	return answer, true, false
}

// answer shows the fault to the caller; seq is the request's order of
// arrival.
func (b *FaultBackend) answer(w http.ResponseWriter, r *http.Request, kind FaultKind, write bool, answer []byte, seq uint64) {
	ok := func() {
		switch {
		case write:
			writeBody(w, http.StatusCreated, "application/json", answer)
		default:
			writeBody(w, http.StatusOK, "application/json", []byte(lookupAnswer))
		}
	}
	switch kind {
	case FaultNone:
		ok()
	case FaultEmpty:
		if write {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		writeBody(w, http.StatusOK, "application/json", []byte(`{"results":[],"total":0}`))
	case FaultDelay:
		if b.sleep(r, b.opts.Delay) {
			ok()
		}
	case FaultHang:
		select {
		case <-r.Context().Done():
		case <-b.closing.Done():
		}
	case FaultResetBefore, FaultResetAfter:
		reset(w)
	case FaultRefuse:
		b.refuse() // first, so that whoever sees the reset finds the door shut
		reset(w)
	case Fault500, Fault502, Fault504, Fault404:
		code, _ := strconv.Atoi(string(kind))
		writeBody(w, code, "text/html", []byte(errorPage(code)))
	case Fault503, Fault429:
		code, _ := strconv.Atoi(string(kind))
		secs := int((b.opts.RetryAfter + time.Second - 1) / time.Second)
		w.Header().Set("Retry-After", strconv.Itoa(secs))
		writeBody(w, code, "text/html", []byte(errorPage(code)))
	case FaultNonJSON:
		// Declared JSON, so unreadable: a text answer would be data.
		writeBody(w, http.StatusOK, "application/json", []byte("<html><body>OK, stored on "+FaultInternalHost+"</body></html>"))
	case FaultTruncated:
		truncate(w, answerOr(answer, `{"results":[{"id":"f-1","title":"A result that never arrives whole"}],"total":1}`))
	case FaultOversized:
		pad := strings.Repeat("x", max(b.opts.OversizedBytes-40, 0))
		writeBody(w, http.StatusOK, "application/json", []byte(`{"results":[{"id":"f-1","title":"`+pad+`"}],"total":1}`))
	case FaultDrip:
		b.drip(w, r, answerOr(answer, `{"results":[{"id":"f-1","title":"dripped"}],"total":1}`), write)
	case FaultStray:
		// The stray bytes go out in the write that ends the answer: a
		// client sees them with it or right after, before it can reuse the
		// connection, and must not read them as the next call's answer.
		if fc, found := r.Context().Value(faultConnKey{}).(*faultConn); found {
			fc.writeAfter(strayBytes(seq))
		}
		ok()
		_ = http.NewResponseController(w).Flush()
	case FaultCloseEarly:
		code, body := http.StatusOK, []byte(lookupAnswer)
		if write {
			code, body = http.StatusCreated, answer
		}
		closeEarly(w, code, body)
	}
}

// lookupAnswer is a read's answer.
const lookupAnswer = `{"results":[{"id":"f-1","title":"A result"}],"total":1}`

// strayBytes is what FaultStray writes past an answer: by turns a second
// answer nobody asked for (a 503 that would make a write look undone) and
// the rest of a body longer than its Content-Length.
func strayBytes(seq uint64) []byte {
	if seq%2 == 0 {
		return []byte("HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Length: 0\r\n\r\n")
	}
	return []byte(`,"more":"than Content-Length promised"}`)
}

// closeEarly answers body with code and a Content-Length, without
// Connection: close, and closes the connection: a keep-alive timeout of
// zero. Where the system allows (Linux), the close (FIN) travels in the
// segment that ends the answer, so a client that checks a pooled
// connection before reusing it always finds it closed; elsewhere the close
// follows the answer at once.
func closeEarly(w http.ResponseWriter, code int, body []byte) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	defer conn.Close()
	if tc := tcpConn(conn); tc != nil {
		corkTCP(tc)
	}
	fmt.Fprintf(conn, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		code, http.StatusText(code), len(body), body)
}

// faultConnKey finds a request's connection in its context, on a server
// the backend runs itself (Start).
type faultConnKey struct{}

// faultConn is a connection the backend's own server accepted. A handler
// reaches it through the request's context to write bytes past its answer,
// while the server goes on serving the connection.
type faultConn struct {
	net.Conn
	mu   sync.Mutex
	tail []byte // written with the next write
}

// writeAfter makes the next write carry tail after its own bytes.
func (c *faultConn) writeAfter(tail []byte) {
	c.mu.Lock()
	c.tail = tail
	c.mu.Unlock()
}

func (c *faultConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	tail := c.tail
	c.tail = nil
	c.mu.Unlock()
	if tail == nil {
		return c.Conn.Write(p)
	}
	n, err := c.Conn.Write(append(p[:len(p):len(p)], tail...))
	return min(n, len(p)), err
}

// faultListener hands out faultConns.
type faultListener struct{ net.Listener }

func (l faultListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &faultConn{Conn: c}, nil
}

// tcpConn is the TCP connection under conn, or nil.
func tcpConn(conn net.Conn) *net.TCPConn {
	if fc, ok := conn.(*faultConn); ok {
		conn = fc.Conn
	}
	tc, _ := conn.(*net.TCPConn)
	return tc
}

func answerOr(answer []byte, otherwise string) []byte {
	if answer != nil {
		return answer
	}
	return []byte(otherwise)
}

// sleep waits d; false when the caller went away or the backend closed.
func (b *FaultBackend) sleep(r *http.Request, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.Context().Done():
	case <-b.closing.Done():
	}
	return false
}

func (b *FaultBackend) drip(w http.ResponseWriter, r *http.Request, body []byte, write bool) {
	code := http.StatusOK
	if write {
		code = http.StatusCreated
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(code)
	rc := http.NewResponseController(w)
	for i := range body {
		if _, err := w.Write(body[i : i+1]); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
		if i < len(body)-1 && !b.sleep(r, b.opts.DripInterval) {
			return
		}
	}
}

// reset drops the connection with a TCP RST, as a crashing process or a
// stateful firewall would.
func reset(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler) // no connection to reset (HTTP/2): abort the stream
	}
	if tc := tcpConn(conn); tc != nil {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}

// truncate promises body in Content-Length, sends half of it and closes.
func truncate(w http.ResponseWriter, body []byte) {
	conn, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	defer conn.Close()
	fmt.Fprintf(buf, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(body))
	_, _ = buf.Write(body[:len(body)/2])
	_ = buf.Flush()
}

func errorPage(code int) string {
	return fmt.Sprintf("<html><head><title>%d %s</title></head><body><h1>%s</h1><pre>java.io.IOException: upstream %s refused\n\tat com.example.legacy.Handler.run(Handler.java:42)</pre></body></html>",
		code, http.StatusText(code), http.StatusText(code), FaultInternalHost)
}

// Arrivals returns the requests that carried X-Request-Id id, in arrival
// order. toolgate sends its call_id there, so these are a call's attempts.
func (b *FaultBackend) Arrivals(id string) []Arrival {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.arrivals[id])
}

// Effects returns how many side effects were performed for nonce.
func (b *FaultBackend) Effects(nonce string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.effects[nonce]
}

// Forget drops what the backend remembers under each name: the arrivals of
// that request id, the effects of that nonce, the dedupe answer of that
// Idempotency-Key. Long runs call it once they have checked a call, so
// memory stays bounded.
func (b *FaultBackend) Forget(names ...string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, n := range names {
		delete(b.arrivals, n)
		delete(b.effects, n)
		delete(b.answers, n)
	}
}

// Stats returns what the backend did so far.
func (b *FaultBackend) Stats() FaultStats {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.stats
	s.Faults = make(map[FaultKind]int64, len(b.stats.Faults))
	for k, v := range b.stats.Faults {
		s.Faults[k] = v
	}
	s.Outages = len(b.outages)
	return s
}

// Outages returns the spans during which the backend refused connections.
func (b *FaultBackend) Outages() []Outage {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.outages)
}

// ErrFaultBackendClosed is returned by Start after Close.
var ErrFaultBackendClosed = errors.New("fault backend closed")

// Start serves the backend on addr (host:port; port 0 picks a free one).
// After Stop, Start("") serves again on the same address.
func (b *FaultBackend) Start(addr string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.startLocked(addr)
}

func (b *FaultBackend) startLocked(addr string) error {
	if b.closed {
		return ErrFaultBackendClosed
	}
	if b.srv != nil {
		return nil
	}
	if addr == "" {
		addr = b.addr
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("fault backend: %w", err)
	}
	b.addr = ln.Addr().String()
	ln = faultListener{ln}
	srv := &http.Server{
		Handler:           b,
		ReadHeaderTimeout: 5 * time.Second,
		// Resets and hijacks are the point; their log lines are noise.
		ErrorLog: log.New(io.Discard, "", 0),
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, faultConnKey{}, c)
		},
	}
	b.srv, b.ln = srv, ln
	if n := len(b.outages); n > 0 && b.outages[n-1].To.IsZero() {
		b.outages[n-1].To = time.Now()
	}
	b.wg.Go(func() { _ = srv.Serve(ln) })
	return nil
}

// Addr is the address Start listens on.
func (b *FaultBackend) Addr() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.addr
}

// URL is the backend's base URL, once started.
func (b *FaultBackend) URL() string { return "http://" + b.Addr() }

// Stop refuses connections: the listener closes and so do idle
// connections, so a pooled client has to dial and is refused. Requests in
// progress finish. Start("") serves again.
func (b *FaultBackend) Stop() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.stopLocked()
}

func (b *FaultBackend) stopLocked() {
	srv := b.srv
	if srv == nil {
		return
	}
	b.srv = nil
	// Refuse at once; Shutdown would close the listener a moment later.
	_ = b.ln.Close()
	b.outages = append(b.outages, Outage{From: time.Now()})
	// Shutdown closes the listener at once and waits for requests in
	// progress; a hanging one ends when its caller gives up, or at Close.
	b.wg.Go(func() {
		_ = srv.Shutdown(b.closing)
		_ = srv.Close()
	})
}

// refuse stops serving for RefuseFor, then serves again.
func (b *FaultBackend) refuse() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.srv == nil || b.closed {
		return
	}
	b.stopLocked()
	b.refuseAt = time.AfterFunc(b.opts.RefuseFor, func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		if err := b.startLocked(""); err != nil && !errors.Is(err, ErrFaultBackendClosed) {
			b.log.Warn("fault backend could not serve again", "err", err.Error())
		}
	})
}

// Close stops serving for good, ends hanging requests and waits for every
// request the backend's own listener took.
func (b *FaultBackend) Close() {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return
	}
	b.closed = true
	b.closeNow()
	if b.refuseAt != nil {
		b.refuseAt.Stop()
	}
	srv := b.srv
	b.srv = nil
	b.mu.Unlock()
	if srv != nil {
		_ = srv.Close()
	}
	b.wg.Wait()
}

//go:embed faults.yaml
var faultsPolicyYAML []byte

// FaultsPolicy returns the policy of `toolgate demo -faults`
// (examples/faults.yaml): the fault backend behind three tools.
func FaultsPolicy() []byte {
	return append([]byte(nil), faultsPolicyYAML...)
}
