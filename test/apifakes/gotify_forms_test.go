package apifakes_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// fakeGotifyPush is Gotify's message API as its documentation describes
// it (gotify.net/docs/pushmsg, the createMessage and getMessages
// operations of its Swagger document): POST /message with an application
// token (X-Gotify-Key, ?token= or Authorization: Bearer) takes a title, a
// message (required) and a priority, from JSON, a form or a multipart
// body as Gotify's binding reads them; GET /message with a client token
// lists what was stored. Each stored message keeps the Content-Type it
// came with, so a test sees what toolgate sent.
type fakeGotifyPush struct {
	app, client string

	mu       sync.Mutex
	messages []gotifyMessage
}

type gotifyMessage struct {
	ID          int    `json:"id"`
	AppID       int    `json:"appid"`
	Title       string `json:"title"`
	Message     string `json:"message"`
	Priority    int    `json:"priority"`
	contentType string
}

func (f *fakeGotifyPush) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	token := r.Header.Get("X-Gotify-Key")
	if token == "" {
		token = r.URL.Query().Get("token")
	}
	if token == "" {
		token = strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	}
	unauthorized := func() {
		writeJSON(w, 401, map[string]any{"error": "Unauthorized", "errorCode": 401, "errorDescription": "you need to provide a valid access token or user credentials to access this api"})
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	switch r.Method + " " + r.URL.Path {
	case "POST /message":
		if token != f.app {
			unauthorized()
			return
		}
		m, err := readGotifyMessage(r)
		if err != nil {
			writeJSON(w, 400, map[string]any{"error": "Bad Request", "errorCode": 400, "errorDescription": err.Error()})
			return
		}
		m.ID, m.AppID = len(f.messages)+1, 1
		f.messages = append(f.messages, m)
		writeJSON(w, 200, m)
	case "GET /message":
		if token != f.client {
			unauthorized()
			return
		}
		writeJSON(w, 200, map[string]any{"messages": f.messages, "paging": map[string]any{"size": len(f.messages), "limit": 100}})
	default:
		writeJSON(w, 404, map[string]any{"error": "Not Found", "errorCode": 404, "errorDescription": "page not found"})
	}
}

// readGotifyMessage binds a message as Gotify's gin binding does: by
// Content-Type, JSON or form fields (url-encoded or multipart).
func readGotifyMessage(r *http.Request) (gotifyMessage, error) {
	m := gotifyMessage{contentType: r.Header.Get("Content-Type")}
	mt, _, _ := mime.ParseMediaType(m.contentType)
	switch mt {
	case "application/json":
		if err := json.NewDecoder(r.Body).Decode(&m); err != nil {
			return m, err
		}
	case "application/x-www-form-urlencoded", "multipart/form-data":
		if err := r.ParseMultipartForm(1 << 20); err != nil && err != http.ErrNotMultipart {
			return m, err
		}
		m.Title, m.Message = r.FormValue("title"), r.FormValue("message")
		if p := r.FormValue("priority"); p != "" {
			n, err := strconv.Atoi(p)
			if err != nil {
				return m, err
			}
			m.Priority = n
		}
	default:
		return m, fmt.Errorf("unsupported content type %q", mt)
	}
	if m.Message == "" {
		return m, errors.New("field 'message' is required")
	}
	return m, nil
}

// gotifyFormPolicy fronts Gotify's createMessage in transparent mode: a
// legacy client posts to /message as Gotify's docs show, and toolgate
// sends Gotify JSON with its own application token.
func gotifyFormPolicy(url string) string {
	return `version: 1
server:
  transparent: true
upstreams:
  gotify:
    url: ` + url + `
    auth:
      api_key: {header: X-Gotify-Key, value: "${GOTIFY_APP_TOKEN}"}
access:
  shared_credentials: [gotify]
tools:
  create_message:
    description: Push a message to Gotify.
    upstream: gotify
    side_effect: true
    args:
      type: object
      required: [message]
      additionalProperties: false
      properties:
        title: {type: string, maxLength: 200}
        message: {type: string, minLength: 1}
        priority: {type: integer, minimum: 0, maximum: 10}
    request: {method: POST, path: /message, body: {title: title, message: message, priority: priority}}
    response:
      data: '{"id": body.id, "title": body.title, "priority": body.priority}'
`
}

// legacyTry posts body with contentType to url as a legacy client does,
// with an idempotency key when key is set; legacyPost fails the test on
// an error.
func legacyTry(url, contentType string, body []byte, key string) (int, envelope, error) {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, envelope{}, err
	}
	req.Header.Set("Content-Type", contentType)
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, envelope{}, err
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	var e envelope
	if err := json.Unmarshal(out, &e); err != nil {
		return resp.StatusCode, e, fmt.Errorf("not an envelope: %w: %s", err, out)
	}
	e.raw = out
	return resp.StatusCode, e, nil
}

