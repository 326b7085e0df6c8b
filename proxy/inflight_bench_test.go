package proxy

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolgate/toolgate/examples"
)

// BenchmarkInFlight holds calls in flight against a backend that answers
// none until all have arrived, and reports the memory each call holds
// meanwhile: heap and stacks in use, after a collection, over the calls.
// Each call is the agent handler run on a goroutine of its own, as the
// HTTP server runs it on the connection's goroutine; that goroutine's
// stack is counted, the server's connection and buffers are not (net/http
// takes about 35 KiB for those, bench/RESULTS.md). The backend holds the
// connections in one goroutine, with no buffer per call. bare_goroutine
// is the same measure for goroutines parked on a channel: what a call
// costs at the least.
func BenchmarkInFlight(b *testing.B) {
	const calls = 2000
	backend := newHoldingBackend(b)
	doc := strings.NewReplacer(
		"http://127.0.0.1:7001", "http://"+backend.addr(),
		"max_concurrent: 256", "max_concurrent: 100000\n    max_concurrent_per_caller: 100000",
		"timeout: 500ms", "timeout: 60s",
		"timeout: 800ms", "timeout: 60s",
	).Replace(string(examples.Policy()))
	core := newTestCore(b, doc, Options{Registry: prometheus.NewRegistry()})
	h := agentHandler(core)
	body := []byte(`{"q":"go","limit":5}`)
	ctx := context.WithValue(context.Background(), http.LocalAddrContextKey, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080})

	bare, _ := inUse()
	park := make(chan struct{})
	var parked sync.WaitGroup
	for range calls {
		parked.Add(1)
		go func() { defer parked.Done(); <-park }()
	}
	bareNow, _ := inUse()
	bareKiB := float64(bareNow-bare) / calls / 1024
	close(park)
	parked.Wait()

	var perCall, stackPerCall float64
	for b.Loop() {
		before, stackBefore := inUse()
		var done sync.WaitGroup
		for range calls {
			done.Add(1)
			go func() {
				defer done.Done()
				req := httptest.NewRequestWithContext(ctx, http.MethodPost, "http://127.0.0.1:8080/v1/tools/search_articles", bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				if w.Code != http.StatusOK {
					b.Errorf("HTTP %d: %s", w.Code, w.Body)
				}
			}()
		}
		backend.wait(calls)
		after, stackAfter := inUse()
		perCall = float64(after-before) / calls / 1024
		stackPerCall = float64(stackAfter-stackBefore) / calls / 1024
		backend.release()
		done.Wait()
	}
	b.ReportMetric(perCall, "KiB/call")
	b.ReportMetric(stackPerCall, "stack_KiB/call")
	b.ReportMetric(bareKiB, "KiB/bare_goroutine")
}

// inUse is the heap and stack memory in use, and the stacks alone, after
// two collections: the second empties the pools' victim caches, so what a
// wave takes from the pools the wave before filled counts as its own.
func inUse() (total, stacks int64) {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse + m.StackInuse), int64(m.StackInuse)
}

// holdingBackend accepts connections and reads each request's header in
// one goroutine, then answers them all at once when released.
type holdingBackend struct {
	ln      net.Listener
	mu      sync.Mutex
	cond    *sync.Cond
	held    []net.Conn
	answer  []byte
	scratch *bufio.Reader
}

func newHoldingBackend(b *testing.B) *holdingBackend {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	rec := httptest.NewRecorder()
	examples.NewSearchBackend(examples.SearchOptions{}).ServeHTTP(rec, httptest.NewRequest("GET", "/api/search?q=go&limit=5", nil))
	answer := "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: " +
		itoa(rec.Body.Len()) + "\r\n\r\n" + rec.Body.String()
	hb := &holdingBackend{ln: ln, answer: []byte(answer), scratch: bufio.NewReaderSize(nil, 4096)}
	hb.cond = sync.NewCond(&hb.mu)
	b.Cleanup(func() { ln.Close(); hb.release() })
	go hb.serve()
	return hb
}

func (hb *holdingBackend) addr() string { return hb.ln.Addr().String() }

func (hb *holdingBackend) serve() {
	for {
		c, err := hb.ln.Accept()
		if err != nil {
			return
		}
		// The request's header, read through one shared buffer.
		hb.scratch.Reset(c)
		for {
			line, err := hb.scratch.ReadSlice('\n')
			if err != nil || len(line) <= 2 {
				break
			}
		}
		_, _ = io.CopyN(io.Discard, hb.scratch, int64(hb.scratch.Buffered()))
		hb.mu.Lock()
		hb.held = append(hb.held, c)
		hb.cond.Broadcast()
		hb.mu.Unlock()
	}
}

// wait returns once n calls are held.
func (hb *holdingBackend) wait(n int) {
	hb.mu.Lock()
	for len(hb.held) < n {
		hb.cond.Wait()
	}
	hb.mu.Unlock()
}

// release answers and closes every held call.
func (hb *holdingBackend) release() {
	hb.mu.Lock()
	held := hb.held
	hb.held = nil
	hb.mu.Unlock()
	for _, c := range held {
		_, _ = c.Write(hb.answer)
		_ = c.Close()
	}
}
