package proxy

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"strings"
	"sync"
	"testing"

	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/internal/testkit/proxytest"
)

// formPolicy has a Gotify-like JSON route (a message with a title, a
// priority, tags and a nested member), a route whose backend takes a form,
// and one whose JSON body is a single argument.
const formPolicy = `
version: 1
server:
  transparent: true
  max_request_bytes: 200000
upstreams:
  legacy: {url: "{{url}}", timeout: 2s}
tools:
  push:
    description: Push a message.
    upstream: legacy
    side_effect: true
    args:
      type: object
      required: [message]
      additionalProperties: false
      properties:
        title: {type: string}
        message: {type: string, minLength: 1}
        priority: {type: integer, minimum: 0, maximum: 10}
        tags: {type: array, items: {type: string}}
        loud: {type: boolean}
        note: {type: string}
    request:
      method: POST
      path: /message
      body: {title: title, message: message, priority: priority, tags: tags, loud: loud, meta: {note: note}, source: {const: legacy-form}}
  push_form:
    description: Push a message to a backend that takes a form.
    upstream: legacy
    side_effect: true
    args: {type: object, required: [message], properties: {message: {type: string}, priority: {type: integer}}}
    request: {method: POST, path: /form/message, encoding: form, body: {message: message, priority: priority}}
  put_doc:
    description: Store a document.
    upstream: legacy
    args: {type: object, required: [doc], properties: {doc: {type: object}}}
    request: {method: PUT, path: /doc, body: doc}
`

// formBackend records the body and Content-Type of what toolgate sent.
type formBackend struct {
	mu   sync.Mutex
	sent []string
}

