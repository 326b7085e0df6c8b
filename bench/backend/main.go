// Command backend serves the bundled legacy search API
// (examples.NewSearchBackend) and notification API (examples.NewNotifyBackend,
// under /v1/users/) on one address, for bench/run.sh. It is the upstream every
// variant of the load benchmark calls, and the "direct" variant's target.
//
//	backend -listen 127.0.0.1:7001 [-size 65536] [-delay 200ms]
//
// -size N answers every GET /api/search (whatever the query) with one
// precomputed body of at least N bytes: the corpus repeated as results,
// "total" counting them. It is the answer-size curve's backend; 0 serves the
// real search (q=go&limit=5 is about 1 KiB).
//
// -delay D holds every search for D before answering (the in-flight test:
// bench/inflight). GET /bench/inflight answers {"now":N,"max":M}: the
// searches being held right now and the most held at once since the last
// such request, which resets it.
//
// It logs nothing per request, so that its own cost stays the same whatever
// proxy sits in front of it.
package main

import (
	"flag"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/toolgate/toolgate/examples"

	"github.com/toolgate/toolgate/bench/internal/benchserve"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:7001", "address to serve the search API on")
	size := flag.Int("size", 0, "answer every search with a body of at least this many bytes (0: the real search)")
	delay := flag.Duration("delay", 0, "hold every search this long before answering")
	flag.Parse()
	handler, err := newHandler(*size, *delay)
	if err == nil {
		err = benchserve.Run(*listen, handler)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "backend:", err)
		os.Exit(1)
	}
}

// newHandler is the search and notification APIs with the -size and -delay
// behaviour on top.
func newHandler(size int, delay time.Duration) (http.Handler, error) {
	search := examples.NewSearchBackend(examples.SearchOptions{})
	if size > 0 {
		search = fixedAnswer(examples.PaddedSearchAnswer(size))
	}
	var held heldCounter
	if delay > 0 {
		search = held.delayed(search, delay)
	}
	mux := http.NewServeMux()
	mux.Handle("/v1/users/", examples.NewNotifyBackend(examples.NotifyOptions{}))
	mux.Handle("GET /bench/inflight", &held)
	mux.Handle("/", search)
	return mux, nil
}

// fixedAnswer serves GET /api/search with body and the rest of the search
// API's routes as 404, like the real one.
func fixedAnswer(body []byte) http.Handler {
	length := strconv.Itoa(len(body))
	real := examples.NewSearchBackend(examples.SearchOptions{})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || r.URL.Path != "/api/search" {
			real.ServeHTTP(w, r)
			return
		}
		h := w.Header()
		h["Content-Type"] = []string{"application/json"}
		h["Content-Length"] = []string{length}
		_, _ = w.Write(body)
	})
}

// heldCounter counts the searches held by -delay.
type heldCounter struct {
	now, max atomic.Int64
}

func (c *heldCounter) delayed(next http.Handler, delay time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/search" {
			n := c.now.Add(1)
			for m := c.max.Load(); n > m && !c.max.CompareAndSwap(m, n); m = c.max.Load() {
			}
			t := time.NewTimer(delay)
			select {
			case <-t.C:
			case <-r.Context().Done():
				t.Stop()
			}
			c.now.Add(-1)
		}
		next.ServeHTTP(w, r)
	})
}

func (c *heldCounter) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"now":%d,"max":%d}`+"\n", c.now.Load(), c.max.Swap(c.now.Load()))
}
