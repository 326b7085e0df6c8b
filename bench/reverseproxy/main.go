// Command reverseproxy is the "plain Go reverse proxy" of the load
// benchmark (bench/run.sh): net/http/httputil.ReverseProxy in front of one
// upstream, with the transport tuned the way a careful operator would tune
// it, and nothing else. toolgate's goal is to cost no more CPU per request
// than this while doing its whole job.
//
//	reverseproxy -listen 127.0.0.1:8101 -upstream http://127.0.0.1:7001
//
// Tuning: pooled 32 KiB copy buffers (a BufferPool over sync.Pool; without
// one, httputil allocates a fresh 32 KiB buffer per request), keep-alives
// on, enough idle connections per host that no connection is closed and
// reopened even at the 10,000 concurrent calls of bench/inflight, HTTP/1.1 to the upstream (as nginx
// and toolgate use), no compression negotiation, and no access log.
//
// -buffer-pool=false leaves the BufferPool out: the baseline of issue 8,
// kept selectable so that one run can show both (variant httputil-nopool).
// -pprof ADDR serves net/http/pprof on ADDR, for the profile bench/run.sh
// takes of this proxy next to toolgate's.
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/http/pprof"
	"net/url"
	"os"
	"sync"
	"time"

	"github.com/toolgate/toolgate/bench/internal/benchserve"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:8101", "address to accept requests on")
	upstream := flag.String("upstream", "http://127.0.0.1:7001", "base URL requests are forwarded to")
	bufferPool := flag.Bool("buffer-pool", true, "copy bodies through pooled 32 KiB buffers (false: a new buffer per request)")
	pprofAddr := flag.String("pprof", "", "serve net/http/pprof on this address (empty: off)")
	flag.Parse()
	if *pprofAddr != "" {
		go servePprof(*pprofAddr)
	}
	if err := run(*listen, *upstream, *bufferPool); err != nil {
		fmt.Fprintln(os.Stderr, "reverseproxy:", err)
		os.Exit(1)
	}
}

// bufferPool hands out 32 KiB copy buffers from a sync.Pool, the size
// httputil uses when it has no pool.
type bufferPool struct{ pool sync.Pool }

const bufferSize = 32 << 10

func (p *bufferPool) Get() []byte {
	if b, ok := p.pool.Get().(*[]byte); ok {
		return *b
	}
	return make([]byte, bufferSize)
}

func (p *bufferPool) Put(b []byte) {
	if cap(b) != bufferSize {
		return
	}
	b = b[:bufferSize]
	p.pool.Put(&b)
}

// servePprof serves the profiling endpoints on their own listener, so the
// proxy's handler stays the plain ReverseProxy.
func servePprof(addr string) {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	if err := srv.ListenAndServe(); err != nil {
		fmt.Fprintln(os.Stderr, "reverseproxy: pprof:", err)
	}
}

func run(addr, upstream string, pooled bool) error {
	target, err := url.Parse(upstream)
	if err != nil {
		return fmt.Errorf("bad -upstream: %w", err)
	}
	if target.Scheme == "" || target.Host == "" {
		return fmt.Errorf("bad -upstream %q: want scheme://host:port", upstream)
	}
	transport := &http.Transport{
		Proxy: nil, // never an environment proxy: the benchmark is loopback only
		DialContext: (&net.Dialer{
			Timeout:   5 * time.Second,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		MaxIdleConns:          0, // no limit across hosts; one host anyway
		MaxIdleConnsPerHost:   16 << 10,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: 10 * time.Second,
		DisableCompression:    true,
		ForceAttemptHTTP2:     false,
	}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			// No X-Forwarded-* headers: the nginx of the benchmark adds
			// none either, so both hops do the same work.
			pr.SetURL(target)
		},
		Transport: transport,
		ErrorLog:  log.New(os.Stderr, "reverseproxy: ", 0),
	}
	if pooled {
		proxy.BufferPool = &bufferPool{}
	}
	return benchserve.Run(addr, proxy)
}
