// Command inflight puts N calls in flight at once against one URL and
// reports what that costs the process serving them, for bench/run.sh's
// in-flight test: the backend (bench/backend -delay 200ms) holds every call,
// so all N are open in the proxy together.
//
//	inflight -url http://127.0.0.1:8080/v1/tools/search_articles \
//	  -body '{"q":"go","limit":5}' -n 10000 -waves 3 -pid 1234 \
//	  -held http://127.0.0.1:7001/bench/inflight
//
// Each wave starts N calls together, each on its own keep-alive connection,
// and waits for all of them. The first wave opens the connections (on a
// loopback listener with a 4,096-connection accept queue some connects
// wait for a SYN retry, so at most 256 connects are under way at once) and
// only counts errors; the others are measured.
// While a wave runs, the resident memory (VmRSS) of -pid is sampled every
// 5 ms. Latency runs from just before the request is written to the answer
// read whole.
//
// It prints one line:
//
//	INFLIGHT n=… waves=… warm_errors=… errors=… p50_ms=… p99_ms=… max_ms=…
//	wave_ms=… held_max=… rss_start_kib=… rss_peak_kib=… rss_idle_kib=…
//	per_call_kib=…
//
// errors counts transport errors, non-2xx answers and answers without
// -want; held_max is the most calls -held saw held at once in a measured
// wave; per_call_kib is (rss_peak − rss_start) / N: the memory an in-flight
// call costs, its connection included. rss_idle is the RSS after the last
// wave, with the connections open and idle.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

type options struct {
	url, body, want, held, contentType string
	headers                            headerList
	n, waves, pid                      int
	timeout                            time.Duration
}

func main() {
	var o options
	flag.StringVar(&o.url, "url", "", "URL to call")
	flag.StringVar(&o.body, "body", "", "POST this body (empty: GET)")
	flag.StringVar(&o.contentType, "content-type", "application/json", "Content-Type of -body")
	flag.StringVar(&o.want, "want", "", "an answer must contain this to count as a success")
	flag.StringVar(&o.held, "held", "", "the backend's GET /bench/inflight URL (empty: not asked)")
	flag.Var(&o.headers, "header", "send this header line too (Name: value); repeatable")
	flag.IntVar(&o.n, "n", 10000, "calls in flight at once")
	flag.IntVar(&o.waves, "waves", 3, "waves of N calls; the first only opens the connections")
	flag.IntVar(&o.pid, "pid", 0, "process whose resident memory to sample (0: none)")
	flag.DurationVar(&o.timeout, "timeout", 30*time.Second, "deadline of one call")
	flag.Parse()
	if o.url == "" || o.n < 1 || o.waves < 2 {
		fmt.Fprintln(os.Stderr, "inflight: need -url, -n ≥ 1 and -waves ≥ 2")
		os.Exit(2)
	}
	line, err := run(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "inflight:", err)
		os.Exit(1)
	}
	fmt.Println(line)
}

// headerList collects repeated -header flags.
type headerList []string

func (h *headerList) String() string     { return strings.Join(*h, ", ") }
func (h *headerList) Set(v string) error { *h = append(*h, v); return nil }

// wave is what one wave of calls measured.
type wave struct {
	latencies []time.Duration
	errors    int
	firstErr  string
	wall      time.Duration
	rssPeak   int64
}

func run(o options) (string, error) {
	target, err := url.Parse(o.url)
	if err != nil || target.Scheme != "http" || target.Host == "" {
		return "", fmt.Errorf("bad -url %q: want http://host:port/path", o.url)
	}
	request := rawRequest(target, o)
	rssStart, err := rss(o.pid)
	if err != nil {
		return "", err
	}
	conns := make([]*conn, o.n)
	for i := range conns {
		conns[i] = &conn{addr: target.Host}
	}
	defer func() {
		for _, c := range conns {
			c.close()
		}
	}()
	warm := callWave(conns, request, o)
	if _, err := heldMax(o.held); err != nil { // reset the backend's maximum
		return "", err
	}
	var measured []wave
	var held int64
	for range o.waves - 1 {
		w := callWave(conns, request, o)
		measured = append(measured, w)
		h, err := heldMax(o.held)
		if err != nil {
			return "", err
		}
		held = max(held, h)
	}
	rssIdle, err := rss(o.pid)
	if err != nil {
		return "", err
	}
	var all []time.Duration
	var errs int
	var wall time.Duration
	var peak int64
	firstErr := warm.firstErr
	for _, w := range measured {
		all = append(all, w.latencies...)
		errs += w.errors
		wall = max(wall, w.wall)
		peak = max(peak, w.rssPeak)
		if firstErr == "" {
			firstErr = w.firstErr
		}
	}
	if firstErr != "" {
		fmt.Fprintln(os.Stderr, "inflight: first error:", firstErr)
	}
	slices.Sort(all)
	perCall := 0.0
	if o.pid != 0 {
		perCall = float64(peak-rssStart) / float64(o.n)
	}
	return fmt.Sprintf("INFLIGHT n=%d waves=%d warm_errors=%d errors=%d p50_ms=%.1f p99_ms=%.1f max_ms=%.1f wave_ms=%.0f held_max=%d rss_start_kib=%d rss_peak_kib=%d rss_idle_kib=%d per_call_kib=%.1f",
		o.n, len(measured), warm.errors, errs, ms(percentile(all, 50)), ms(percentile(all, 99)), ms(percentile(all, 100)),
		ms(wall), held, rssStart, peak, rssIdle, perCall), nil
}

