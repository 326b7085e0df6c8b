package apis_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestTwoCredentialsOnOneUpstream: one upstream, two credentials, each
// tool sending its own, in front of the two real servers that need it.
//
// Gotify: its own document, imported and served as generated, names the
// application token for createMessage and the client token for the rest;
// every tool called is ok, the message is the application's, and no token
// reaches an envelope.
//
// Mailpit: its own document declares no security, while Mailpit takes one
// basic credential for its web UI and API (MP_UI_AUTH) and another for its
// send API (MP_SEND_API_AUTH), each refusing the other. The imported draft,
// given the two as named credentials (what its operator writes, since the
// document cannot say), sends and reads: every tool called is ok, and no
// password reaches an envelope.
func TestTwoCredentialsOnOneUpstream(t *testing.T) {
	t.Run("Gotify", func(t *testing.T) {
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
		admin := []string{"Authorization", "Basic " + base64.StdEncoding.EncodeToString([]byte("admin:admin-password"))}
		var client, app struct {
			ID    int
			Token string
		}
		if err := json.Unmarshal(mustCall(t, 200, "POST", base+"/client", map[string]string{"name": "toolgate"}, admin...), &client); err != nil || client.Token == "" {
			t.Fatal("no client token", err)
		}
		if err := json.Unmarshal(mustCall(t, 200, "POST", base+"/application", map[string]string{"name": "backup", "description": "nightly"}, admin...), &app); err != nil || app.Token == "" {
			t.Fatal("no app token", err)
		}
		// Gotify itself tells them apart: neither token serves the other's routes.
		if code, _ := call(t, "POST", base+"/message", map[string]any{"message": "x"}, "X-Gotify-Key", client.Token); code != http.StatusUnauthorized {
			t.Fatalf("Gotify took a client token to push: %d", code)
		}
		if code, _ := call(t, "GET", base+"/message", nil, "X-Gotify-Key", app.Token); code != http.StatusUnauthorized {
			t.Fatalf("Gotify took an application token to read: %d", code)
		}

		stdout, stderr := runToolgate(t, 0, nil, "import", "openapi", "-spec", "../../config/openapi/testdata/gotify-v2.9.1.json")
		if !strings.Contains(stderr, "GOTIFY_REST_CLIENT_TOKEN, GOTIFY_REST_APP_TOKEN") {
			t.Errorf("import does not print the variables it needs: %s", stderr)
		}
		draft := strings.Replace(stdout, "url: http://localhost ", "url: "+base+" ", 1)
		env := []string{"GOTIFY_REST_CLIENT_TOKEN=" + client.Token, "GOTIFY_REST_APP_TOKEN=" + app.Token}
		tg := serveToolgate(t, draft, env...)
		var envelopes [][]byte
		var messageID float64
		for _, c := range []struct {
			tool string
			args func() map[string]any
			key  string
		}{
			{"createMessage", func() map[string]any { return map[string]any{"title": "backup", "message": "done", "priority": 2} }, "k-push"},
			{"getMessages", func() map[string]any { return map[string]any{} }, ""},
			{"getApps", func() map[string]any { return map[string]any{} }, ""},
			{"getClients", func() map[string]any { return map[string]any{} }, ""},
			{"createClient", func() map[string]any { return map[string]any{"name": "agent"} }, "k-client"},
			{"createApp", func() map[string]any { return map[string]any{"name": "agent-app", "description": "made by the agent"} }, "k-app"},
			{"currentUser", func() map[string]any { return map[string]any{} }, ""},
			{"getHealth", func() map[string]any { return map[string]any{} }, ""},
			{"getVersion", func() map[string]any { return map[string]any{} }, ""},
			{"deleteMessage", func() map[string]any { return map[string]any{"id": messageID} }, "k-delete"},
		} {
			t.Run(c.tool, func(t *testing.T) {
				e := tg.tool(t, c.tool, c.args(), c.key)
				envelopes = append(envelopes, e.raw)
				if e.Status != "ok" {
					t.Fatalf("status %s: %s", e.Status, e.raw)
				}
				if c.tool == "createMessage" {
					var m struct {
						ID    float64
						AppID int
					}
					if err := json.Unmarshal(e.Data, &m); err != nil || m.AppID != app.ID {
						t.Errorf("the message is not the application's (%d): %v %s", app.ID, err, e.Data)
					}
					messageID = m.ID
				}
			})
		}
		// Every token Gotify holds now, the agent's new ones included.
		tokens := []string{client.Token, app.Token}
		for _, path := range []string{"/client", "/application"} {
			var items []struct{ Token string }
			if err := json.Unmarshal(mustCall(t, 200, "GET", base+path, nil, admin...), &items); err != nil {
				t.Fatal(err)
			}
			for _, it := range items {
				tokens = append(tokens, it.Token)
			}
		}
		if len(tokens) < 6 {
			t.Errorf("only %d tokens in Gotify", len(tokens))
		}
		for _, raw := range envelopes {
			for _, tok := range tokens {
				if tok != "" && strings.Contains(string(raw), tok) {
					t.Errorf("an envelope holds a token: %s", raw)
				}
			}
		}
	})

	t.Run("Mailpit", func(t *testing.T) {
		web, smtpPort := freePort(t), freePort(t)
		dir := t.TempDir()
		base := fmt.Sprintf("http://127.0.0.1:%d", web)
		const readPass, sendPass = "read-pass-7Hq2", "send-pass-9Kd4"
		mp := start(t, "mailpit", dir, []string{"MP_UI_AUTH=reader:" + readPass, "MP_SEND_API_AUTH=sender:" + sendPass},
			binPath(t, "APIS_BIN", "mailpit"), "--listen", fmt.Sprintf("127.0.0.1:%d", web),
			"--smtp", fmt.Sprintf("127.0.0.1:%d", smtpPort), "--database", filepath.Join(dir, "mailpit.db"))
		mp.waitHTTP(t, base+"/readyz", 0)
		basic := func(user, pass string) []string {
			return []string{"Authorization", "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))}
		}
		// Mailpit itself tells them apart.
		if code, _ := call(t, "GET", base+"/api/v1/messages", nil, basic("sender", sendPass)...); code != http.StatusUnauthorized {
			t.Fatalf("Mailpit took the send credential to read: %d", code)
		}
		if code, _ := call(t, "POST", base+"/api/v1/send", map[string]any{"From": map[string]string{"Email": "a@example.com"}}, basic("reader", readPass)...); code != http.StatusUnauthorized {
			t.Fatalf("Mailpit took the read credential to send: %d", code)
		}

		stdout, _ := runToolgate(t, 0, nil, "import", "openapi", "-spec", "testdata/mailpit-v1.33.1.json")
		draft := finishMailpitDraft(t, stdout, base)
		tg := serveToolgate(t, draft, "MAILPIT_READ_PASSWORD="+readPass, "MAILPIT_SEND_PASSWORD="+sendPass)
		var envelopes [][]byte
		var id string
		for _, c := range []struct {
			tool string
			args func() map[string]any
			key  string
		}{
			{"SendMessageParams", func() map[string]any {
				return map[string]any{"From_Email": "toolgate@example.com", "To": []map[string]string{{"Email": "ada@example.com"}}, "Subject": "two credentials", "Text": "hello"}
			}, "k-send"},
			{"GetMessagesParams", func() map[string]any { return map[string]any{} }, ""},
			{"GetMessageParams", func() map[string]any { return map[string]any{"ID": id} }, ""},
			{"GetHeadersParams", func() map[string]any { return map[string]any{"ID": id} }, ""},
			{"AppInformation", func() map[string]any { return map[string]any{} }, ""},
			{"GetAllTags", func() map[string]any { return map[string]any{} }, ""},
			{"WebUIConfigurationResponse", func() map[string]any { return map[string]any{} }, ""},
		} {
			t.Run(c.tool, func(t *testing.T) {
				e := tg.tool(t, c.tool, c.args(), c.key)
				envelopes = append(envelopes, e.raw)
				// No tag yet: Mailpit's answer is an empty list.
				if e.Status != "ok" && !(c.tool == "GetAllTags" && e.Status == "empty") {
					t.Fatalf("status %s: %s", e.Status, e.raw)
				}
				if c.tool == "SendMessageParams" {
					var sent struct{ ID string }
					if err := json.Unmarshal(e.Data, &sent); err != nil || sent.ID == "" {
						t.Fatalf("no message id: %v %s", err, e.Data)
					}
					id = sent.ID
				}
				if c.tool == "GetMessagesParams" && !strings.Contains(string(e.Data), "two credentials") {
					t.Errorf("the message sent is not listed: %s", e.Data)
				}
			})
		}
		for _, raw := range envelopes {
			for _, secret := range []string{readPass, sendPass, base64.StdEncoding.EncodeToString([]byte("reader:" + readPass)), base64.StdEncoding.EncodeToString([]byte("sender:" + sendPass))} {
				if strings.Contains(string(raw), secret) {
					t.Errorf("an envelope holds a credential: %s", raw)
				}
			}
		}
	})
}

// finishMailpitDraft does to the draft of Mailpit's document what its
// operator does, since the document declares no security: the upstream's
// URL, two named credentials (read for the web UI's API, send for the
// send API), each tool's credential, and the shared_credentials opt-in.
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
