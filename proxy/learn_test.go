package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/toolgate/toolgate/internal/testkit/policytest"
	"github.com/toolgate/toolgate/internal/testkit/proxytest"
	"github.com/toolgate/toolgate/learn"
)

// recorder is an Observer that keeps copies of what it is shown (the
// exchange's buffers are reused once Observe returns).
type recorder struct {
	mu  sync.Mutex
	got []learn.Exchange
}

func (r *recorder) Observe(x *learn.Exchange) {
	c := *x
	c.RequestBody = append([]byte(nil), x.RequestBody...)
	c.ResponseBody = append([]byte(nil), x.ResponseBody...)
	c.RequestHeader, c.ResponseHeader = x.RequestHeader.Clone(), x.ResponseHeader.Clone()
	r.mu.Lock()
	r.got = append(r.got, c)
	r.mu.Unlock()
}

func (r *recorder) exchanges() []learn.Exchange {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]learn.Exchange(nil), r.got...)
}

const learnPolicy = `
version: 1
server:
  transparent: true
  passthrough:
    - {prefix: /pt/, upstream: legacy}
    - {prefix: /dead/, upstream: dead}
  learn: {max_body_bytes: 64}
upstreams:
  legacy: {url: "{{url}}", timeout: 2s}
  dead: {url: "{{dead}}"}
tools:
  notify:
    description: Notify a user.
    upstream: legacy
    side_effect: true
    args: {type: object, required: [user, text], properties: {user: {type: string}, text: {type: string}}}
    request: {method: POST, path: "/users/{user}/notify", query: {v: text}, body: {text: text}}
`

// learnBackend echoes what it got, cuts one answer short, and answers
// everything else with a JSON body and pagination headers.
func learnBackend(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	switch r.URL.Path {
	case "/pt/broken":
		conn, buf, _ := http.NewResponseController(w).Hijack()
		_, _ = buf.WriteString("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"partial\":")
		_ = buf.Flush()
		conn.Close()
		return
	case "/pt/long":
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"text":"`+strings.Repeat("y", 500)+`"}`)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Total-Count", "3")
	w.WriteHeader(http.StatusCreated)
	_, _ = io.WriteString(w, `{"echo":`+jsonString(string(body))+`}`)
}

func newLearnCore(t *testing.T) (*httptest.Server, *recorder) {
	t.Helper()
	backend := httptest.NewServer(http.HandlerFunc(learnBackend))
	t.Cleanup(backend.Close)
	doc := strings.NewReplacer("{{url}}", backend.URL, "{{dead}}", proxytest.RefusedURL(t)).Replace(learnPolicy)
	rec := &recorder{}
	return serveCore(t, newTestCore(t, doc, Options{Observer: rec})), rec
}

func TestObserverSeesPassthroughExchanges(t *testing.T) {
	srv, rec := newLearnCore(t)
	t.Run("a passthrough exchange is shown whole, and the client gets the answer untouched", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/pt/items/42?x=1", strings.NewReader(`{"a":1}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "k-1")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated || string(body) != `{"echo":"{\"a\":1}"}` {
			t.Fatalf("client got %d %s", resp.StatusCode, body)
		}
		x := nth(t, rec, 1)
		if x.Upstream != "legacy" || x.Tool != "" || x.Method != http.MethodPost || x.EscapedPath != "/pt/items/42" || x.RawQuery != "x=1" {
			t.Errorf("request line = %+v", x)
		}
		if string(x.RequestBody) != `{"a":1}` || x.RequestTruncated || x.RequestHeader.Get("Idempotency-Key") != "k-1" {
			t.Errorf("request body %q truncated %v, header %v", x.RequestBody, x.RequestTruncated, x.RequestHeader)
		}
		if x.Status != http.StatusCreated || string(x.ResponseBody) != string(body) || x.ResponseTruncated || x.ResponseHeader.Get("X-Total-Count") != "3" {
			t.Errorf("answer = %d %q truncated %v header %v", x.Status, x.ResponseBody, x.ResponseTruncated, x.ResponseHeader)
		}
		if x.UpstreamURL == "" || x.Latency <= 0 {
			t.Errorf("upstream URL %q, latency %v", x.UpstreamURL, x.Latency)
		}
	})
	t.Run("a body over max_body_bytes is kept cut and marked, and still streams whole", func(t *testing.T) {
		resp, err := srv.Client().Get(srv.URL + "/pt/long")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if len(body) != 511 {
			t.Fatalf("client got %d bytes, want 511", len(body))
		}
		x := nth(t, rec, 2)
		if len(x.ResponseBody) != 64 || !x.ResponseTruncated {
			t.Errorf("kept %d bytes, truncated %v; want 64, true", len(x.ResponseBody), x.ResponseTruncated)
		}
	})
	t.Run("an answer that breaks off midway is shown, marked truncated", func(t *testing.T) {
		resp, err := srv.Client().Get(srv.URL + "/pt/broken")
		if err == nil {
			_, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		x := nth(t, rec, 3)
		if x.EscapedPath != "/pt/broken" || x.Status != http.StatusOK || !x.ResponseTruncated {
			t.Errorf("exchange = %+v", x)
		}
	})
	t.Run("a backend that refuses the connection is shown as a failure without an answer", func(t *testing.T) {
		resp, err := srv.Client().Get(srv.URL + "/dead/x")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadGateway {
			t.Errorf("client got %d, want 502", resp.StatusCode)
		}
		x := nth(t, rec, 4)
		if x.Upstream != "dead" || x.Status != 0 || x.Failure != "connect" {
			t.Errorf("exchange = %+v", x)
		}
	})
}