// rawRequest is the bytes of the one request every call sends.
func rawRequest(target *url.URL, o options) []byte {
	var b bytes.Buffer
	method := http.MethodGet
	if o.body != "" {
		method = http.MethodPost
	}
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: %s\r\n", method, target.RequestURI(), target.Host)
	if o.body != "" {
		fmt.Fprintf(&b, "Content-Type: %s\r\nContent-Length: %d\r\n", o.contentType, len(o.body))
	}
	for _, h := range o.headers {
		fmt.Fprintf(&b, "%s\r\n", h)
	}
	b.WriteString("\r\n")
	b.WriteString(o.body)
	return b.Bytes()
}

// conn is one keep-alive connection, opened on its first call and again
// after an error. The generator writes the request bytes itself and reads
// the answer with net/http's parser: far cheaper per call than an
// http.Client, whose two goroutines per connection would make the
// generator, not the proxy, the slow part of a wave.
type conn struct {
	addr string
	c    net.Conn
	r    *bufio.Reader
}

func (c *conn) close() {
	if c.c != nil {
		c.c.Close()
		c.c = nil
	}
}

// dials bounds the connects in flight, so the listener's accept queue does
// not overflow into SYN retries.
var dials = make(chan struct{}, 256)

// call makes one call and returns the time from just before the request
// is written to the answer read whole.
func (c *conn) call(request []byte, o options) (time.Duration, error) {
	if c.c == nil {
		dials <- struct{}{}
		nc, err := net.DialTimeout("tcp", c.addr, o.timeout)
		<-dials
		if err != nil {
			return 0, err
		}
		c.c, c.r = nc, bufio.NewReaderSize(nc, 4096)
	}
	began := time.Now()
	_ = c.c.SetDeadline(began.Add(o.timeout))
	d, err := c.roundTrip(request, o)
	if err != nil {
		c.close()
		return 0, err
	}
	return d - time.Duration(began.UnixNano()), nil
}

// roundTrip writes the request and reads the answer, and returns the
// UnixNano time it was read.
func (c *conn) roundTrip(request []byte, o options) (time.Duration, error) {
	if _, err := c.c.Write(request); err != nil {
		return 0, err
	}
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		return 0, err
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	done := time.Duration(time.Now().UnixNano())
	switch {
	case err != nil:
		return 0, err
	case resp.StatusCode/100 != 2:
		return 0, fmt.Errorf("status %d: %.200s", resp.StatusCode, got)
	case o.want != "" && !bytes.Contains(got, []byte(o.want)):
		return 0, fmt.Errorf("answer without %q: %.200s", o.want, got)
	case resp.Close:
		c.close()
	}
	return done, nil
}

// callWave makes one call on every connection, all started together, and
// waits for all of them, sampling the RSS of o.pid meanwhile.
func callWave(conns []*conn, request []byte, o options) wave {
	var (
		w       wave
		mu      sync.Mutex
		ready   sync.WaitGroup
		done    sync.WaitGroup
		start   = make(chan struct{})
		stop    = make(chan struct{})
		sampled = make(chan int64)
	)
	w.latencies = make([]time.Duration, 0, len(conns))
	for _, c := range conns {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			ready.Done()
			<-start
			d, err := c.call(request, o)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				w.errors++
				if w.firstErr == "" {
					w.firstErr = err.Error()
				}
				return
			}
			w.latencies = append(w.latencies, d)
		}()
	}
	ready.Wait()
	go func() {
		var peak int64
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			if r, err := rss(o.pid); err == nil {
				peak = max(peak, r)
			}
			select {
			case <-stop:
				sampled <- peak
				return
			case <-t.C:
			}
		}
	}()
	began := time.Now()
	close(start)
	done.Wait()
	w.wall = time.Since(began)
	close(stop)
	w.rssPeak = <-sampled
	return w
}

// heldMax asks the backend for the most calls it held at once since the
// last time, and resets that.
func heldMax(url string) (int64, error) {
	if url == "" {
		return 0, nil
	}
	resp, err := http.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var v struct{ Max int64 }
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return 0, fmt.Errorf("%s: %w", url, err)
	}
	return v.Max, nil
}

// rss is the VmRSS of pid in KiB (0 for pid 0).
func rss(pid int) (int64, error) {
	if pid == 0 {
		return 0, nil
	}
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "VmRSS:"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		}
	}
	return 0, fmt.Errorf("no VmRSS for pid %d", pid)
}

// percentile is the p-th percentile (nearest rank) of sorted durations.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p/100+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
