package examples

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// maxNotifyBody bounds a notification request body; larger bodies are 413.
const maxNotifyBody = 64 << 10

// maxIdempotencyKey is the longest Idempotency-Key the notify backend accepts.
const maxIdempotencyKey = 255

// NotifyOptions configures NewNotifyBackend. The zero value is ready to use.
type NotifyOptions struct {
	// Logger receives a debug line per performed or replayed send.
	// Nil discards.
	Logger *slog.Logger
	// Users are known in addition to DefaultUsers.
	Users []string
	// Now stamps created_at. Nil means time.Now.
	Now func() time.Time
}

// Notification is one performed send, and the body of a 201 answer.
type Notification struct {
	ID        string    `json:"id"`
	UserID    string    `json:"user_id"`
	Text      string    `json:"text"`
	CreatedAt time.Time `json:"created_at"`
	// IdempotencyKey is the key the send came with, empty if none. It is
	// recorded for tests and not part of the answer.
	IdempotencyKey string `json:"-"`
}

// DefaultUsers returns the users every notify backend knows.
func DefaultUsers() []string {
	return []string{"alice", "bob", "carol", "dave"}
}

// NotifyBackend is a legacy notification API. It records every side effect it
// performs, so tests can count what really happened behind a proxy. It is
// safe for concurrent use.
type NotifyBackend struct {
	log   *slog.Logger
	now   func() time.Time
	users map[string]bool // read-only after construction
	mux   *http.ServeMux

	mu    sync.Mutex
	sent  []Notification
	byKey map[keyScope]Notification
}

// keyScope scopes an idempotency key to one user, as the backend's old
// dedup table does.
type keyScope struct {
	user, key string
}

// NewNotifyBackend returns a legacy notification API.
//
// Routes:
//
//	POST /v1/users/{user_id}/notifications  body {"text":"..."}
//	     201 {"id":"ntf_000001","user_id":…,"text":…,"created_at":…}
//	GET  /health                            200 "ok" (text/plain)
//	anything else                           404 {"error":"not found"}; a known path with another method is 405
//
// A send is checked in this order, and the first failure answers:
//
//	Content-Type not JSON (application/json or */*+json)  415 {"error":"content type must be application/json"}
//	body over 64 KiB                                     413 {"error":"body too large"}
//	body not a JSON object with a string text            400 {"error":"body must be a JSON object with a string text"}
//	text missing or blank                                400 {"error":"missing text"}
//	user_id not in DefaultUsers or NotifyOptions.Users   404 {"error":"no such user"}
//	Idempotency-Key over 255 bytes                       400 {"error":"idempotency key too long"}
//
// Ids are sequential, ntf_%06d, one per performed send. With an
// Idempotency-Key header, a repeated key for the same user answers the first
// 201 again, byte for byte, with the header Idempotent-Replayed: true, and
// performs nothing. Like many old dedup tables it does not compare the
// repeated request's text. Only performed sends are remembered: a request that
// failed can be retried with its key. Without a key every request sends.
func NewNotifyBackend(opts NotifyOptions) *NotifyBackend {
	b := &NotifyBackend{
		log:   loggerOrDiscard(opts.Logger),
		now:   opts.Now,
		users: make(map[string]bool),
		byKey: make(map[keyScope]Notification),
	}
	if b.now == nil {
		b.now = time.Now
	}
	for _, u := range DefaultUsers() {
		b.users[u] = true
	}
	for _, u := range opts.Users {
		b.users[u] = true
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/users/{user_id}/notifications", b.handleSend)
	mux.Handle("/v1/users/{user_id}/notifications", methodNotAllowed(http.MethodPost))
	mux.HandleFunc("GET /health", handleHealth)
	mux.HandleFunc("/", handleNotFound)
	b.mux = mux
	return b
}

// ServeHTTP implements http.Handler.
func (b *NotifyBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b.mux.ServeHTTP(w, r)
}

// Sent returns a copy of every performed send, in order. Replays are not in it.
func (b *NotifyBackend) Sent() []Notification {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.sent)
}

// Count returns the number of performed sends.
func (b *NotifyBackend) Count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.sent)
}

func (b *NotifyBackend) handleSend(w http.ResponseWriter, r *http.Request) {
	if !isJSONContentType(r.Header.Get("Content-Type")) {
		writeError(w, http.StatusUnsupportedMediaType, "content type must be application/json")
		return
	}
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxNotifyBody))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			writeError(w, http.StatusRequestEntityTooLarge, "body too large")
			return
		}
		writeError(w, http.StatusBadRequest, "unreadable body")
		return
	}
	var req struct {
		Text string `json:"text"`
	}
	if err := unmarshalObject(raw, &req); err != nil {
		writeError(w, http.StatusBadRequest, "body must be a JSON object with a string text")
		return
	}
	if strings.TrimSpace(req.Text) == "" {
		writeError(w, http.StatusBadRequest, "missing text")
		return
	}
	user := r.PathValue("user_id")
	if !b.users[user] {
		writeError(w, http.StatusNotFound, "no such user")
		return
	}
	key := r.Header.Get("Idempotency-Key")
	if len(key) > maxIdempotencyKey {
		writeError(w, http.StatusBadRequest, "idempotency key too long")
		return
	}

	n, replayed := b.send(user, req.Text, key)
	b.log.LogAttrs(r.Context(), slog.LevelDebug, "notification",
		slog.String("id", n.ID), slog.String("user_id", user), slog.Bool("replayed", replayed))
	if replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	writeJSON(w, http.StatusCreated, n)
}

// send performs the side effect, or returns the one already performed for the
// same user and key. Check and effect happen under one lock, so concurrent
// requests with one key perform exactly one send.
func (b *NotifyBackend) send(user, text, key string) (n Notification, replayed bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	scope := keyScope{user: user, key: key}
	if key != "" {
		if n, ok := b.byKey[scope]; ok {
			return n, true
		}
	}
	n = Notification{
		ID:             fmt.Sprintf("ntf_%06d", len(b.sent)+1),
		UserID:         user,
		Text:           text,
		CreatedAt:      b.now().UTC(),
		IdempotencyKey: key,
	}
	b.sent = append(b.sent, n)
	if key != "" {
		b.byKey[scope] = n
	}
	return n, false
}

// unmarshalObject decodes raw into v and insists that raw is a JSON object:
// encoding/json alone would accept null.
func unmarshalObject(raw []byte, v any) error {
	if !bytes.HasPrefix(bytes.TrimLeft(raw, " \t\r\n"), []byte("{")) {
		return errors.New("not a JSON object")
	}
	return json.Unmarshal(raw, v)
}

func isJSONContentType(v string) bool {
	mt, _, err := mime.ParseMediaType(v)
	if err != nil {
		return false
	}
	return mt == "application/json" || strings.HasSuffix(mt, "+json")
}