func TestObserverSeesToolAttempts(t *testing.T) {
	srv, rec := newLearnCore(t)
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/tools/notify", strings.NewReader(`{"user":"alice","text":"hi there"}`))
	req.Header.Set("Idempotency-Key", "k-2")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	x := nth(t, rec, 1)
	if x.Tool != "notify" || x.Route != "/users/{user}/notify" || x.EscapedPath != "/users/alice/notify" || x.RawQuery != "v=hi+there" {
		t.Errorf("exchange = %+v", x)
	}
	if string(x.RequestBody) != `{"text":"hi there"}` || x.Status != http.StatusCreated || !strings.HasPrefix(string(x.ResponseBody), `{"echo":`) {
		t.Errorf("bodies %q -> %d %q", x.RequestBody, x.Status, x.ResponseBody)
	}
}

// nth waits for the observer's n-th exchange (an exchange is shown after
// the client got its answer) and returns it.
func nth(t *testing.T, rec *recorder, n int) learn.Exchange {
	t.Helper()
	policytest.Eventually(t, "the observer", func() bool { return len(rec.exchanges()) >= n })
	return rec.exchanges()[n-1]
}

func TestObservedPassthroughStillUpgradesConnections(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		_, _ = buf.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		_ = buf.Flush()
		line, _ := buf.ReadString('\n')
		_, _ = buf.WriteString("echo " + line)
		_ = buf.Flush()
	}))
	t.Cleanup(backend.Close)
	doc := strings.NewReplacer("{{url}}", backend.URL).Replace(`
version: 1
server:
  transparent: true
  passthrough: [{prefix: /ws, upstream: legacy}]
upstreams:
  legacy: {url: "{{url}}"}
`)
	rec := &recorder{}
	srv := serveCore(t, newTestCore(t, doc, Options{Observer: rec}))
	conn, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, _ = io.WriteString(conn, "GET /ws HTTP/1.1\r\nHost: "+strings.TrimPrefix(srv.URL, "http://")+"\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	_, _ = io.WriteString(conn, "ping\n")
	if line, _ := br.ReadString('\n'); line != "echo ping\n" {
		t.Errorf("through the upgraded connection: %q", line)
	}
	conn.Close()
	if x := nth(t, rec, 1); x.Status != http.StatusSwitchingProtocols {
		t.Errorf("exchange = %+v", x)
	}
}
