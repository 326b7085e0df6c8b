package apis_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// TestGotifyLegacyFormAndMultipartClients runs curl as Gotify's docs show
// it (gotify.net/docs/pushmsg: curl -F title=… -F message=… and
// curl --data), against toolgate in transparent mode in front of a real
// Gotify: toolgate reads the form and the multipart body onto the
// contract, sends Gotify JSON with its own application token, and Gotify's
// own store holds each message once, typed (priority a number), whatever
// the legacy client's token; a file part, a priority that is no number and
// a text/plain body never reach Gotify.
func TestGotifyLegacyFormAndMultipartClients(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Skip("curl is not installed")
	}
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
	var app struct{ Token string }
	if err := json.Unmarshal(mustCall(t, 200, "POST", base+"/application", map[string]string{"name": "backup"}, admin...), &app); err != nil || app.Token == "" {
		t.Fatal("no app token", err)
	}
	tg := serveToolgate(t, `version: 1
server:
  transparent: true
upstreams:
  gotify:
    url: `+base+`
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
`, "GOTIFY_APP_TOKEN="+app.Token)

	type message struct {
		Title, Message string
		Priority       int
	}
	stored := func() []message {
		var page struct{ Messages []message }
		if err := json.Unmarshal(mustCall(t, 200, "GET", base+"/message?limit=200", nil, admin...), &page); err != nil {
			t.Fatal(err)
		}
		return page.Messages // newest first
	}
	report := filepath.Join(dir, "report.pdf")
	if err := os.WriteFile(report, []byte("%PDF-1.7"), 0o600); err != nil {
		t.Fatal(err)
	}
	// curlTry runs curl with args against toolgate's /message, as the
	// legacy client, under the test's idempotency key, and returns the
	// HTTP status and the envelope; curlPost fails the test on an error.
	curlTry := func(key string, args ...string) (int, envelope, error) {
		args = append([]string{"-s", "-w", "\n%{http_code}", "-H", "Idempotency-Key: " + key}, args...)
		out, err := exec.Command(curl, append(args, tg.url+"/message?token=the-legacy-clients-own")...).Output()
		if err != nil {
			return 0, envelope{}, fmt.Errorf("curl %v: %w", args, err)
		}
		text := strings.TrimSpace(string(out))
		nl := strings.LastIndexByte(text, '\n')
		body, code := strings.TrimSpace(text[:nl+1]), text[nl+1:]
		var e envelope
		if err := json.Unmarshal([]byte(body), &e); err != nil {
			return 0, e, fmt.Errorf("not an envelope: %w: %s", err, out)
		}
		e.raw = []byte(body)
		status, err := strconv.Atoi(code)
		return status, e, err
	}
	curlPost := func(t *testing.T, args ...string) (int, envelope) {
		t.Helper()
		code, e, err := curlTry(t.Name(), args...)
		if err != nil {
			t.Fatal(err)
		}
		return code, e
	}
	for _, c := range []struct {
		name   string
		args   []string
		code   int
		status string
		want   *message
	}{
		{"curl -F (multipart), as Gotify's docs show", []string{"-F", "title=backup", "-F", "message=done at 03:00", "-F", "priority=5"},
			200, "ok", &message{"backup", "done at 03:00", 5}},
		{"curl --data (a form)", []string{"--data", "title=disk&message=95%25 full&priority=8"},
			200, "ok", &message{"disk", "95% full", 8}},
		{"curl --data-urlencode (a form, each field encoded)", []string{"--data-urlencode", "title=a & b", "--data-urlencode", "message=x=y; \"quoted\""},
			200, "ok", &message{"a & b", `x=y; "quoted"`, 0}},
		{"a priority that is no number is bad_args", []string{"-F", "message=x", "-F", "priority=high"}, 400, "bad_args", nil},
		{"a file part is bad_args naming its field", []string{"-F", "message=see attached", "-F", "attachment=@" + report}, 400, "bad_args", nil},
		{"text/plain is 415", []string{"-H", "Content-Type: text/plain", "--data", "message=x"}, 415, "bad_args", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := len(stored())
			code, e := curlPost(t, c.args...)
			if code != c.code || e.Status != c.status {
				t.Fatalf("HTTP %d %s, want %d %s: %s", code, e.Status, c.code, c.status, e.raw)
			}
			if strings.Contains(string(e.raw), app.Token) {
				t.Errorf("the envelope holds the app token: %s", e.raw)
			}
			after := stored()
			if c.want == nil {
				if len(after) != before {
					t.Fatalf("Gotify stored %+v", after[0])
				}
				return
			}
			if len(after) != before+1 || after[0] != *c.want {
				t.Fatalf("Gotify holds %d new messages, newest %+v; want %+v", len(after)-before, after[0], *c.want)
			}
			// The same call again, with its key, is the stored answer.
			if _, again := curlPost(t, c.args...); again.Status != "ok" || len(stored()) != before+1 {
				t.Errorf("the same call again: %s, and Gotify holds %d new messages", again.raw, len(stored())-before)
			}
		})
	}
	t.Run("20 parallel multipart calls with one key push once", func(t *testing.T) {
		before := len(stored())
		var wg sync.WaitGroup
		for range 20 {
			wg.Go(func() {
				code, e, err := curlTry(t.Name(), "-F", "message=once", "-F", "priority=1")
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