func (b *formBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	b.mu.Lock()
	b.sent = append(b.sent, r.Method+" "+r.URL.RequestURI()+" "+r.Header.Get("Content-Type")+" "+string(body))
	b.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"id":1}`))
}

func (b *formBackend) take() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.sent
	b.sent = nil
	return s
}

func newFormHarness(t *testing.T) (*httptest.Server, *formBackend, *Core) {
	t.Helper()
	fb := &formBackend{}
	backend := httptest.NewServer(fb)
	t.Cleanup(backend.Close)
	core := newTestCore(t, strings.ReplaceAll(formPolicy, "{{url}}", backend.URL), Options{})
	front := httptest.NewServer(agentHandler(core))
	t.Cleanup(func() { front.Close(); core.Close() })
	return front, fb, core
}

// part is one part of a multipart body.
type part struct {
	name, value string
	header      textproto.MIMEHeader // more headers (a file name, a type)
}

func multipartBody(t *testing.T, parts ...part) (string, string) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for _, p := range parts {
		h := textproto.MIMEHeader{"Content-Disposition": {fmt.Sprintf(`form-data; name="%s"`, p.name)}}
		for k, v := range p.header {
			h[k] = v
		}
		w, err := mw.CreatePart(h)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = w.Write([]byte(p.value))
	}
	_ = mw.Close()
	return buf.String(), mw.FormDataContentType()
}

const (
	formType = "application/x-www-form-urlencoded"
	pushJSON = `{"title":"Hi","message":"Hello there","priority":5,"tags":["a","b c"],"loud":true,"meta":{"note":"n1"},"source":"legacy-form"}`
)

// TestTransparentFormAndMultipartBodies: a legacy client that posts a form
// (curl --data, a browser form) or a multipart body (curl -F) calls the
// route's tool with the fields as arguments, typed by the schema, and the
// backend gets what the binding sends; anything else is refused naming
// the problem, 415 for a media type the route does not read.
func TestTransparentFormAndMultipartBodies(t *testing.T) {
	front, fb, _ := newFormHarness(t)
	fileHeader := textproto.MIMEHeader{"Content-Disposition": {`form-data; name="attachment"; filename="report.pdf"`}}
	multi, multiType := multipartBody(t,
		part{name: "title", value: "Hi"}, part{name: "message", value: "Hello there"}, part{name: "priority", value: "5"},
		part{name: "tags", value: "a"}, part{name: "tags", value: "b c"}, part{name: "loud", value: "true"}, part{name: "meta[note]", value: "n1"})
	withFile, withFileType := multipartBody(t, part{name: "message", value: "m"},
		part{name: "attachment", value: "%PDF-1.7", header: fileHeader})
	jsonPart, jsonPartType := multipartBody(t, part{name: "message", value: `{"x":1}`,
		header: textproto.MIMEHeader{"Content-Type": {"application/json"}}})
	longHeader, longHeaderType := multipartBody(t, part{name: "message", value: "m",
		header: textproto.MIMEHeader{"X-Padding": {strings.Repeat("p", contracts.MaxPartHeaderBytes)}}})
	manyParts := make([]part, contracts.MaxFormFields+1)
	for i := range manyParts {
		manyParts[i] = part{name: "tags", value: "t"}
	}
	tooManyParts, tooManyPartsType := multipartBody(t, manyParts...)
	fewParts, fewPartsType := multipartBody(t, append(manyParts[:contracts.MaxFormFields-1], part{name: "message", value: "m"})...)
	formMulti, formMultiType := multipartBody(t, part{name: "message", value: "hi"}, part{name: "priority", value: "2"})

	cases := []struct {
		name, target, contentType, body string
		code                            int
		status                          contracts.Status
		sent                            string // what the backend got: Content-Type and body
		msg                             string
	}{
		{name: "a form's fields are the arguments, typed by the schema, sent as JSON", target: "/message", contentType: formType,
			body: "title=Hi&message=Hello+there&priority=5&tags=a&tags=b%20c&loud=true&meta%5Bnote%5D=n1",
			code: 200, status: contracts.StatusOK, sent: "application/json " + pushJSON},
		{name: "a multipart body's fields are the arguments", target: "/message", contentType: multiType, body: multi,
			code: 200, status: contracts.StatusOK, sent: "application/json " + pushJSON},
		{name: "one value of an array argument is an array of one", target: "/message", contentType: formType, body: "message=m&tags=solo",
			code: 200, status: contracts.StatusOK, sent: `application/json {"message":"m","tags":["solo"],"source":"legacy-form"}`},
		{name: "the form's charset parameter is allowed", target: "/message", contentType: formType + "; charset=UTF-8", body: "message=%C3%A9t%C3%A9",
			code: 200, status: contracts.StatusOK, sent: `application/json {"message":"été","source":"legacy-form"}`},
		{name: "JSON labelled as a form (curl -d '{…}') is read as JSON", target: "/message", contentType: formType, body: `{"message":"m"}`,
			code: 200, status: contracts.StatusOK, sent: `application/json {"message":"m","source":"legacy-form"}`},
		{name: "a field that is not a number where the schema wants one is bad_args naming it", target: "/message", contentType: formType,
			body: "message=m&priority=high", code: 400, status: contracts.StatusBadArgs, msg: "Argument priority must be an integer"},
		{name: "the schema's bounds apply to a form's numbers", target: "/message", contentType: formType,
			body: "message=m&priority=11", code: 400, status: contracts.StatusBadArgs, msg: "priority"},
		{name: "a scalar field given twice is bad_args", target: "/message", contentType: formType,
			body: "message=a&message=b", code: 400, status: contracts.StatusBadArgs, msg: "Argument message takes one value"},
		{name: "a field the route does not take is refused", target: "/message", contentType: formType,
			body: "message=m&cc=bob", code: 400, status: contracts.StatusBadArgs, msg: "Argument cc is not an accepted argument"},
		{name: "a file part is refused naming its field", target: "/message", contentType: withFileType, body: withFile,
			code: 400, status: contracts.StatusBadArgs, msg: `Field attachment is a file or a part that is not text (got "report.pdf"); this route takes text fields only`},
		{name: "a part that is not text is refused naming its field", target: "/message", contentType: jsonPartType, body: jsonPart,
			code: 400, status: contracts.StatusBadArgs, msg: `Field message is a file or a part that is not text (got "application/json")`},
		{name: "multipart without a boundary is bad_args", target: "/message", contentType: "multipart/form-data", body: multi,
			code: 400, status: contracts.StatusBadArgs, msg: "The multipart/form-data body has no boundary parameter in its Content-Type"},
		{name: "a multipart body that does not end is bad_args", target: "/message", contentType: multiType, body: multi[:len(multi)/2],
			code: 400, status: contracts.StatusBadArgs, msg: `The "multipart/form-data" body is not well formed`},
		{name: "a part's headers past the bound are bad_args", target: "/message", contentType: longHeaderType, body: longHeader,
			code: 400, status: contracts.StatusBadArgs, msg: fmt.Sprintf("headers longer than %d bytes", contracts.MaxPartHeaderBytes)},
		{name: "as many parts as the bound are read", target: "/message", contentType: fewPartsType, body: fewParts,
			code: 200, status: contracts.StatusOK},
		{name: "one part past the bound is bad_args", target: "/message", contentType: tooManyPartsType, body: tooManyParts,
			code: 400, status: contracts.StatusBadArgs, msg: fmt.Sprintf("The body has more than %d fields", contracts.MaxFormFields)},
		{name: "as many form fields as the bound are read", target: "/message", contentType: formType,
			body: strings.Repeat("tags=t&", contracts.MaxFormFields-1) + "message=m", code: 200, status: contracts.StatusOK},
		{name: "one form field past the bound is bad_args", target: "/message", contentType: formType,
			body: strings.Repeat("tags=t&", contracts.MaxFormFields) + "message=m",
			code: 400, status: contracts.StatusBadArgs, msg: fmt.Sprintf("The body has more than %d fields", contracts.MaxFormFields)},
		{name: "a form past max_request_bytes is too large", target: "/message", contentType: formType,
			body: "message=" + strings.Repeat("x", 200000), code: 413, status: contracts.StatusBadArgs, msg: "200000 bytes"},
		{name: "a multipart body past max_request_bytes is too large", target: "/message", contentType: multiType,
			body: multi + strings.Repeat("x", 200000), code: 413, status: contracts.StatusBadArgs, msg: "200000 bytes"},
		{name: "a field that is not UTF-8 is bad_args", target: "/message", contentType: formType, body: "message=%FF",
			code: 400, status: contracts.StatusBadArgs, msg: "UTF-8"},
		{name: "a malformed form is bad_args", target: "/message", contentType: formType, body: "message=%zz",
			code: 400, status: contracts.StatusBadArgs, msg: `The "application/x-www-form-urlencoded" body is not well formed`},
		{name: "text/plain is 415 naming it and what the route reads", target: "/message", contentType: "text/plain", body: "message=m",
			code: 415, status: contracts.StatusBadArgs,
			msg: `it is sent as "text/plain", not application/json, application/x-www-form-urlencoded or multipart/form-data`},
		{name: "application/xml is 415 naming it", target: "/message", contentType: "application/xml; charset=utf-8", body: "<message>m</message>",
			code: 415, status: contracts.StatusBadArgs, msg: `it is sent as "application/xml"`},
		{name: "a form route takes a form and sends one", target: "/form/message", contentType: formType, body: "message=hi&priority=2",
			code: 200, status: contracts.StatusOK, sent: formType + " message=hi&priority=2"},
		{name: "a form route takes a multipart body and sends a form", target: "/form/message", contentType: formMultiType, body: formMulti,
			code: 200, status: contracts.StatusOK, sent: formType + " message=hi&priority=2"},
		{name: "a form route takes JSON and sends a form", target: "/form/message", contentType: "application/json",
			body: `{"message":"hi","priority":2}`, code: 200, status: contracts.StatusOK, sent: formType + " message=hi&priority=2"},
		{name: "a form route types a JSON body's text by the schema", target: "/form/message", contentType: "application/json",
			body: `{"message":"hi","priority":"x"}`, code: 400, status: contracts.StatusBadArgs, msg: "Argument priority must be an integer"},
		{name: "a form route refuses a JSON member it does not take", target: "/form/message", contentType: "application/json",
			body: `{"message":"hi","cc":{"to":"bob"}}`, code: 400, status: contracts.StatusBadArgs, msg: "cc[to]"},
		{name: "a route whose body is one argument takes JSON only", target: "/doc", contentType: formType, body: "a=b",
			code: 415, status: contracts.StatusBadArgs, msg: `it is sent as "application/x-www-form-urlencoded", not application/json`},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fb.take()
			method := http.MethodPost
			if tc.target == "/doc" {
				method = http.MethodPut
			}
			req, _ := http.NewRequest(method, front.URL+tc.target, strings.NewReader(tc.body))
			req.Header.Set("Content-Type", tc.contentType)
			req.Header.Set("Idempotency-Key", fmt.Sprintf("form-%d", i))
			resp, err := front.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			env, _, err := proxytest.ReadEnvelope(resp)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tc.code || env.Status != tc.status {
				t.Fatalf("HTTP %d %s (%s), want %d %s", resp.StatusCode, env.Status, env.Message, tc.code, tc.status)
			}
			if tc.msg != "" && !strings.Contains(env.Message, tc.msg) {
				t.Errorf("message %q lacks %q", env.Message, tc.msg)
			}
			sent := fb.take()
			switch {
			case tc.status != contracts.StatusOK && len(sent) != 0:
				t.Errorf("the backend got %q", sent)
			case tc.sent != "" && (len(sent) != 1 || !strings.HasSuffix(sent[0], tc.sent)):
				t.Errorf("the backend got %q, want %q", sent, tc.sent)
			}
		})
	}
}

// TestFormCallsAreIdempotentByTheirArguments: a form call's key covers
// its arguments, whatever encoding carried them: the same arguments as
// JSON replay the form call's result, other arguments under the same key
// are refused, and the key may come as a form field.
func TestFormCallsAreIdempotentByTheirArguments(t *testing.T) {
	front, fb, _ := newFormHarness(t)
	post := func(contentType, body, key string) (*http.Response, contracts.Envelope) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, front.URL+"/message", strings.NewReader(body))
		req.Header.Set("Content-Type", contentType)
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		resp, err := front.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		env, _, err := proxytest.ReadEnvelope(resp)
		if err != nil {
			t.Fatal(err)
		}
		return resp, *env
	}
	multi, multiType := multipartBody(t, part{name: "message", value: "once"}, part{name: "priority", value: "3"})
	steps := []struct {
		name, contentType, body, key string
		status                       contracts.Status
		replayed                     bool
		sent                         int
	}{
		{"a form call runs", formType, "message=once&priority=3", "k-1", contracts.StatusOK, false, 1},
		{"the same form call with its key is replayed", formType, "priority=3&message=once", "k-1", contracts.StatusOK, true, 0},
		{"the same arguments as JSON are replayed", "application/json", `{"message":"once","priority":3}`, "k-1", contracts.StatusOK, true, 0},
		{"the same arguments as multipart are replayed", multiType, multi, "k-1", contracts.StatusOK, true, 0},
		{"other arguments under the key are refused", formType, "message=twice&priority=3", "k-1", contracts.StatusBadArgs, false, 0},
		{"a form call without a key is refused", formType, "message=once", "", contracts.StatusBadArgs, false, 0},
		{"the key may be a form field", formType, "message=field&idempotency_key=k-2", "", contracts.StatusOK, false, 1},
		{"and replays as one", formType, "idempotency_key=k-2&message=field", "", contracts.StatusOK, true, 0},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			_, env := post(s.contentType, s.body, s.key)
			if env.Status != s.status || env.Replayed != s.replayed {
				t.Fatalf("%s replayed=%v (%s), want %s replayed=%v", env.Status, env.Replayed, env.Message, s.status, s.replayed)
			}
			if sent := fb.take(); len(sent) != s.sent {
				t.Errorf("the backend got %q, want %d requests", sent, s.sent)
			}
		})
	}
}

// TestFormCallSendsWhatTheDryRunShows: the arguments are what count: a
// form call sends the backend the request toolgate try shows for the same
// arguments as JSON.
func TestFormCallSendsWhatTheDryRunShows(t *testing.T) {
	front, fb, core := newFormHarness(t)
	req, _ := http.NewRequest(http.MethodPost, front.URL+"/message",
		strings.NewReader("title=Hi&message=Hello+there&priority=5&tags=a&tags=b%20c&loud=true&meta%5Bnote%5D=n1"))
	req.Header.Set("Content-Type", formType)
	req.Header.Set("Idempotency-Key", "dry-1")
	resp, err := front.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	sent := fb.take()
	if len(sent) != 1 {
		t.Fatalf("the backend got %q", sent)
	}
	dry, err := Try(context.Background(), core.Snapshot(), DryRun{Tool: "push", IdempotencyKey: "dry-1",
		Args: []byte(`{"title":"Hi","message":"Hello there","priority":5,"tags":["a","b c"],"loud":true,"note":"n1"}`)})
	if err != nil {
		t.Fatal(err)
	}
	_, dryBody, _ := strings.Cut(string(dry.Request), "\n\n")
	if want := "POST /message application/json " + dryBody; sent[0] != want {
		t.Errorf("the form call sent\n %q\nthe dry run shows\n %q", sent[0], want)
	}
}
