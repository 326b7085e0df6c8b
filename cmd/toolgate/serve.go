package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/proxy"
)

// runServe is `toolgate serve`: the proxy, until SIGTERM.
func runServe(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var opts daemonFlags
	opts.register(fs, "/readyz failing, so endpoints are updated", "calls in flight")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	logger, sink, ok := opts.check("serve", stderr)
	if !ok {
		return 2
	}
	defer sink.Close()
	watcher := opts.startWatcher(logger)
	load := newPolicyLoader(opts.configPath, nil).load
	snap, err := load()
	if err != nil {
		printLoadError(stderr, err)
	} else {
		srv, err := newServer(snap, load, logger)
		if err == nil {
			return serveSignals(srv, watcher, opts, logger, stderr)
		}
		fmt.Fprintf(stderr, "toolgate: %v\n", err)
	}
	if watcher != nil {
		watcher.Close()
	}
	return 1
}

// handleSignals returns a context that ends on SIGTERM or SIGINT (once it
// has, a second signal ends the process at once), and reloads srv on SIGHUP
// and, with a watcher, on file changes, until stop is called.
func handleSignals(srv *server, watcher *policyWatcher) (ctx context.Context, stop func()) {
	ctx, stopNotify := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-ctx.Done()
		stopNotify()
	}()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				_ = srv.reload()
			}
		}
	}()
	if watcher != nil {
		go watcher.run(ctx, func() { _ = srv.reload() })
	}
	return ctx, func() {
		signal.Stop(hup)
		stopNotify()
	}
}

// serveSignals runs srv until SIGTERM or SIGINT, reloading on SIGHUP and,
// with a watcher, on file changes. It returns the exit code.
func serveSignals(srv *server, watcher *policyWatcher, opts daemonFlags, logger *slog.Logger, stderr io.Writer) int {
	ctx, stop := handleSignals(srv, watcher)
	defer stop()
	if err := srv.listen(); err != nil {
		fmt.Fprintf(stderr, "toolgate: %v\n", err)
		return 1
	}
	snap := srv.core.Snapshot()
	logger.Info("toolgate started", "version", version, "listen", srv.agentAddr(), "admin", srv.adminAddr(),
		"tools", len(snap.Tools), "checksum", snap.Checksum, "watch", watcher != nil)
	if err := srv.serve(ctx, opts.drainDelay, opts.grace); err != nil {
		logger.Error("toolgate stopped with an error", "err", err.Error())
		return 1
	}
	logger.Info("toolgate stopped")
	return 0
}

// server wires a core to its two listeners and its reload loop.
type server struct {
	core     *proxy.Core
	registry *prometheus.Registry
	logger   *slog.Logger
	load     func() (*policy.Snapshot, error)

	reloadMu sync.Mutex
	// reloadFailed: the last reload failed (guarded by reloadMu), so the
	// next good one is a recovery, logged as such.
	reloadFailed bool
	loaded       atomic.Pointer[loaded]
	draining     atomic.Bool
	// storeProbe checks, for /readyz, that the state store accepts writes.
	storeProbe *proxy.StoreProbe

	agent, admin         *http.Server
	agentLn, adminLn     net.Listener
	agentDone, adminDone chan error
	// cancelCalls cancels the context of every agent request: the end of
	// the grace period.
	cancelCalls context.CancelFunc
	// tracer exports spans when server.tracing is set; nil otherwise.
	tracer *sdktrace.TracerProvider
}

// loaded is the policy new calls run on and its generation, read together
// by GET /v1/config.
type loaded struct {
	generation int64
	snap       *policy.Snapshot
}

// cutoffWait is how long calls cancelled at the end of the grace period
// have to write their envelope and settle their idempotency record (a
// store write is bounded by 2s in the core) before connections are closed.
const cutoffWait = 3 * time.Second

// storeProbeInterval is how often, at most, /readyz writes to the state
// store to see whether it accepts writes.
const storeProbeInterval = 2 * time.Second

func newServer(snap *policy.Snapshot, load func() (*policy.Snapshot, error), logger *slog.Logger) (*server, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	opts := proxy.Options{Registry: reg, Logger: logger, Version: version}
	if snap.State.Backend == policy.BackendRedis {
		if err := newRedisState(snap.State, &opts); err != nil {
			return nil, err
		}
	}
	tp, err := newTracerProvider(context.Background(), snap.Server.Tracing)
	if err != nil {
		return nil, err
	}
	if tp != nil {
		opts.TracerProvider = tp
	}
	core, err := proxy.NewCore(snap, opts)
	if err != nil {
		return nil, err
	}
	s := &server{core: core, registry: reg, logger: logger, load: load, tracer: tp,
		storeProbe: proxy.NewStoreProbe(core.Ping, storeProbeInterval)}
	s.loaded.Store(&loaded{generation: 1, snap: snap})
	m := core.Metrics()
	m.ConfigGeneration.Set(1)
	m.ConfigLastReloadOK.Set(1)
	calls, cancel := context.WithCancel(context.Background())
	s.cancelCalls = cancel
	s.agent = newAgentServer(core.Handler(), snap.Server, logger)
	s.agent.BaseContext = func(net.Listener) context.Context { return calls }
	s.admin = newAdminServer(proxy.AdminHandler(proxy.AdminOptions{
		Gatherer: reg,
		Ready:    s.ready,
		Reload:   s.reload,
		Config:   s.configInfo,
	}), logger)
	return s, nil
}

