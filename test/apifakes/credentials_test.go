package apifakes_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
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

// fakeMailpit answers Mailpit's send and read APIs as its documentation
// (mailpit.axllent.org/docs/configuration/http-api-authentication, and
// server/server.go's sendAPIAuthMiddleware) describes them with both
// MP_UI_AUTH and MP_SEND_API_AUTH set: POST /api/v1/send takes only the
// send credential, every other route only the UI's; a wrong one is a 401
// with WWW-Authenticate.
type fakeMailpit struct {
	mu       sync.Mutex
	read     [2]string // user, password
	send     [2]string
	messages []map[string]any
}

func (f *fakeMailpit) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	want := f.read
	if r.URL.Path == "/api/v1/send" {
		want = f.send
	}
	if u, p, ok := r.BasicAuth(); !ok || u != want[0] || p != want[1] {
		w.Header().Set("WWW-Authenticate", `Basic realm="Login"`)
		http.Error(w, "Unauthorised.", http.StatusUnauthorized)
		return
	}
	switch r.Method + " " + r.URL.Path {
	case "POST /api/v1/send":
		var in struct {
			Subject string
			To      []struct{ Email string }
		}
		_ = json.NewDecoder(r.Body).Decode(&in)
		id := "msg" + strconv.Itoa(len(f.messages)+1)
		f.messages = append(f.messages, map[string]any{"ID": id, "Subject": in.Subject, "Read": false, "Tags": []string{}})
		writeJSON(w, 200, map[string]any{"ID": id})
	case "GET /api/v1/messages":
		writeJSON(w, 200, map[string]any{"total": len(f.messages), "unread": len(f.messages), "count": len(f.messages), "messages_count": len(f.messages), "start": 0, "tags": []string{}, "messages": f.messages})
	case "GET /api/v1/info":
		writeJSON(w, 200, map[string]any{"Version": "v1.33.1", "Database": "mailpit.db", "Messages": len(f.messages)})
	default:
		http.NotFound(w, r)
	}
}

// TestMailpitSendAndReadCredentials is test/apis's Mailpit case against
// the fake: Mailpit's own document (it declares no security), given the
// send and the read credential as named credentials, sends and reads; the
// credentials swapped, each call is forbidden.
func TestMailpitSendAndReadCredentials(t *testing.T) {
	fake := &fakeMailpit{read: [2]string{"reader", "read-pass-7Hq2"}, send: [2]string{"sender", "send-pass-9Kd4"}}
	mp := httptest.NewServer(fake)
	t.Cleanup(mp.Close)
	doc, err := os.ReadFile("../apis/testdata/mailpit-v1.33.1.json")
	if err != nil {
		t.Fatal(err)
	}
	d, err := openapi.Import(doc, openapi.Options{SpecName: "mailpit-v1.33.1.json"})
	if err != nil {
		t.Fatal(err)
	}
	check(t, d.YAML, d.Env)
	policy := finishMailpitDraft(t, string(d.YAML), mp.URL)
	check(t, []byte(policy), []string{"MAILPIT_READ_PASSWORD", "MAILPIT_SEND_PASSWORD"})
	srv := serve(t, policy, nil, "MAILPIT_READ_PASSWORD="+fake.read[1], "MAILPIT_SEND_PASSWORD="+fake.send[1])
	for _, c := range []struct {
		tool string
		args map[string]any
		key  string
	}{
		{"SendMessageParams", map[string]any{"From_Email": "toolgate@example.com", "To": []map[string]string{{"Email": "ada@example.com"}}, "Subject": "two credentials"}, "k-send"},
		{"GetMessagesParams", map[string]any{}, ""},
		{"AppInformation", map[string]any{}, ""},
	} {
		t.Run(c.tool, func(t *testing.T) {
			e := tool(t, srv, c.tool, c.args, c.key)
			if e.Status != "ok" {
				t.Fatalf("status %s: %s", e.Status, e.raw)
			}
			if strings.Contains(string(e.raw), "pass-") {
				t.Errorf("the envelope holds a password: %s", e.raw)
			}
		})
	}
	t.Run("the credentials swapped: each tool is forbidden", func(t *testing.T) {
		srv := serve(t, policy, nil, "MAILPIT_READ_PASSWORD="+fake.send[1], "MAILPIT_SEND_PASSWORD="+fake.read[1])
		if e := tool(t, srv, "SendMessageParams", map[string]any{"From_Email": "a@example.com"}, "k-swapped"); e.Status != "forbidden" {
			t.Errorf("SendMessageParams: status %s: %s", e.Status, e.raw)
		}
		if e := tool(t, srv, "GetMessagesParams", map[string]any{}, ""); e.Status != "forbidden" {
			t.Errorf("GetMessagesParams: status %s: %s", e.Status, e.raw)
		}
	})
}

// finishMailpitDraft is test/apis's: what Mailpit's operator adds to the
// draft of its document, which declares no security.
func finishMailpitDraft(t *testing.T, draft, base string) string {
	t.Helper()
	const up = "mailpit_api"
	out := strings.Replace(draft, "    url: http://127.0.0.1:8000 ", "    url: "+base+"\n    credentials:\n"+
		"      read: {basic: {username: reader, password: '${MAILPIT_READ_PASSWORD}'}}\n"+
		"      send: {basic: {username: sender, password: '${MAILPIT_SEND_PASSWORD}'}}\n    #", 1)
	if out == draft {
		t.Fatalf("the draft has no placeholder URL:\n%s", draft)
	}
	tools := regexp.MustCompile(`(?m)^  (\w+):\n    description: .*\n    upstream: ` + up + `\n`)
	n := 0
	out = tools.ReplaceAllStringFunc(out, func(m string) string {
		n++
		cred := "read"
		if strings.HasPrefix(m, "  SendMessageParams:") {
			cred = "send"
		}
		return m + "    credential: " + cred + "\n"
	})
	if all := strings.Count(draft, "\n    upstream: "+up+"\n"); n != all || n < 20 {
		t.Fatalf("%d of the draft's %d tools given a credential", n, all)
	}
	return out + "\naccess: {shared_credentials: [" + up + "]}\n"
}
