package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"

	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/proxy"
	"github.com/toolgate/toolgate/proxy/mcpfront"
)

// runServe is `toolgate serve`: the proxy, until SIGTERM.
func runServe(args []string, stdout, stderr io.Writer) int {
	opts := daemonFlags{
		listenHelp: "agent address: tool calls, MCP, transparent routes (default: the policy's server.listen)",
		drainWhat:  "/readyz failing, so endpoints are updated",
		graceWhat:  "calls in flight",
	}
	return opts.parseAndRun("serve", "toolgate", newAgentFront, args, stderr)
}

// agentFront is the agent port of `toolgate serve`: the tool endpoint,
// MCP and transparent routes over HTTP, bounded as bounds.go says.
type agentFront struct {
	srv *http.Server
	// cancelCalls cancels the context of every agent request: the end of
	// the grace period.
	cancelCalls context.CancelFunc
}

func newAgentFront(core *proxy.Core, s policy.Server, logger *slog.Logger) front {
	calls, cancel := context.WithCancel(context.Background())
	srv := newAgentServer(core.Handler(mcpfront.Front(core, mcpfront.Options{})), s, logger)
	srv.BaseContext = func(net.Listener) context.Context { return calls }
	return &agentFront{srv: srv, cancelCalls: cancel}
}

func (f *agentFront) kind() string { return "agent" }

func (f *agentFront) serve(ln net.Listener) error { return f.srv.Serve(ln) }

// drain turns keep-alives off: every answer carries Connection: close, so
// clients reconnect, to another instance once the endpoints are updated.
func (f *agentFront) drain() { f.srv.SetKeepAlivesEnabled(false) }

func (f *agentFront) stop(ctx context.Context) error {
	err := f.srv.Shutdown(ctx)
	if err == nil {
		f.cancelCalls() // no call is left to cancel
	}
	return err
}

func (f *agentFront) cutOff(ctx context.Context) error {
	f.cancelCalls()
	if err := f.srv.Shutdown(ctx); err != nil {
		f.srv.Close()
		return err
	}
	return nil
}
