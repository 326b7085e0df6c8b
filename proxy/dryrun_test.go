package proxy

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/internal/testkit/proxytest"
)

// wireBackend is a plain-HTTP backend on 127.0.0.1 that keeps the bytes
// of each request as they came off the wire, and answers each with
// answer, written as is.
type wireBackend struct {
	url    string
	answer string
	got    chan []byte
}

func newWireBackend(t *testing.T, answer string) *wireBackend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &wireBackend{url: "http://" + ln.Addr().String(), answer: answer, got: make(chan []byte, 1)}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			var raw bytes.Buffer
			req, err := http.ReadRequest(bufio.NewReader(io.TeeReader(conn, &raw)))
			if err == nil {
				_, _ = io.Copy(io.Discard, req.Body)
				b.got <- raw.Bytes()
				_, _ = io.WriteString(conn, b.answer)
			}
			conn.Close()
		}
	}()
	return b
}

// TestTrySendsWhatAServedCallSends: for the same call and the same
// answer, the dry run's request is the request a served call writes on
// the wire (its header fields sorted), and its result is the served
// call's envelope.
func TestTrySendsWhatAServedCallSends(t *testing.T) {
	const answer = "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 25\r\nConnection: close\r\n\r\n{\"id\":\"m-1\",\"state\":\"ok\"}"
	for _, c := range []struct {
		name, args, request string
		sideEffect, forward bool
	}{
		{"a search bound to the query", `{"q":"a b&c","tags":["x","y"]}`,
			`{method: GET, path: /search, query: {q: q, tag: tags, wt: {const: json}}}`, false, false},
		{"a side-effecting GET", `{"q":"x","idempotency_key":"k-0"}`, `{method: GET, path: /act, query: {q: q}}`, true, false},
		{"a nested JSON body with a forwarded key", `{"to":"u@example.com","text":"hi","idempotency_key":"k-1"}`,
			`{method: POST, path: /mail/send, body: {personalizations: [{to: [{email: to}]}], content: {value: text, type: {const: text/plain}}}}`, true, true},
		{"a form body", `{"to":"+15551234567","text":"hi there","tags":["x","y"],"idempotency_key":"k-2"}`,
			`{method: POST, path: /Messages.json, encoding: form, body: {To: to, Body: text, MediaUrl: tags, meta: {a: to}}}`, true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			backend := newWireBackend(t, answer)
			doc := `
version: 1
upstreams:
  api: {url: "` + backend.url + `/base", headers: {X-Static: one}}
tools:
  t:
    description: d
    upstream: api
    side_effect: ` + map[bool]string{true: "true", false: "false"}[c.sideEffect] + `
    idempotency: {forward_header: Idempotency-Key}
    args:
      type: object
      properties:
        q: {type: string}
        tags: {type: array, items: {type: string}}
        to: {type: string}
        text: {type: string}
    request: ` + c.request + `
    response: {data: body}
`
			if !c.forward {
				doc = strings.Replace(doc, "    idempotency: {forward_header: Idempotency-Key}\n", "", 1)
			}
			snap := proxytest.Snapshot(t, doc)
			core, err := NewCore(snap, Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer core.Close()
			served := core.Call(context.Background(), &Request{Tool: "t", Body: []byte(c.args), CallID: "try"})
			var wire []byte
			select {
			case wire = <-backend.got: // sent before the backend answered
			default:
				t.Fatalf("the backend got nothing; the served call ended %s", served.Envelope.AppendJSON(nil))
			}

			dry, err := Try(context.Background(), snap, DryRun{Tool: "t", Args: []byte(c.args), CallID: "try",
				Answer: &Answer{Code: 201, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"id":"m-1","state":"ok"}`)}})
			if err != nil {
				t.Fatal(err)
			}
			if want := sortedRequest(wire); !bytes.Equal(dry.Request, want) {
				t.Errorf("dry run request:\n%s\nthe served call wrote:\n%s", dry.Request, want)
			}
			if got, want := dry.Result.Envelope.AppendJSON(nil), served.Envelope.AppendJSON(nil); !bytes.Equal(got, want) {
				t.Errorf("dry run envelope %s\nserved call's %s", got, want)
			}
			line, _, _ := bytes.Cut(wire, []byte("\r\n"))
			fields := strings.Fields(string(line))
			if want := backend.url + fields[1]; dry.Method != fields[0] || dry.URL != want || dry.Upstream != "api" {
				t.Errorf("method %q, url %q, upstream %q; want %q, %q, api", dry.Method, dry.URL, dry.Upstream, fields[0], want)
			}
		})
	}
}

// TestTryMasksCredentials: each kind of upstream credential is in the
// request where the real one goes, masked, and OAuth2 never asks the
// token endpoint.
func TestTryMasksCredentials(t *testing.T) {
	var tokenRequests atomic.Int32
	tokens := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tokenRequests.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"access_token":"real-token","token_type":"Bearer","expires_in":3600}`)
	}))
	defer tokens.Close()
	doc := `
version: 1
upstreams:
  basic: {url: "http://127.0.0.1:1", auth: {basic: {username: "${USER}", password: "${PASS}"}}}
  bearer: {url: "https://127.0.0.1:1", auth: {bearer: {token: "${TOKEN}"}}}
  keyed: {url: "http://127.0.0.1:1", auth: {api_key: {header: X-Api-Key, scheme: Token, value: "${TOKEN}"}}}
  query: {url: "http://127.0.0.1:1", auth: {api_key: {query: key, value: "${TOKEN}"}}}
  oauth: {url: "http://127.0.0.1:1", auth: {oauth2: {token_url: "` + tokens.URL + `/token", client_id: id, client_secret: "${PASS}"}}}
tools:
  basic: {description: d, upstream: basic, request: {path: /b}}
  bearer: {description: d, upstream: bearer, request: {path: /b}}
  keyed: {description: d, upstream: keyed, request: {path: /b}}
  query: {description: d, upstream: query, args: {type: object, properties: {key: {type: string}, q: {type: string}}}, request: {path: /b, query: {key: key, q: q}}}
  oauth: {description: d, upstream: oauth, request: {path: /b}}
access: {shared_credentials: [basic, bearer, keyed, query, oauth]}
`
	env := map[string]string{"USER": "user-s3cret", "PASS": "pass-s3cret", "TOKEN": "token-s3cret"}
	snap, err := config.CompileSource("auth.yaml", []byte(doc), config.Options{LookupEnv: func(k string) (string, bool) {
		v, ok := env[k]
		return v, ok
	}})
	if err != nil {
		t.Fatal(err)
	}
	for tool, want := range map[string]string{
		"basic":  "\nAuthorization: Basic ***\n",
		"bearer": "\nAuthorization: Bearer ***\n",
		"keyed":  "\nX-Api-Key: Token ***\n",
		"query":  "GET /b?q=x&key=*** HTTP/1.1\n",
		"oauth":  "\nAuthorization: Bearer *** (oauth2 token from " + tokens.URL + "/token)\n",
	} {
		t.Run(tool, func(t *testing.T) {
			args := `{}`
			if tool == "query" {
				args = `{"key":"agent's","q":"x"}`
			}
			res, err := Try(context.Background(), snap, DryRun{Tool: tool, Args: []byte(args),
				Answer: &Answer{Code: 200, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"ok":true}`)}})
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(res.Request), want) {
				t.Errorf("request\n%s\ndoes not hold %q", res.Request, want)
			}
			for _, secret := range []string{"s3cret", "real-token", "dXNlci"} {
				if strings.Contains(string(res.Request)+res.URL, secret) {
					t.Errorf("request shows a secret (%s):\n%s", secret, res.Request)
				}
			}
			if res.Result.Envelope.Status != contracts.StatusOK {
				t.Errorf("status %s, want ok", res.Result.Envelope.Status)
			}
		})
	}
	if n := tokenRequests.Load(); n != 0 {
		t.Errorf("the token endpoint got %d requests, want none", n)
	}
	if a := snap.Upstreams["basic"].Auth; a == nil || a.Username.Value != "user-s3cret" {
		t.Errorf("the snapshot's auth was changed: %v", a)
	}
}

// TestTryEndsWhereTheCallEnds: a call refused before the send has no
// request, only its envelope; a call given no answer has a request and no
// envelope; a retryable answer is tried once.
func TestTryEndsWhereTheCallEnds(t *testing.T) {
	snap := proxytest.Snapshot(t, `
version: 1
upstreams:
  api: {url: "http://127.0.0.1:1", retries: {attempts: 3, backoff: 1ms}}
tools:
  search:
    description: d
    upstream: api
    timeout: 10s
    args: {type: object, required: [q], properties: {q: {type: string, minLength: 1}}}
    request: {path: /s, query: {q: q}}
  send:
    description: d
    upstream: api
    side_effect: true
    args: {type: object, properties: {text: {type: string}}}
    request: {method: POST, path: /m, body: {text: text}}
access:
  default: allow
  callers:
    reader: {tools: [search]}
`)
	try := func(d DryRun) *DryRunResult {
		t.Helper()
		res, err := Try(context.Background(), snap, d)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	t.Run("arguments the schema refuses send nothing", func(t *testing.T) {
		res := try(DryRun{Tool: "search", Args: []byte(`{"q":""}`)})
		if res.Request != nil || res.Result == nil || res.Result.Envelope.Status != contracts.StatusBadArgs {
			t.Fatalf("request %q, result %+v; want none and bad_args", res.Request, res.Result)
		}
	})
	t.Run("a caller the tool is not for sends nothing", func(t *testing.T) {
		res := try(DryRun{Tool: "send", Args: []byte(`{"text":"x","idempotency_key":"k-1"}`), Caller: "reader"})
		if res.Request != nil || res.Result.Envelope.Status != contracts.StatusForbidden {
			t.Fatalf("request %q, status %s; want none and forbidden", res.Request, res.Result.Envelope.Status)
		}
	})
	t.Run("a side-effecting call without a key sends nothing", func(t *testing.T) {
		res := try(DryRun{Tool: "send", Args: []byte(`{"text":"x"}`)})
		if res.Request != nil || res.Result.Reason != contracts.ReasonKeyMissing {
			t.Fatalf("request %q, reason %s; want none and %s", res.Request, res.Result.Reason, contracts.ReasonKeyMissing)
		}
	})
	t.Run("without an answer there is only the request", func(t *testing.T) {
		res := try(DryRun{Tool: "send", Args: []byte(`{"text":"x"}`), IdempotencyKey: "k-1", CallID: "c-1"})
		want := "POST /m HTTP/1.1\nHost: 127.0.0.1:1\nAccept: application/json\nContent-Length: 12\nContent-Type: application/json\nUser-Agent: toolgate/dev\nX-Request-Id: c-1\n\n{\"text\":\"x\"}"
		if string(res.Request) != want || res.Result != nil {
			t.Fatalf("request\n%s\nresult %+v; want\n%s\nand no result", res.Request, res.Result, want)
		}
	})
	t.Run("a retryable answer is tried once", func(t *testing.T) {
		// The recorder refuses a second request: a retry would end the
		// call as a reset instead of the answer's 503.
		res := try(DryRun{Tool: "search", Args: []byte(`{"q":"x"}`), Answer: &Answer{Code: 503}})
		if res.Request == nil || res.Result.Envelope.Status != contracts.StatusUpstream || res.Result.Reason != "unavailable" {
			t.Fatalf("result %s %+v; want upstream", res.Result.Reason, res.Result.Envelope)
		}
	})
	if snap.Upstreams["api"].Retries.Attempts != 3 {
		t.Error("the snapshot's retries were changed")
	}
}
