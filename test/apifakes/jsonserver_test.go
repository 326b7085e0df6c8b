package apifakes_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/toolgate/toolgate/learn"
	"github.com/toolgate/toolgate/learn/draft"
	"github.com/toolgate/toolgate/policy"
)

// fakeJSONServerAuth is json-server with json-server-auth's guarded route
// "/notes*": "/664/notes$1" (https://github.com/jeremyben/json-server-auth,
// README "Guarded routes"): anyone reads notes, a logged-in user writes
// them. POST /register answers 201 {accessToken, user}; a write without
// Authorization is 401 with the JSON string "Missing authorization
// header", with a token that is not one it issued 401 "jwt malformed"
// (json-server-auth answers its errors as JSON strings).
type fakeJSONServerAuth struct {
	mu    sync.Mutex
	notes []map[string]any
	token string
}

func (f *fakeJSONServerAuth) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case r.Method == "POST" && r.URL.Path == "/register":
		f.token = "eyJhbGciOiJIUzI1NiJ9.eyJlbWFpbCI6ImFkYUBleGFtcGxlLmNvbSJ9.c2lnbmF0dXJl"
		writeJSON(w, 201, map[string]any{"accessToken": f.token, "user": map[string]any{"email": "ada@example.com", "id": 1}})
	case r.Method == "GET" && r.URL.Path == "/notes":
		writeJSON(w, 200, f.notes)
	case r.Method == "POST" && r.URL.Path == "/notes":
		switch auth := r.Header.Get("Authorization"); {
		case auth == "":
			writeJSON(w, 401, "Missing authorization header")
			return
		case auth != "Bearer "+f.token:
			writeJSON(w, 401, "jwt malformed")
			return
		}
		var note map[string]any
		if err := json.NewDecoder(r.Body).Decode(&note); err != nil {
			writeJSON(w, 500, "SyntaxError")
			return
		}
		note["id"] = len(f.notes) + 1
		f.notes = append(f.notes, note)
		writeJSON(w, 201, note)
	default:
		writeJSON(w, 404, map[string]any{})
	}
}

// TestLearnedDraftInFrontOfJSONServerAuth is test/apis's case against the
// fake: a draft learned from a client's traffic (reads, writes with the
// user's token, writes refused without one) writes the upstream's bearer
// auth with access.shared_credentials and error_detail, passes toolgate
// check once its variable is set, and its POST /notes tool answers like
// the hand-written policy, with the user's token and with a wrong one.
func TestLearnedDraftInFrontOfJSONServerAuth(t *testing.T) {
	fake := &fakeJSONServerAuth{notes: []map[string]any{{"id": 1, "title": "first", "text": "hello", "userId": 1}}}
	js := httptest.NewServer(fake)
	t.Cleanup(js.Close)
	_, out := send(t, "POST", js.URL+"/register", map[string]string{"email": "ada@example.com", "password": "lovelace-1815"})
	var reg struct{ AccessToken string }
	if err := json.Unmarshal(out, &reg); err != nil || reg.AccessToken == "" {
		t.Fatal(err, string(out))
	}
	l := learn.New(policy.DefaultLearnSettings(), learn.Options{})
	learning := serve(t, "version: 1\nserver:\n  transparent: true\n  passthrough:\n    - {prefix: /notes, upstream: notes}\nupstreams:\n  notes: {url: \""+js.URL+"\"}\n", l)
	n := 0
	expect := func(want int, method string, body any, headers ...string) {
		t.Helper()
		if code, out := send(t, method, learning.URL+"/notes", body, headers...); code != want {
			t.Fatalf("%s /notes: %d, want %d: %s", method, code, want, out)
		}
		n++
	}
	for i := range 4 {
		expect(200, "GET", nil)
		expect(201, "POST", map[string]any{"title": fmt.Sprintf("note %d", i), "text": "learned", "userId": 1}, "Authorization", "Bearer "+reg.AccessToken)
	}
	expect(401, "POST", map[string]any{"title": "anonymous", "text": "x", "userId": 1})
	expect(401, "POST", map[string]any{"title": "forged", "text": "x", "userId": 1}, "Authorization", "Bearer not-a-jwt")
	waitUntil(t, func() bool { return l.Summary().Exchanges >= int64(n) })
	d, err := draft.Write(l.Summary(), draft.Options{})
	if err != nil {
		t.Fatal(err)
	}
	text := string(d.YAML)
	for _, want := range []string{"bearer: {token: '${NOTES_TOKEN}'}", "shared_credentials: [notes]", `error_detail: 'type(body) == string ? body : ""'`, "\n  post_notes:"} {
		if !strings.Contains(text, want) {
			t.Errorf("the draft lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, reg.AccessToken) || strings.Join(d.Env, ",") != "NOTES_TOKEN" {
		t.Fatalf("the draft holds the token, or its variables are %v:\n%s", d.Env, text)
	}
	check(t, d.YAML, d.Env)

	handWritten := `version: 1
upstreams:
  notes:
    url: "` + js.URL + `"
    auth: {bearer: {token: "${NOTES_TOKEN}"}}
tools:
  post_notes:
    description: Add a note.
    upstream: notes
    side_effect: true
    args:
      type: object
      required: [title, text, userId]
      additionalProperties: false
      properties:
        title: {type: string}
        text: {type: string}
        userId: {type: integer}
    request:
      method: POST
      path: /notes
      body: {title: title, text: text, userId: userId}
    response:
      error_detail: 'type(body) == string ? body : ""'
access: {shared_credentials: [notes]}
`
	args := map[string]any{"title": "from the agent", "text": "hi", "userId": 1}
	for _, c := range []struct {
		name, token, status, effect, said string
	}{
		{"with the user's token", reg.AccessToken, "ok", "done", ""},
		{"with a wrong token", "not-a-jwt", "forbidden", "none", `The backend said: "jwt malformed"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			for i, p := range []string{text, handWritten} {
				e := tool(t, serve(t, p, nil, "NOTES_TOKEN="+c.token), "post_notes", args, fmt.Sprintf("key-%d", i))
				if e.Status != c.status || e.SideEffect != c.effect || e.Retryable {
					t.Errorf("policy %d: %s/%s/retryable %v, want %s/%s: %s", i, e.Status, e.SideEffect, e.Retryable, c.status, c.effect, e.raw)
				}
				if !strings.Contains(e.Message, c.said) || strings.Contains(string(e.raw), reg.AccessToken) {
					t.Errorf("policy %d: the message does not quote %q, or the envelope holds the token: %s", i, c.said, e.raw)
				}
			}
		})
	}
}
