package apis_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/smtp"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPocketBaseFilterFromFreeText: docs/policy.md's search_notes tool
// builds PocketBase's filter from free text; a text with quotes and
// backslashes reaches PocketBase intact (the note of that title is found,
// and only it), and a text that tries to close the string and add a
// condition finds nothing.
func TestPocketBaseFilterFromFreeText(t *testing.T) {
	pb := binPath(t, "APIS_BIN", "pocketbase")
	dir := t.TempDir()
	runPB := func(args ...string) {
		t.Helper()
		srv := start(t, "pocketbase "+args[0], dir, nil, pb, append(args, "--dir", filepath.Join(dir, "pb_data"))...)
		if err := <-srv.done; err != nil {
			t.Fatalf("pocketbase %v: %v\n%s", args, err, srv.log)
		}
		srv.done <- nil
	}
	runPB("superuser", "upsert", "admin@example.com", "admin-password-123")
	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	srv := start(t, "pocketbase", dir, nil, pb, "serve", "--http", fmt.Sprintf("127.0.0.1:%d", port), "--dir", filepath.Join(dir, "pb_data"))
	srv.waitHTTP(t, base+"/api/health", http.StatusOK)

	var auth struct{ Token string }
	out := mustCall(t, 200, "POST", base+"/api/collections/_superusers/auth-with-password", map[string]string{"identity": "admin@example.com", "password": "admin-password-123"})
	if err := json.Unmarshal(out, &auth); err != nil || auth.Token == "" {
		t.Fatalf("superuser auth: %v: %s", err, out)
	}
	mustCall(t, 200, "POST", base+"/api/collections", map[string]any{
		"name": "notes", "type": "base", "listRule": "", "viewRule": "",
		"fields": []map[string]any{{"name": "title", "type": "text"}},
	}, "Authorization", auth.Token)
	titles := []string{`say "hi" \ o/`, `say hi o/`, `plain note`, `a \"quoted\" path C:\temp\`}
	for _, title := range titles {
		mustCall(t, 200, "POST", base+"/api/collections/notes/records", map[string]string{"title": title}, "Authorization", auth.Token)
	}

	tg := serveToolgate(t, `version: 1
upstreams:
  pocketbase: {url: "`+base+`"}
tools:
  search_notes:
    description: Find notes whose title contains the words given.
    upstream: pocketbase
    args:
      type: object
      required: [text]
      additionalProperties: false
      properties:
        text: {type: string, minLength: 1, maxLength: 200, pattern: '[^\\]$'}
    request:
      path: /api/collections/notes/records
      query:
        filter:
          expr: >-
            'title ~ "' + args.text.replace('"', '\\"') + '"'
        perPage: {const: 20}
    response:
      data: 'body.items.map(i, {"id": i.id, "title": i.title})'
      empty: size(body.items) == 0
      error_detail: 'has(body.message) ? body.message : ""'
  search_notes_naively:
    description: The same search with the text pasted between the quotes, to show what the escape prevents.
    upstream: pocketbase
    args:
      type: object
      required: [text]
      additionalProperties: false
      properties:
        text: {type: string}
    request:
      path: /api/collections/notes/records
      query:
        filter:
          expr: >-
            'title ~ "' + args.text + '"'
        perPage: {const: 20}
    response:
      data: 'body.items.map(i, {"id": i.id, "title": i.title})'
`)
	t.Run("pasted without the escape, the same text adds its condition", func(t *testing.T) {
		e := tg.tool(t, "search_notes_naively", map[string]string{"text": `x" || title != "`}, "")
		var notes []struct{ Title string }
		if err := json.Unmarshal(e.Data, &notes); e.Status != "ok" || err != nil || len(notes) != len(titles) {
			t.Fatalf("status %s, %d notes, want every one of %d: %s", e.Status, len(notes), len(titles), e.raw)
		}
	})
	for _, c := range []struct {
		name, text string
		status     string
		titles     []string
	}{
		{"quotes and a backslash", `say "hi" \ o/`, "ok", []string{`say "hi" \ o/`}},
		{"an escaped quote in the text", `\"quoted\"`, "ok", []string{`a \"quoted\" path C:\temp\`}},
		{"a backslash inside", `C:\temp`, "ok", []string{`a \"quoted\" path C:\temp\`}},
		{"a text that closes the string and adds a condition", `x" || title != "`, "empty", nil},
		{"a text that ends in a backslash is refused before PocketBase", `C:\temp\`, "bad_args", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := tg.tool(t, "search_notes", map[string]string{"text": c.text}, "")
			if e.Status != c.status {
				t.Fatalf("status %s, want %s: %s", e.Status, c.status, e.raw)
			}
			if c.status != "ok" {
				return
			}
			var notes []struct{ Title string }
			if err := json.Unmarshal(e.Data, &notes); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, n := range notes {
				got = append(got, n.Title)
			}
			if strings.Join(got, "\n") != strings.Join(c.titles, "\n") {
				t.Errorf("found %q, want %q", got, c.titles)
			}
		})
	}
}

// TestLearnedDraftInFrontOfJSONServerAuth: toolgate learns in front of
// json-server with json-server-auth (notes anyone reads and only a
// logged-in user writes), and the draft it writes passes toolgate check
// and, served with the user's token, answers like the hand-written
// policy: the write is ok and done; with a wrong token it is forbidden,
// quoting json-server-auth's words; the token is no argument.
func TestLearnedDraftInFrontOfJSONServerAuth(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("db.json", `{"users": [], "notes": [{"id": 1, "title": "first", "text": "hello", "userId": 1}]}`)
	write("routes.json", `{"/notes*": "/664/notes$1"}`)
	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	bin, err := filepath.Abs("node_modules/.bin/json-server-auth")
	if err != nil {
		t.Fatal(err)
	}
	js := start(t, "json-server-auth", dir, nil, bin, "db.json", "-r", "routes.json", "--port", fmt.Sprint(port), "--host", "127.0.0.1", "--quiet")
	js.waitHTTP(t, base+"/notes", http.StatusOK)
	var reg struct{ AccessToken string }
	out := mustCall(t, 201, "POST", base+"/register", map[string]string{"email": "ada@example.com", "password": "lovelace-1815"})
	if err := json.Unmarshal(out, &reg); err != nil || reg.AccessToken == "" {
		t.Fatalf("register: %v: %s", err, out)
	}

	learning := serveToolgate(t, `version: 1
server:
  transparent: true
  passthrough:
    - {prefix: /notes, upstream: notes}
  learn: {}
upstreams:
  notes: {url: "`+base+`"}
`)
	bearer := "Bearer " + reg.AccessToken
	for i := range 4 {
		mustCall(t, 200, "GET", learning.url+"/notes", nil)
		mustCall(t, 201, "POST", learning.url+"/notes", map[string]any{"title": fmt.Sprintf("note %d", i), "text": "learned", "userId": 1}, "Authorization", bearer)
	}
	for range 2 {
		mustCall(t, 401, "POST", learning.url+"/notes", map[string]any{"title": "anonymous", "text": "x", "userId": 1})
	}
	mustCall(t, 401, "POST", learning.url+"/notes", map[string]any{"title": "forged", "text": "x", "userId": 1}, "Authorization", "Bearer not-a-jwt")
	draft := mustCall(t, 200, "GET", learning.admin+"/v1/learn?format=yaml", nil)
	text := string(draft)
	for _, want := range []string{"bearer: {token: '${NOTES_TOKEN}'}", "shared_credentials: [notes]", `error_detail: 'type(body) == string ? body : ""'`} {
		if !strings.Contains(text, want) {
			t.Errorf("the draft lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, reg.AccessToken) {
		t.Fatal("the draft holds the token")
	}
	draftPath := filepath.Join(dir, "draft.yaml")
	write("draft.yaml", text)
	write("token.env", "NOTES_TOKEN="+reg.AccessToken+"\n")
	runToolgate(t, 0, nil, "check", "-env-file", filepath.Join(dir, "token.env"), draftPath)

	create := ""
	for _, name := range []string{"post_notes", "create_notes", "notes_post"} {
		if strings.Contains(text, "\n  "+name+":") {
			create = name
		}
	}
	if create == "" {
		t.Fatalf("no drafted tool for POST /notes:\n%s", text)
	}
	handWritten := `version: 1
upstreams:
  notes:
    url: "` + base + `"
    auth: {bearer: {token: "${NOTES_TOKEN}"}}
tools:
  ` + create + `:
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
		{"with a wrong token", "not-a-jwt", "forbidden", "none", "jwt malformed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var got [2]envelope
			for i, policy := range []string{text, handWritten} {
				tg := serveToolgate(t, policy, "NOTES_TOKEN="+c.token)
				got[i] = tg.tool(t, create, args, fmt.Sprintf("key-%s-%d", strings.ReplaceAll(c.name, " ", "-"), i))
				if strings.Contains(string(got[i].raw), reg.AccessToken) {
					t.Errorf("an envelope holds the token: %s", got[i].raw)
				}
			}
			for i, e := range got {
				if e.Status != c.status || e.SideEffect != c.effect || e.Retryable {
					t.Errorf("policy %d: %s/%s/retryable %v, want %s/%s: %s", i, e.Status, e.SideEffect, e.Retryable, c.status, c.effect, e.raw)
				}
				if c.said != "" && !strings.Contains(e.Message, c.said) {
					t.Errorf("policy %d: the message does not quote %q: %s", i, c.said, e.Message)
				}
			}
		})
	}
}

// TestGotifySpecImportedKeepsTokensOut imports the Gotify document
// committed under config/openapi/testdata (its version is the server
// build.sh builds), serves the draft as generated in front of Gotify with
// a client token, and calls the tools whose answers hold tokens: each is
// ok, and no token reaches any envelope.
func TestGotifySpecImportedKeepsTokensOut(t *testing.T) {
	dir := t.TempDir()
	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	g := start(t, "gotify", dir, []string{
		"GOTIFY_SERVER_PORT=" + fmt.Sprint(port), "GOTIFY_SERVER_LISTENADDR=127.0.0.1",
		"GOTIFY_DATABASE_DIALECT=sqlite3", "GOTIFY_DATABASE_CONNECTION=" + filepath.Join(dir, "gotify.db"),
		"GOTIFY_DEFAULTUSER_NAME=admin", "GOTIFY_DEFAULTUSER_PASS=admin-password",
		"GOTIFY_UPLOADEDIMAGESDIR=" + filepath.Join(dir, "images"), "GOTIFY_PLUGINSDIR=" + filepath.Join(dir, "plugins"),
	}, binPath(t, "APIS_BIN", "gotify"))
	g.waitHTTP(t, base+"/health", http.StatusOK)
	admin := []string{"Authorization", "Basic YWRtaW46YWRtaW4tcGFzc3dvcmQ="} // admin:admin-password
	var client, app struct{ Token string }
	if err := json.Unmarshal(mustCall(t, 200, "POST", base+"/client", map[string]string{"name": "toolgate"}, admin...), &client); err != nil || client.Token == "" {
		t.Fatal("no client token", err)
	}
	if err := json.Unmarshal(mustCall(t, 200, "POST", base+"/application", map[string]string{"name": "backup", "description": "nightly"}, admin...), &app); err != nil || app.Token == "" {
		t.Fatal("no app token", err)
	}
	mustCall(t, 200, "POST", base+"/message", map[string]any{"title": "backup", "message": "done", "priority": 2}, "X-Gotify-Key", app.Token)

	stdout, _ := runToolgate(t, 0, nil, "import", "openapi", "-spec", "../../config/openapi/testdata/gotify-v2.9.1.json")
	draft := strings.Replace(stdout, "url: http://localhost ", "url: "+base+" ", 1)
	if draft == stdout {
		t.Fatalf("the draft's upstream URL is not the document's servers[0]:\n%s", stdout)
	}
	tg := serveToolgate(t, draft, "GOTIFY_REST_CLIENT_TOKEN="+client.Token, "GOTIFY_REST_APP_TOKEN="+app.Token)
	tokens := []string{client.Token, app.Token}
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
		{"getClients", map[string]any{}, ""}, // now with the agent's client, never used
	} {
		t.Run(c.tool, func(t *testing.T) {
			e := tg.tool(t, c.tool, c.args, c.key)
			if e.Status != "ok" {
				t.Fatalf("status %s: %s", e.Status, e.raw)
			}
			for _, tok := range tokens {
				if strings.Contains(string(e.raw), tok) {
					t.Errorf("the envelope holds a token: %s", e.raw)
				}
			}
			if strings.Contains(string(e.Data), `"token"`) {
				t.Errorf("data has a token field: %s", e.Data)
			}
		})
	}
	// Gotify answers null where its Swagger 2.0 document has optional
	// fields (a client never used has "lastUsed": null): the imported
	// response schemas take it, so no answer counted as a violation.
	metrics := string(mustCall(t, 200, "GET", tg.admin+"/metrics", nil))
	for _, line := range strings.Split(metrics, "\n") {
		if strings.HasPrefix(line, "toolgate_contract_violations_total{") && strings.Contains(line, `kind="response"`) && !strings.HasSuffix(line, " 0") {
			t.Errorf("an answer broke its imported schema: %s", line)
		}
	}
	// What the agent created holds tokens too; none came back.
	var clients []struct{ Token string }
	if err := json.Unmarshal(mustCall(t, 200, "GET", base+"/client", nil, admin...), &clients); err != nil || len(clients) < 2 {
		t.Fatalf("clients: %v %d", err, len(clients))
	}
}