// reload builds the new snapshot completely, then swaps it; on any error
// the last good policy stays. Every trigger ends here: a file change,
// SIGHUP and POST /-/reload.
func (s *server) reload() error {
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	m := s.core.Metrics()
	if s.load == nil {
		return errors.New("this instance has no policy file to reload")
	}
	cur := s.loaded.Load()
	snap, err := s.load()
	if err == nil {
		err = s.swap(cur.snap, snap)
	}
	if err != nil {
		s.reloadFailed = true
		m.ConfigReloads.WithLabelValues("failure").Inc()
		m.ConfigLastReloadOK.Set(0)
		s.logger.Error("policy reload failed; keeping the last good policy", "errors", errorLines(err))
		return err
	}
	recovered := s.reloadFailed
	s.reloadFailed = false
	m.ConfigReloads.WithLabelValues("success").Inc()
	m.ConfigLastReloadOK.Set(1)
	if snap.Checksum == cur.snap.Checksum {
		if recovered {
			s.logger.Info("policy reload recovered; the policy files are valid again and unchanged from the running policy",
				"generation", cur.generation, "checksum", snap.Checksum)
		} else {
			s.logger.Debug("policy unchanged", "generation", cur.generation, "checksum", snap.Checksum)
		}
		return nil
	}
	// Published last, so whoever sees the new generation also sees the
	// metrics of the reload that made it.
	gen := cur.generation + 1
	m.ConfigGeneration.Set(float64(gen))
	s.loaded.Store(&loaded{generation: gen, snap: snap})
	s.logger.Info("policy reloaded", "generation", gen, "checksum", snap.Checksum, "tools", len(snap.Tools), "recovered", recovered)
	return nil
}

// swap makes snap the policy for new calls, unless its checksum is the
// current one: spurious file events then cost nothing, and the generation
// counts real changes only.
func (s *server) swap(old, snap *policy.Snapshot) error {
	if snap.Checksum == old.Checksum {
		return nil
	}
	if snap.State != old.State {
		return errors.New("state: the state store cannot change on reload; restart toolgate to apply it")
	}
	if key := listenerChange(old.Server, snap.Server); key != "" {
		return fmt.Errorf("server.%s cannot change on reload; restart toolgate to apply it", key)
	}
	if !snap.Server.Tracing.Equal(old.Server.Tracing) {
		return errors.New("server.tracing cannot change on reload; restart toolgate to apply it")
	}
	if why := snap.Access.WidensImplicitly(&old.Access); why != "" {
		// A file cut before its access section (or its default) reads as
		// "allow everyone": refused, whatever wrote it. Opening access is
		// one explicit line, or a restart.
		return fmt.Errorf("access: reload refused: %s (a file still being written?); to open access on purpose, set access.default: allow", why)
	}
	if !hasAccess(snap.Access) && hasAccess(old.Access) {
		s.logger.Warn("the new policy has no access section; the running one had one", "checksum", snap.Checksum)
	}
	return s.core.Swap(snap)
}

// hasAccess says a policy has an access section that says anything.
func hasAccess(a policy.Access) bool {
	return a.DefaultSet || len(a.Callers) > 0 || len(a.Identities) > 0
}

// listenerChange names the first server setting of the listeners that
// differs between two policies, or returns "": the listeners and their
// servers are built once, at start.
func listenerChange(old, cur policy.Server) string {
	switch {
	case old.Listen != cur.Listen:
		return "listen"
	case old.AdminListen != cur.AdminListen:
		return "admin_listen"
	case old.MaxConnections != cur.MaxConnections:
		return "max_connections"
	case old.ReadTimeout != cur.ReadTimeout:
		return "read_timeout"
	case old.WriteTimeout != cur.WriteTimeout:
		return "write_timeout"
	case old.IdleTimeout != cur.IdleTimeout:
		return "idle_timeout"
	}
	return ""
}

// errorLines lists a policy error one problem per line, each starting with
// file:line:col.
func errorLines(err error) []string {
	var errs config.Errors
	if !errors.As(err, &errs) {
		return []string{err.Error()}
	}
	lines := make([]string, len(errs))
	for i, e := range errs {
		lines[i] = e.Error()
	}
	return lines
}

// ready is /readyz: not draining, and the state store accepts writes (a
// Redis out of memory or turned read-only fails every side-effecting call,
// so the instance should not get traffic).
func (s *server) ready(ctx context.Context) error {
	if s.draining.Load() {
		return errors.New("shutting down")
	}
	if err := s.storeProbe.Check(ctx); err != nil {
		return fmt.Errorf("state store: %w", err)
	}
	return nil
}

