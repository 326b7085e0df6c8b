package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/learn"
	"github.com/toolgate/toolgate/policy"
)

// learnedFile writes a summary of a few searches and notifications.
func learnedFile(t *testing.T) string {
	t.Helper()
	s := policy.DefaultLearnSettings()
	s.File = filepath.Join(t.TempDir(), "learned.json")
	l := learn.New(s, learn.Options{})
	for _, u := range []string{"alice", "bob", "carol"} {
		l.Observe(&learn.Exchange{Upstream: "notify", UpstreamURL: "http://127.0.0.1:7002", Method: http.MethodPost,
			EscapedPath: "/v1/users/" + u + "/notifications", RequestHeader: http.Header{"Content-Type": {"application/json"}},
			RequestBody: []byte(`{"text":"hi"}`), Status: 201, ResponseHeader: http.Header{"Content-Type": {"application/json"}},
			ResponseBody: []byte(`{"id":"ntf_000001"}`), Latency: time.Millisecond})
	}
	for _, body := range []string{`{"results":[],"total":0}`, `{"code":"E_NOPERM","msg":"no"}`} {
		l.Observe(&learn.Exchange{Upstream: "search", UpstreamURL: "http://127.0.0.1:7001", Method: http.MethodGet,
			EscapedPath: "/api/search", RawQuery: "q=go", RequestHeader: http.Header{}, Status: 200,
			ResponseHeader: http.Header{"Content-Type": {"application/json"}}, ResponseBody: []byte(body), Latency: time.Millisecond})
	}
	if err := l.Save(); err != nil {
		t.Fatal(err)
	}
	return s.File
}

func TestLearnReport(t *testing.T) {
	file := learnedFile(t)
	t.Run("the report is a draft that passes toolgate check", func(t *testing.T) {
		var stdout, stderr bytes.Buffer
		if code := run([]string{"learn", "report", "-file", file}, &stdout, &stderr); code != 0 {
			t.Fatalf("exit %d: %s", code, stderr.String())
		}
		if _, err := config.CompileSource("draft.yaml", stdout.Bytes(), config.Options{LookupEnv: noEnv}); err != nil {
			t.Fatalf("the draft does not compile: %v\n%s", err, stdout.String())
		}
		for _, want := range []string{"post_v1_users_by_user_id_notifications:", `body.code == "E_NOPERM"`, "5 exchanges on 2 routes"} {
			if !strings.Contains(stdout.String(), want) {
				t.Errorf("the draft lacks %s:\n%s", want, stdout.String())
			}
		}
	})
	t.Run("-json prints the summary", func(t *testing.T) {
		var stdout, stderr bytes.Buffer
		if code := run([]string{"learn", "report", "-file", file, "-json"}, &stdout, &stderr); code != 0 {
			t.Fatalf("exit %d: %s", code, stderr.String())
		}
		sum, err := learn.DecodeSummary(stdout.Bytes())
		if err != nil || sum.Exchanges != 5 {
			t.Errorf("summary %+v, %v", sum, err)
		}
	})
	t.Run("-o writes the draft and says what to do next", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "draft.yaml")
		var stdout, stderr bytes.Buffer
		if code := run([]string{"learn", "report", "-file", file, "-o", out}, &stdout, &stderr); code != 0 || stdout.Len() != 0 {
			t.Fatalf("exit %d, stdout %q: %s", code, stdout.String(), stderr.String())
		}
		if _, err := config.Load(out, config.Options{LookupEnv: noEnv}); err != nil {
			t.Error(err)
		}
		if !strings.Contains(stderr.String(), "toolgate check -config "+out) {
			t.Errorf("stderr %q", stderr.String())
		}
	})
	for _, c := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no subcommand is a usage error", []string{"learn"}, 2, "usage: toolgate learn report"},
		{"an unknown subcommand is a usage error", []string{"learn", "summary"}, 2, `unknown subcommand "summary"`},
		{"a missing -file is a usage error", []string{"learn", "report"}, 2, "-file is required"},
		{"a file that is not there fails, naming it", []string{"learn", "report", "-file", filepath.Join(t.TempDir(), "none.json")}, 1, "none.json"},
		{"a file that is not a summary fails, naming it", []string{"learn", "report", "-file", "learn_test.go"}, 1, "learn_test.go: not a learning summary"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(c.args, &stdout, &stderr); code != c.code || !strings.Contains(stderr.String(), c.want) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, stderr.String(), c.code, c.want)
			}
		})
	}
}

