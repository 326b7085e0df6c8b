package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"

	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/proxy"
	"github.com/toolgate/toolgate/proxy/extproc"
)

// maxProcessingMessage bounds one ext_proc message: Envoy sends a buffered
// body whole, up to its own buffer limit (1 MiB by default).
const maxProcessingMessage = 16 << 20

// runExtproc is `toolgate extproc`: the Envoy external processor, until
// SIGTERM. It loads the policy as `toolgate check -extproc` checks it:
// every call is identified by its route, so ambiguous routes are refused.
func runExtproc(args []string, stdout, stderr io.Writer) int {
	opts := daemonFlags{
		listenDefault: ":9002",
		listenHelp:    "gRPC address of the external processor (envoy.service.ext_proc.v3), in place of the policy's server.listen",
		drainWhat:     "/readyz and gRPC health failing, so Envoy moves away",
		graceWhat:     "streams in flight",
		byRoute:       true,
	}
	return opts.parseAndRun("extproc", "toolgate extproc", newExtprocFront, args, stderr)
}

// extprocFront is the external processor's gRPC server, with the gRPC
// health service Envoy checks the processor cluster with.
type extprocFront struct {
	grpc    *grpc.Server
	health  *health.Server
	stopped chan struct{} // closed when GracefulStop or Stop has returned
}

func newExtprocFront(core *proxy.Core, s policy.Server, logger *slog.Logger) front {
	g := grpc.NewServer(
		grpc.MaxRecvMsgSize(maxProcessingMessage),
		// A connection must finish its handshake (HTTP/2 preface and
		// settings) within the read timeout.
		grpc.ConnectionTimeout(s.ReadTimeout),
		// Stop waits for the streams it cuts off to end their calls.
		grpc.WaitForHandlers(true),
		// Envoy may ping idle connections to the processor cluster; a
		// strict default policy would close them.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
	)
	extproc.New(core, extproc.Options{Logger: logger}).Register(g)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(g, hs)
	return &extprocFront{grpc: g, health: hs, stopped: make(chan struct{})}
}

func (f *extprocFront) kind() string { return "ext_proc" }

// serve serves streams on ln. Envoy keeps a few long-lived connections;
// the listener's bound (server.max_connections) is for anything else that
// reaches the port.
func (f *extprocFront) serve(ln net.Listener) error { return f.grpc.Serve(ln) }

// drain makes the gRPC health check answer NOT_SERVING.
func (f *extprocFront) drain() { f.health.Shutdown() }

// stop stops accepting streams and waits for those in flight.
func (f *extprocFront) stop(ctx context.Context) error {
	go func() {
		f.grpc.GracefulStop()
		close(f.stopped)
	}()
	select {
	case <-f.stopped:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// cutOff cancels the streams still open; each ends its call as abandoned
// (see extproc.Server) before Stop returns.
func (f *extprocFront) cutOff(ctx context.Context) error {
	go f.grpc.Stop() // GracefulStop, still waiting, returns with it
	select {
	case <-f.stopped:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