func legacyPost(t *testing.T, url, contentType string, body []byte, key string) (int, envelope) {
	t.Helper()
	code, e, err := legacyTry(url, contentType, body, key)
	if err != nil {
		t.Fatal(err)
	}
	return code, e
}

// curlF is the body curl -F sends for fields name=value (and a file part
// for a field given as @name).
func curlF(t *testing.T, fields ...string) ([]byte, string) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for _, f := range fields {
		name, value, _ := strings.Cut(f, "=")
		var w io.Writer
		var err error
		if file, ok := strings.CutPrefix(value, "@"); ok {
			w, err = mw.CreateFormFile(name, file)
		} else {
			w, err = mw.CreateFormField(name)
		}
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.WriteString(w, value)
	}
	_ = mw.Close()
	return buf.Bytes(), mw.FormDataContentType()
}

// TestGotifyLegacyFormAndMultipartClients is test/apis's case against the
// fake: a legacy client pushes to Gotify through toolgate in transparent
// mode the way Gotify's docs show, with curl -F (multipart) and curl
// --data (a form); Gotify gets JSON with toolgate's token, typed by the
// contract, and stores each message once per idempotency key.
func TestGotifyLegacyFormAndMultipartClients(t *testing.T) {
	fake := &fakeGotifyPush{app: "AappTok3n.xyz", client: "CclientTok3n"}
	g := httptest.NewServer(fake)
	t.Cleanup(g.Close)
	srv := serve(t, gotifyFormPolicy(g.URL), nil, "GOTIFY_APP_TOKEN="+fake.app)
	stored := func() []gotifyMessage {
		fake.mu.Lock()
		defer fake.mu.Unlock()
		return append([]gotifyMessage(nil), fake.messages...)
	}
	multi, multiType := curlF(t, "title=backup", "message=done at 03:00", "priority=5")
	withFile, withFileType := curlF(t, "message=see attached", "attachment=@report.pdf")
	cases := []struct {
		name, contentType string
		body              []byte
		key               string
		code              int
		status            string
		want              *gotifyMessage // the message stored, nil for none
	}{
		{"curl -F (multipart) stores the message, priority a number", multiType, multi, "k-multipart", 200, "ok",
			&gotifyMessage{Title: "backup", Message: "done at 03:00", Priority: 5}},
		{"curl --data (a form) stores the message", "application/x-www-form-urlencoded",
			[]byte("title=disk&message=95%25+full&priority=8"), "k-form", 200, "ok", &gotifyMessage{Title: "disk", Message: "95% full", Priority: 8}},
		{"the same form again under its key is replayed, not stored", "application/x-www-form-urlencoded",
			[]byte("title=disk&message=95%25+full&priority=8"), "k-form", 200, "ok", nil},
		{"a priority that is not a number is bad_args before Gotify", "application/x-www-form-urlencoded",
			[]byte("message=x&priority=high"), "k-bad", 400, "bad_args", nil},
		{"a file part is refused naming its field", withFileType, withFile, "k-file", 400, "bad_args", nil},
		{"text/plain is 415", "text/plain", []byte("message=x"), "k-plain", 415, "bad_args", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := len(stored())
			code, e := legacyPost(t, srv.URL+"/message?token=the-legacy-clients-own", c.contentType, c.body, c.key)
			if code != c.code || e.Status != c.status {
				t.Fatalf("HTTP %d %s, want %d %s: %s", code, e.Status, c.code, c.status, e.raw)
			}
			after := stored()
			if c.want == nil {
				if len(after) != before {
					t.Fatalf("Gotify stored %+v", after[before:])
				}
				return
			}
			if len(after) != before+1 {
				t.Fatalf("Gotify stored %d messages, want 1", len(after)-before)
			}
			got := after[before]
			if got.Title != c.want.Title || got.Message != c.want.Message || got.Priority != c.want.Priority || got.contentType != "application/json" {
				t.Errorf("Gotify stored %+v as %s, want %+v as JSON", got, got.contentType, *c.want)
			}
		})
	}
	t.Run("parallel form calls with one key push once", func(t *testing.T) {
		before := len(stored())
		var wg sync.WaitGroup
		for range 20 {
			wg.Go(func() {
				code, e, err := legacyTry(srv.URL+"/message", "application/x-www-form-urlencoded", []byte("message=once&priority=1"), "k-parallel")
				if err != nil || code != 200 || e.Status != "ok" {
					t.Errorf("HTTP %d %s %v", code, e.raw, err)
				}
			})
		}
		wg.Wait()
		if n := len(stored()) - before; n != 1 {
			t.Errorf("Gotify stored %d messages for one key, want 1", n)
		}
	})
}