func noEnv(string) (string, bool) { return "", false }

// learningServePolicy runs the search backend on passthrough, learning.
func learningServePolicy(search, file, interval string) string {
	return fmt.Sprintf(`version: 1
server:
  listen: "127.0.0.1:0"
  admin_listen: "127.0.0.1:00"
  transparent: true
  passthrough:
    - {prefix: /api/, upstream: search}
  learn: {file: %q, save_interval: %s}
upstreams:
  search: {url: %s}
`, file, interval, search)
}

func TestServeLearnsAndKeepsItsSummary(t *testing.T) {
	b := startBackends(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "learned.json")
	path := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(path, []byte(learningServePolicy(b.search.URL, file, "1h")), 0o600); err != nil {
		t.Fatal(err)
	}
	search := func(ts *testServer, q string) {
		resp, err := ts.client.Get(ts.agentURL + "/api/search?q=" + q)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	learned := func(ts *testServer) (int64, string) {
		code, body := ts.get("/v1/learn")
		if code != http.StatusOK {
			t.Fatalf("GET /v1/learn: %d %s", code, body)
		}
		var view struct {
			Summary learn.Summary `json:"summary"`
			Draft   string        `json:"draft"`
		}
		if err := json.Unmarshal([]byte(body), &view); err != nil {
			t.Fatal(err)
		}
		return view.Summary.Exchanges, view.Draft
	}
	waitLearned := func(ts *testServer, n int64) string {
		deadline := time.Now().Add(10 * time.Second)
		for {
			got, d := learned(ts)
			if got >= n {
				return d
			}
			if time.Now().After(deadline) {
				t.Fatalf("learned %d exchanges, want %d", got, n)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	ts := startServer(t, path, serverOptions{})
	for _, q := range []string{"go", "quantum", "secret"} {
		search(ts, q)
	}
	t.Run("GET /v1/learn shows the summary and a draft on the admin port", func(t *testing.T) {
		d := waitLearned(ts, 3)
		if !strings.Contains(d, "get_api_search:") || !strings.Contains(d, `body.code == "E_NOPERM"`) {
			t.Errorf("draft:\n%s", d)
		}
		code, yamlText := ts.get("/v1/learn?format=yaml")
		if code != http.StatusOK {
			t.Fatalf("?format=yaml: %d", code)
		}
		if _, err := config.CompileSource("draft.yaml", []byte(yamlText), config.Options{LookupEnv: noEnv}); err != nil {
			t.Errorf("the draft does not compile: %v", err)
		}
	})
	t.Run("a reload that changes server.learn is refused", func(t *testing.T) {
		if err := os.WriteFile(path, []byte(learningServePolicy(b.search.URL, file, "2h")), 0o600); err != nil {
			t.Fatal(err)
		}
		if code, body := ts.postReload(); code != http.StatusBadRequest || !strings.Contains(body, "server.learn cannot change on reload") {
			t.Errorf("reload: %d %s", code, body)
		}
		if err := os.WriteFile(path, []byte(learningServePolicy(b.search.URL, file, "1h")), 0o600); err != nil {
			t.Fatal(err)
		}
	})
	if err := ts.stop(); err != nil {
		t.Fatal(err)
	}
	t.Run("the summary is saved at shutdown and continued after a restart", func(t *testing.T) {
		sum, err := learn.ReadSummary(file)
		if err != nil || sum.Exchanges != 3 {
			t.Fatalf("saved summary: %+v, %v", sum, err)
		}
		again := startServer(t, path, serverOptions{})
		search(again, "go")
		waitLearned(again, 4)
	})
	t.Run("the summary is saved every save_interval", func(t *testing.T) {
		if err := os.WriteFile(path, []byte(learningServePolicy(b.search.URL, file, "1s")), 0o600); err != nil {
			t.Fatal(err)
		}
		ts := startServer(t, path, serverOptions{})
		search(ts, "redis")
		waitLearned(ts, 5)
		deadline := time.Now().Add(20 * time.Second)
		for {
			sum, err := learn.ReadSummary(file)
			if err == nil && sum.Exchanges >= 5 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the file was not saved while running: %+v %v", sum, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
}
