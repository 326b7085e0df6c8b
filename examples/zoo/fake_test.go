package zoo_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
)

// request is what a fake expects to receive, exactly: method, path and
// query as sent on the wire (escapes included), the headers (each named
// one with exactly this value; "" means it must be absent), and the body
// bytes. No other header may come but X-Request-Id, Content-Length (the
// body is checked), Accept-Encoding, and those named in anyValue.
type request struct {
	method   string
	path     string
	query    string
	header   map[string]string
	anyValue []string
	body     string
}

// unnamedHeaders may come with any value in every request.
var unnamedHeaders = []string{"X-Request-Id", "Content-Length", "Accept-Encoding"}

// answer is what a fake sends back.
type answer struct {
	status int
	header map[string]string
	body   string
}

// exchange is one request a fake expects during a call, and its answer.
type exchange struct {
	fake *fake
	want request
	give answer
}

// fake is one API's backend on 127.0.0.1: it holds the exchanges a call
// is expected to cause, checks each request it receives against the next
// one, and answers it. Anything unexpected is a problem the test reports.
type fake struct {
	name string
	srv  *httptest.Server

	mu       sync.Mutex
	queue    []exchange
	problems []string
}

func newFake(t *testing.T, name string) *fake {
	f := &fake{name: name}
	f.srv = httptest.NewServer(f)
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fake) URL() string { return f.srv.URL }

// expect arms the fake for one call.
func (f *fake) expect(x exchange) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.queue = append(f.queue, x)
}

// finish returns the problems seen since the last finish, including
// expected requests that never came, and disarms the fake.
func (f *fake) finish() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.problems
	for _, x := range f.queue {
		p = append(p, fmt.Sprintf("%s: expected %s %s, never received", f.name, x.want.method, x.want.path))
	}
	f.queue, f.problems = nil, nil
	return p
}

func (f *fake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	f.mu.Lock()
	defer f.mu.Unlock()
	problem := func(format string, args ...any) {
		f.problems = append(f.problems, f.name+": "+fmt.Sprintf(format, args...))
	}
	if err != nil {
		problem("reading the body: %v", err)
	}
	if len(f.queue) == 0 {
		problem("unexpected request %s %s", r.Method, r.RequestURI)
		http.Error(w, "unexpected", http.StatusTeapot)
		return
	}
	x := f.queue[0]
	f.queue = f.queue[1:]
	path, query, _ := strings.Cut(r.RequestURI, "?")
	if r.Method != x.want.method || path != x.want.path || query != x.want.query {
		problem("request line %s %s?%s, want %s %s?%s", r.Method, path, query, x.want.method, x.want.path, x.want.query)
	}
	for k, v := range x.want.header {
		got := r.Header.Values(k)
		if v == "" && len(got) != 0 || v != "" && !slices.Equal(got, []string{v}) {
			problem("header %s: %q, want %q", k, got, v)
		}
	}
	for k := range r.Header {
		if _, named := x.want.header[k]; !named && !slices.Contains(unnamedHeaders, k) && !slices.Contains(x.want.anyValue, k) {
			problem("unexpected header %s: %q", k, r.Header.Values(k))
		}
	}
	if string(body) != x.want.body {
		problem("body\n got %s\nwant %s", body, x.want.body)
	}
	for k, v := range x.give.header {
		w.Header().Set(k, v)
	}
	w.WriteHeader(x.give.status)
	_, _ = io.WriteString(w, x.give.body)
}
