package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"

	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/proxy"
	"github.com/toolgate/toolgate/proxy/extproc"
)

// extprocOptions are the flags of `toolgate extproc`.
type extprocOptions struct {
	daemonFlags
	listen string
	admin  string
}

// maxProcessingMessage bounds one ext_proc message: Envoy sends a buffered
// body whole, up to its own buffer limit (1 MiB by default).
const maxProcessingMessage = 16 << 20

func runExtproc(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("extproc", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var opts extprocOptions
	opts.register(fs, "/readyz and gRPC health failing, so Envoy moves away", "streams in flight")
	fs.StringVar(&opts.listen, "listen", ":9002", "gRPC address of the external processor (envoy.service.ext_proc.v3)")
	fs.StringVar(&opts.admin, "admin", "", "admin address (/metrics, /healthz, /readyz, /-/reload, /v1/config); default: the policy's server.admin_listen")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	logger, sink, ok := opts.check("extproc", stderr)
	if !ok {
		return 2
	}
	defer sink.Close()
	watcher := opts.startWatcher(logger)
	if watcher != nil {
		defer watcher.Close()
	}
	load := extprocLoader(opts.configPath)
	snap, err := load()
	if err != nil {
		printLoadError(stderr, err)
		return 1
	}
	srv, err := newServer(snap, load, logger)
	if err != nil {
		fmt.Fprintf(stderr, "toolgate: %v\n", err)
		return 1
	}
	ep, err := listenExtproc(srv, opts)
	if err != nil {
		srv.core.Close()
		fmt.Fprintf(stderr, "toolgate: %v\n", err)
		return 1
	}
	ctx, stop := handleSignals(srv, watcher)
	defer stop()
	logger.Info("toolgate extproc started", "version", version, "listen", ep.addr(), "admin", ep.adminAddr(),
		"tools", len(snap.Tools), "checksum", snap.Checksum, "watch", watcher != nil)
	if err := ep.serve(ctx, opts.drainDelay, opts.grace); err != nil {
		logger.Error("toolgate extproc stopped with an error", "err", err.Error())
		return 1
	}
	logger.Info("toolgate extproc stopped")
	return 0
}

// extprocLoader loads the policy once its files have settled and refuses
// ambiguous routes: under ext_proc every call is identified by its route,
// whether or not the policy runs transparent mode (which refuses them at
// load already).
func extprocLoader(path string) func() (*policy.Snapshot, error) {
	return newPolicyLoader(path, func(snap *policy.Snapshot) error {
		if conflicts := proxy.RouteConflicts(snap); len(conflicts) > 0 {
			return fmt.Errorf("ambiguous routes (a request could be a call of either tool): %s", strings.Join(conflicts, "; "))
		}
		return nil
	}).load
}

// extprocServer is the external processor's gRPC server beside the admin
// server of a server (whose agent port it does not open).
type extprocServer struct {
	srv       *server
	grpc      *grpc.Server
	health    *health.Server
	ln        net.Listener
	adminLn   net.Listener
	done      chan error
	adminDone chan error
}

func listenExtproc(srv *server, opts extprocOptions) (*extprocServer, error) {
	adminAddr := opts.admin
	if adminAddr == "" {
		adminAddr = srv.core.Snapshot().Server.AdminListen
	}
	bounds := srv.core.Snapshot().Server
	// Envoy keeps a few long-lived connections; the bound is for anything
	// else that reaches the port.
	ln, err := listenLimited(opts.listen, bounds.MaxConnections)
	if err != nil {
		return nil, fmt.Errorf("ext_proc listener: %w", err)
	}
	adminLn, err := listenAdmin(adminAddr)
	if err != nil {
		ln.Close()
		return nil, err
	}
	g := grpc.NewServer(
		grpc.MaxRecvMsgSize(maxProcessingMessage),
		// A connection must finish its handshake (HTTP/2 preface and
		// settings) within the read timeout.
		grpc.ConnectionTimeout(bounds.ReadTimeout),
		// Stop waits for the streams it cuts off to end their calls.
		grpc.WaitForHandlers(true),
		// Envoy may ping idle connections to the processor cluster; a
		// strict default policy would close them.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
	)
	extproc.New(srv.core, extproc.Options{Logger: srv.logger}).Register(g)
	// Envoy's gRPC health checks on the processor cluster.
	hs := health.NewServer()
	healthpb.RegisterHealthServer(g, hs)
	ep := &extprocServer{srv: srv, grpc: g, health: hs, ln: ln, adminLn: adminLn, done: make(chan error, 1), adminDone: make(chan error, 1)}
	go func() { ep.done <- g.Serve(ln) }()
	go func() { ep.adminDone <- srv.admin.Serve(adminLn) }()
	return ep, nil
}

func (ep *extprocServer) addr() string      { return ep.ln.Addr().String() }
func (ep *extprocServer) adminAddr() string { return ep.adminLn.Addr().String() }

// serve runs until ctx ends, then shuts down gracefully: /readyz and the
// gRPC health check fail at once, streams keep being served for
// drainDelay, then no new stream is accepted and those in flight have
// grace to finish. A stream cut off after that ends its call as abandoned.
func (ep *extprocServer) serve(ctx context.Context, drainDelay, grace time.Duration) error {
	var serveErr error
	select {
	case err := <-ep.done:
		serveErr = fmt.Errorf("ext_proc server: %w", err)
	case err := <-ep.adminDone:
		serveErr = fmt.Errorf("admin server: %w", err)
	case <-ctx.Done():
	}
	ep.srv.draining.Store(true)
	ep.health.Shutdown()
	if serveErr == nil && drainDelay > 0 {
		ep.srv.logger.Info("shutting down: draining", "drain_delay", drainDelay.String(), "grace", grace.String())
		time.Sleep(drainDelay)
	}
	stopped := make(chan struct{})
	go func() {
		ep.grpc.GracefulStop()
		close(stopped)
	}()
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-stopped:
	case <-timer.C:
		ep.grpc.Stop()
		<-stopped
		if serveErr == nil {
			serveErr = errors.New("streams still open after the grace period")
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = ep.srv.admin.Shutdown(sctx)
	ep.srv.core.Close()
	return serveErr
}
