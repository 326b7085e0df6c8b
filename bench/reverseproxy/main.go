// Command reverseproxy is the "plain Go reverse proxy" of the load
// benchmark (bench/run.sh): net/http/httputil.ReverseProxy in front of one
// upstream, with the transport tuned the way a careful operator would tune
// it, and nothing else. toolgate's goal is to cost no more CPU per request
// than this while doing its whole job.
//
//	reverseproxy -listen 127.0.0.1:8101 -upstream http://127.0.0.1:7001
//
// Tuning: keep-alives on, enough idle connections per host that no
// connection is closed and reopened at 32 concurrent requests, HTTP/1.1 to
// the upstream (as nginx and toolgate use), no compression negotiation, and
// no access log.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:8101", "address to accept requests on")
	upstream := flag.String("upstream", "http://127.0.0.1:7001", "base URL requests are forwarded to")
	flag.Parse()
	if err := run(*listen, *upstream); err != nil {
		fmt.Fprintln(os.Stderr, "reverseproxy:", err)
		os.Exit(1)
	}
}

func run(addr, upstream string) error {
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
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   1024,
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
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           proxy,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       120 * time.Second,
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}
