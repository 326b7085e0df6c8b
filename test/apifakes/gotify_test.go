package apifakes_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/toolgate/toolgate/config/openapi"
)

// fakeGotify answers the client-token routes of Gotify's REST API as its
// document (config/openapi/testdata/gotify-v2.9.1.json) describes them:
// clients and applications with their tokens, messages with paging, the
// current user. A request without the client token in Authorization:
// Bearer is Gotify's 401 error object.
type fakeGotify struct {
	mu      sync.Mutex
	client  string
	clients []map[string]any
	apps    []map[string]any
}

func (f *fakeGotify) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.Header.Get("Authorization") != "Bearer "+f.client {
		writeJSON(w, 401, map[string]any{"error": "Unauthorized", "errorCode": 401, "errorDescription": "you need to provide a valid access token or user credentials to access this api"})
		return
	}
	var in map[string]any
	if r.Method == "POST" {
		_ = json.NewDecoder(r.Body).Decode(&in)
	}
	switch r.Method + " " + r.URL.Path {
	case "GET /client":
		writeJSON(w, 200, f.clients)
	case "POST /client":
		c := map[string]any{"id": len(f.clients) + 1, "name": in["name"], "token": "CnewClientTok3n", "lastUsed": nil}
		f.clients = append(f.clients, c)
		writeJSON(w, 200, c)
	case "GET /application":
		writeJSON(w, 200, f.apps)
	case "POST /application":
		a := map[string]any{"id": len(f.apps) + 1, "name": in["name"], "description": in["description"], "internal": false,
			"image": "static/defaultapp.png", "token": "AnewAppTok3n.xy", "defaultPriority": 0, "lastUsed": nil, "sortKey": "a1"}
		f.apps = append(f.apps, a)
		writeJSON(w, 200, a)
	case "GET /message":
		writeJSON(w, 200, map[string]any{"paging": map[string]any{"size": 1, "since": 0, "limit": 100},
			"messages": []any{map[string]any{"id": 1, "appid": 1, "message": "done", "title": "backup", "priority": 2, "extras": nil, "date": "2026-12-03T10:00:00Z"}}})
	case "GET /current/user":
		writeJSON(w, 200, map[string]any{"id": 1, "name": "admin", "admin": true})
	default:
		writeJSON(w, 404, map[string]any{"error": "Not Found", "errorCode": 404, "errorDescription": "page not found"})
	}
}

// TestGotifySpecImportedKeepsTokensOut is test/apis's case against the
// fake: Gotify's own document, imported and served as generated with a
// client token, answers every call ok, and no token reaches an envelope.
func TestGotifySpecImportedKeepsTokensOut(t *testing.T) {
	fake := &fakeGotify{client: "CseedClientTok3",
		clients: []map[string]any{{"id": 1, "name": "toolgate", "token": "CseedClientTok3", "lastUsed": "2026-12-03T10:00:00Z"}},
		apps:    []map[string]any{{"id": 1, "name": "backup", "description": "nightly", "internal": false, "image": "static/defaultapp.png", "token": "AseedAppTok3n.x", "defaultPriority": 0, "sortKey": "a0"}},
	}
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
	srv := serve(t, policy, nil, "GOTIFY_REST_CLIENT_TOKEN="+fake.client, "GOTIFY_REST_APP_TOKEN=AseedAppTok3n.x")
	tokens := []string{"CseedClientTok3", "AseedAppTok3n.x", "CnewClientTok3n", "AnewAppTok3n.xy"}
	for _, c := range []struct {
		tool string
		args map[string]any
		key  string
	}{
		{"getClients", map[string]any{}, ""},
		{"getApps", map[string]any{}, ""},
		{"createClient", map[string]any{"name": "agent"}, "k-client"},
		{"createApp", map[string]any{"name": "agent-app", "description": "made by the agent"}, "k-app"},
		{"getMessages", map[string]any{}, ""},
		{"currentUser", map[string]any{}, ""},
	} {
		t.Run(c.tool, func(t *testing.T) {
			e := tool(t, srv, c.tool, c.args, c.key)
			if e.Status != "ok" {
				t.Fatalf("status %s: %s", e.Status, e.raw)
			}
			for _, tok := range tokens {
				if strings.Contains(string(e.raw), tok) {
					t.Errorf("the envelope holds a token: %s", e.raw)
				}
			}
		})
	}
}
