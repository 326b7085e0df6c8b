package apifakes_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/toolgate/toolgate/config/openapi"
)

// gotifyByToken is a fake Gotify that tells its two kinds of token apart,
// as Gotify's documentation (gotify.net/docs, and the document's notes on
// createMessage) and its auth middleware do: an application token may
// only push a message (POST /message); every other route but /health and
// /version wants a client token. A token is read from X-Gotify-Key, the
// token query parameter, or Authorization: Bearer; a missing or wrong one
// is Gotify's 401 error object. The messages it keeps remember the
// application that pushed them.
type gotifyByToken struct {
	mu       sync.Mutex
	apps     map[string]int // application token -> application id
	clients  map[string]bool
	messages []map[string]any
	// refused counts the requests it answered 401, by route.
	refused map[string]int
}

func newGotifyByToken(appToken, clientToken string) *gotifyByToken {
	return &gotifyByToken{apps: map[string]int{appToken: 1}, clients: map[string]bool{clientToken: true}, refused: map[string]int{}}
}

// token is the token of a request, wherever Gotify reads it from.
func gotifyToken(r *http.Request) string {
	if v := r.Header.Get("X-Gotify-Key"); v != "" {
		return v
	}
	if v := r.URL.Query().Get("token"); v != "" {
		return v
	}
	if v, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		return v
	}
	return ""
}

func (f *gotifyByToken) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	route := r.Method + " " + r.URL.Path
	if strings.HasPrefix(route, "DELETE /message/") {
		route = "DELETE /message/{id}"
	}
	tok := gotifyToken(r)
	app, isApp := f.apps[tok]
	switch {
	case route == "GET /health":
		writeJSON(w, 200, map[string]any{"health": "green", "database": "green"})
		return
	case route == "GET /version":
		writeJSON(w, 200, map[string]any{"version": "2.9.1", "commit": "4fa74ce", "buildDate": "2026-01-01T00:00:00Z"})
		return
	case route == "POST /message" && !isApp, route != "POST /message" && !f.clients[tok]:
		f.refused[route]++
		writeJSON(w, 401, map[string]any{"error": "Unauthorized", "errorCode": 401, "errorDescription": "you need to provide a valid access token or user credentials to access this api"})
		return
	}
	var in map[string]any
	if r.Method == "POST" {
		_ = json.NewDecoder(r.Body).Decode(&in)
	}
	switch route {
	case "POST /message":
		m := map[string]any{"id": len(f.messages) + 1, "appid": app, "message": in["message"], "title": in["title"], "priority": in["priority"], "extras": nil, "date": "2026-12-03T10:00:00Z"}
		f.messages = append(f.messages, m)
		writeJSON(w, 200, m)
	case "GET /message":
		writeJSON(w, 200, map[string]any{"paging": map[string]any{"size": len(f.messages), "since": 0, "limit": 100}, "messages": f.messages})
	case "DELETE /message/{id}":
		id, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/message/"))
		for i, m := range f.messages {
			if m["id"] == id {
				f.messages = append(f.messages[:i], f.messages[i+1:]...)
				w.WriteHeader(200)
				return
			}
		}
		writeJSON(w, 404, map[string]any{"error": "Not Found", "errorCode": 404, "errorDescription": "message does not exist"})
	case "GET /application":
		var apps []map[string]any
		for tok, id := range f.apps {
			apps = append(apps, map[string]any{"id": id, "name": "backup", "description": "", "internal": false, "image": "static/defaultapp.png", "token": tok, "defaultPriority": 0, "sortKey": "a0"})
		}
		writeJSON(w, 200, apps)
	case "GET /client":
		var clients []map[string]any
		for tok := range f.clients {
			clients = append(clients, map[string]any{"id": 1, "name": "toolgate", "token": tok, "lastUsed": nil})
		}
		writeJSON(w, 200, clients)
	case "GET /current/user":
		writeJSON(w, 200, map[string]any{"id": 1, "name": "admin", "admin": true})
	default:
		writeJSON(w, 404, map[string]any{"error": "Not Found", "errorCode": 404, "errorDescription": "page not found"})
	}
}

// TestTwoCredentialsOnOneUpstream is test/apis's case against the fake:
// Gotify's own document, imported and served as generated with its
// application token and its client token, pushes with the one and reads
// with the other; no tool is forbidden, and neither token reaches an
// envelope, though the backend lists both.
func TestTwoCredentialsOnOneUpstream(t *testing.T) {
	const appToken, clientToken = "AseedAppTok3n.x", "CseedClientTok3"
	fake := newGotifyByToken(appToken, clientToken)
	g := httptest.NewServer(fake)
	t.Cleanup(g.Close)
	doc, err := os.ReadFile("../../config/openapi/testdata/gotify-v2.9.1.json")
	if err != nil {
		t.Fatal(err)
	}
	d, err := openapi.Import(doc, openapi.Options{SpecName: "gotify-v2.9.1.json"})
	if err != nil {
		t.Fatal(err)
	}
	check(t, d.YAML, d.Env)
	policy := strings.Replace(string(d.YAML), "url: http://localhost ", "url: "+g.URL+" ", 1)
	srv := serve(t, policy, nil, "GOTIFY_REST_APP_TOKEN="+appToken, "GOTIFY_REST_CLIENT_TOKEN="+clientToken)
	for _, c := range []struct {
		tool string
		args map[string]any
		key  string
	}{
		{"createMessage", map[string]any{"title": "backup", "message": "done", "priority": 2}, "k-push"},
		{"getMessages", map[string]any{}, ""},
		{"getApps", map[string]any{}, ""},
		{"getClients", map[string]any{}, ""},
		{"currentUser", map[string]any{}, ""},
		{"getHealth", map[string]any{}, ""},
		{"getVersion", map[string]any{}, ""},
		{"deleteMessage", map[string]any{"id": 1}, "k-delete"},
	} {
		t.Run(c.tool, func(t *testing.T) {
			e := tool(t, srv, c.tool, c.args, c.key)
			if e.Status != "ok" {
				t.Fatalf("status %s: %s", e.Status, e.raw)
			}
			for _, tok := range []string{appToken, clientToken} {
				if strings.Contains(string(e.raw), tok) {
					t.Errorf("the envelope holds a token: %s", e.raw)
				}
			}
			if c.tool == "getMessages" && !strings.Contains(string(e.Data), `"appid":1`) {
				t.Errorf("the message was not pushed by the application: %s", e.Data)
			}
		})
	}
	if len(fake.refused) != 0 {
		t.Errorf("Gotify refused %v", fake.refused)
	}

	t.Run("the tokens swapped: each tool is forbidden", func(t *testing.T) {
		srv := serve(t, policy, nil, "GOTIFY_REST_APP_TOKEN="+clientToken, "GOTIFY_REST_CLIENT_TOKEN="+appToken)
		for _, c := range []struct {
			tool string
			args map[string]any
			key  string
		}{
			{"createMessage", map[string]any{"message": "x"}, "k-swapped"},
			{"getMessages", map[string]any{}, ""},
		} {
			if e := tool(t, srv, c.tool, c.args, c.key); e.Status != "forbidden" {
				t.Errorf("%s: status %s, want forbidden: %s", c.tool, e.Status, e.raw)
			}
		}
	})
}