// newRedisState connects to the state store st names (a single server, a
// Cluster or a Sentinel's primary) with the options the stores expect
// (policy.NewRedisClient: commands bounded by the call's deadline, lost
// replies retried, fast failure while Redis is down), and puts the
// idempotency store, the budgets and the rate limits on it. The idempotency
// store owns the client and closes it; the others share it.
func newRedisState(st policy.State, opts *proxy.Options) error {
	client, err := policy.NewRedisClient(st)
	if err != nil {
		return fmt.Errorf("state.redis: %w", err)
	}
	limiters, err := policy.NewRedisRateLimiters(client, policy.RedisRateOptions{OnError: st.OnError})
	if err != nil {
		_ = client.Close()
		return fmt.Errorf("state: %w", err)
	}
	opts.Store = policy.NewRedisStore(client, policy.RedisOptions{ConfirmReplicas: st.ConfirmReplicas, ConfirmTimeout: st.ConfirmTimeout})
	opts.Budgets = policy.NewRedisBudgets(client, policy.RedisBudgetOptions{})
	opts.Limiters = limiters
	return nil
}

// configInfo is GET /v1/config: what is loaded, never a secret. Upstream
// headers, where ${VAR} secrets go, are not shown.
func (s *server) configInfo() any {
	cur := s.loaded.Load()
	return map[string]any{
		"generation": cur.generation,
		"checksum":   cur.snap.Checksum,
		"tools":      cur.snap.ToolNames,
		"sources":    cur.snap.Sources,
	}
}

// listen opens the agent listener, bounded by server.max_connections, and
// the admin listener with its own bound.
func (s *server) listen() error {
	snap := s.core.Snapshot()
	var err error
	if s.agentLn, err = listenLimited(snap.Server.Listen, snap.Server.MaxConnections); err != nil {
		return fmt.Errorf("agent listener: %w", err)
	}
	if s.adminLn, err = listenAdmin(snap.Server.AdminListen); err != nil {
		s.agentLn.Close()
		return err
	}
	s.agentDone, s.adminDone = make(chan error, 1), make(chan error, 1)
	go func() { s.agentDone <- s.agent.Serve(s.agentLn) }()
	go func() { s.adminDone <- s.admin.Serve(s.adminLn) }()
	return nil
}

func (s *server) agentAddr() string { return s.agentLn.Addr().String() }
func (s *server) adminAddr() string { return s.adminLn.Addr().String() }

// serve runs until ctx ends, then shuts down gracefully, in this order:
//
//  1. /readyz fails at once, and answers carry Connection: close, so load
//     balancers take the instance out and keep-alive clients reconnect
//     elsewhere.
//  2. The agent listener keeps accepting calls for drainDelay, while the
//     endpoints are updated.
//  3. It stops accepting and waits up to grace for calls in flight. Each
//     gets its envelope, and its idempotency record is completed (or
//     released, or kept as unknown) by the core.
//  4. Calls still running after grace are cancelled: they answer with
//     their envelope (side_effect unknown when the backend had the
//     request) and mark their records unknown. After cutoffWait the
//     remaining connections are closed; a record not settled by then stays
//     in flight until its lease runs out, and then reads as unknown.
//
// The admin listener serves until the agent's calls are over, so /readyz
// keeps saying "shutting down" and /metrics sees the last calls. serve
// returns nil after a clean drain and an error when calls had to be cut
// off.
func (s *server) serve(ctx context.Context, drainDelay, grace time.Duration) error {
	select {
	case err := <-s.agentDone:
		return fmt.Errorf("agent server: %w", err)
	case err := <-s.adminDone:
		return fmt.Errorf("admin server: %w", err)
	case <-ctx.Done():
	}
	s.draining.Store(true)
	s.agent.SetKeepAlivesEnabled(false)
	s.logger.Info("shutting down: draining", "drain_delay", drainDelay.String(), "grace", grace.String())
	if drainDelay > 0 {
		time.Sleep(drainDelay)
	}
	s.logger.Info("shutting down: no longer accepting calls; waiting for calls in flight")
	gctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	var cutOff error
	err := s.agent.Shutdown(gctx)
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		cutOff = errors.New("calls still in flight after the grace period were cancelled")
		s.logger.Warn("grace period over; cancelling the calls still in flight")
		s.cancelCalls()
		cctx, cancelCut := context.WithTimeout(context.Background(), cutoffWait)
		defer cancelCut()
		if err := s.agent.Shutdown(cctx); err != nil {
			s.agent.Close()
			// Handlers may still be writing to the store: leave it open,
			// the process is about to exit.
			s.closeAdmin()
			return cutOff
		}
	case err != nil:
		s.logger.Warn("closing the agent listener", "err", err.Error())
	}
	s.cancelCalls()
	s.closeAdmin()
	s.core.Close()
	s.flushTraces()
	return cutOff
}

// flushTraces exports the spans still buffered.
func (s *server) flushTraces() {
	if s.tracer == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.tracer.Shutdown(ctx); err != nil {
		s.logger.Warn("flushing traces", "err", err.Error())
	}
}

// closeAdmin stops the admin listener, giving a scrape in progress a moment.
func (s *server) closeAdmin() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := s.admin.Shutdown(ctx); err != nil {
		s.admin.Close()
	}
}
