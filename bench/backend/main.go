// Command backend serves the bundled legacy search API
// (examples.NewSearchBackend) on one address, for bench/run.sh. It is the
// upstream every variant of the load benchmark calls, and the "direct"
// variant's target.
//
//	backend -listen 127.0.0.1:7001
//
// It logs nothing per request, so that its own cost stays the same whatever
// proxy sits in front of it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/toolgate/toolgate/examples"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:7001", "address to serve the search API on")
	flag.Parse()
	if err := run(*listen); err != nil {
		fmt.Fprintln(os.Stderr, "backend:", err)
		os.Exit(1)
	}
}

func run(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           examples.NewSearchBackend(examples.SearchOptions{}),
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