// TestMailServersStartSeedAndStop starts Mailpit and MailDev, seeds each
// with a message (Mailpit through its send API, MailDev over SMTP) and
// reads it back through its HTTP API: the servers the second half of
// issue 31 fronts (send and read credentials) are ready for its tests.
func TestMailServersStartSeedAndStop(t *testing.T) {
	t.Run("Mailpit", func(t *testing.T) {
		web, smtpPort := freePort(t), freePort(t)
		dir := t.TempDir()
		base := fmt.Sprintf("http://127.0.0.1:%d", web)
		mp := start(t, "mailpit", dir, nil, binPath(t, "APIS_BIN", "mailpit"), "--listen", fmt.Sprintf("127.0.0.1:%d", web),
			"--smtp", fmt.Sprintf("127.0.0.1:%d", smtpPort), "--database", filepath.Join(dir, "mailpit.db"))
		mp.waitHTTP(t, base+"/readyz", http.StatusOK)
		mustCall(t, 200, "POST", base+"/api/v1/send", map[string]any{
			"From": map[string]string{"Email": "toolgate@example.com"}, "To": []map[string]string{{"Email": "ada@example.com"}},
			"Subject": "seeded", "Text": "hello",
		})
		var list struct{ Total int }
		if err := json.Unmarshal(mustCall(t, 200, "GET", base+"/api/v1/messages", nil), &list); err != nil || list.Total != 1 {
			t.Fatalf("messages: %v, total %d", err, list.Total)
		}
	})
	t.Run("MailDev", func(t *testing.T) {
		web, smtpPort := freePort(t), freePort(t)
		base := fmt.Sprintf("http://127.0.0.1:%d", web)
		bin, err := filepath.Abs("node_modules/.bin/maildev")
		if err != nil {
			t.Fatal(err)
		}
		md := start(t, "maildev", "", nil, bin, "--ip", "127.0.0.1", "--web-ip", "127.0.0.1", "--web", fmt.Sprint(web), "--smtp", fmt.Sprint(smtpPort))
		md.waitHTTP(t, base+"/api/email", http.StatusOK)
		msg := "From: toolgate@example.com\r\nTo: ada@example.com\r\nSubject: seeded\r\n\r\nhello\r\n"
		if err := smtp.SendMail(fmt.Sprintf("127.0.0.1:%d", smtpPort), nil, "toolgate@example.com", []string{"ada@example.com"}, []byte(msg)); err != nil {
			t.Fatal(err)
		}
		var mails []struct{ Subject string }
		if err := json.Unmarshal(mustCall(t, 200, "GET", base+"/api/email", nil), &mails); err != nil || len(mails) != 1 || mails[0].Subject != "seeded" {
			t.Fatalf("emails: %v %+v", err, mails)
		}
	})
}
