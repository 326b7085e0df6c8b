package main

import (
	"context"
	"errors"
	"fmt"
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
	"github.com/toolgate/toolgate/console"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/policy/redisstate"
	"github.com/toolgate/toolgate/proxy"
)

// front serves a daemon's calls on its listener: the agent HTTP server of
// `toolgate serve` (agent.go) or the gRPC external processor of `toolgate
// extproc` (extproc.go). Everything else — the core, the admin port, the
// reloads, readiness and the shutdown sequence — is the daemon's, and the
// same for both.
type front interface {
	// kind names the front in log lines and errors: "agent", "ext_proc".
	kind() string
	// serve serves calls on ln until stop or cutOff.
	serve(ln net.Listener) error
	// drain asks clients to go elsewhere while calls are still served:
	// answers carry Connection: close (HTTP), the health check says
	// NOT_SERVING (gRPC).
	drain()
	// stop stops accepting and waits for the calls in flight until ctx
	// ends; then it returns ctx's error, the calls still running.
	stop(ctx context.Context) error
	// cutOff cancels the calls still in flight and waits for them to end
	// until ctx ends; an error means some are still running.
	cutOff(ctx context.Context) error
}

// newFront builds a front over core with the policy's server settings.
type newFront func(core *proxy.Core, s policy.Server, logger *slog.Logger) front

// daemonOptions say how to build a daemon.
type daemonOptions struct {
	// name starts the daemon's log lines: "toolgate", "toolgate extproc".
	name   string
	logger *slog.Logger
	// source reloads the policy; nil when it was not read from files (the
	// demo), which makes POST /-/reload an error.
	source *config.Loader
	// watcher reloads the policy when its files change; nil when -watch
	// is off or the watcher could not start. The daemon closes it.
	watcher    *config.Watcher
	front      newFront
	drainDelay time.Duration
	grace      time.Duration
}

// daemon is one running toolgate: a core, the front that serves its calls,
// the admin server, the policy's reloader and its triggers (SIGHUP, file
// changes, POST /-/reload), readiness, and one shutdown sequence. `toolgate
// serve` and `toolgate extproc` differ only in their front; cmd parses the
// flags, builds the daemon and runs it.
type daemon struct {
	name     string
	logger   *slog.Logger
	core     *proxy.Core
	registry *prometheus.Registry
	reloader *config.Reloader
	watcher  *config.Watcher
	// tracer exports spans when server.tracing is set; nil otherwise.
	tracer *sdktrace.TracerProvider
	// learning is learning mode (server.learn); nil when off. Its summary
	// is saved at the end of shutdown.
	learning *learning
	// storeProbe checks, for /readyz, that the state store accepts writes.
	storeProbe *proxy.StoreProbe
	draining   atomic.Bool

	front                front
	admin                *http.Server
	frontLn, adminLn     net.Listener
	frontDone, adminDone chan error

	drainDelay, grace time.Duration
	closeOnce         sync.Once
}

// cutoffWait is how long calls cancelled at the end of the grace period
// have to write their envelope and settle their idempotency record (a
// store write is bounded by 2s in the core) before connections are closed.
const cutoffWait = 3 * time.Second

// storeProbeInterval is how often, at most, /readyz writes to the state
// store to see whether it accepts writes.
const storeProbeInterval = 2 * time.Second

// newDaemon builds a daemon running snap, the policy its source (if any)
// has just loaded. Nothing listens yet. On error the watcher is closed.
func newDaemon(snap *policy.Snapshot, opts daemonOptions) (*daemon, error) {
	d, err := buildDaemon(snap, opts)
	if err != nil && opts.watcher != nil {
		opts.watcher.Close()
	}
	return d, err
}

func buildDaemon(snap *policy.Snapshot, opts daemonOptions) (*daemon, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	copts := proxy.Options{Registry: reg, Logger: opts.logger, Version: version}
	if snap.State.Backend == policy.BackendRedis {
		if err := newRedisState(snap.State, &copts); err != nil {
			return nil, err
		}
	}
	tp, err := newTracerProvider(context.Background(), snap.Server.Tracing)
	if err != nil {
		return nil, err
	}
	if tp != nil {
		copts.TracerProvider = tp
	}
	lg, err := startLearning(snap.Server.Learn, opts.logger)
	if err != nil {
		return nil, err
	}
	copts.Observer = lg.observer()
	core, err := proxy.NewCore(snap, copts)
	if err != nil {
		lg.close()
		return nil, err
	}
	m := core.Metrics()
	d := &daemon{
		name:     opts.name,
		logger:   opts.logger,
		core:     core,
		registry: reg,
		reloader: config.NewReloader(snap, config.ReloaderOptions{
			Source: opts.source,
			Swap: func(snap *policy.Snapshot) error {
				defer releaseLoadGarbage()
				return core.Swap(snap)
			},
			Metrics: config.ReloadMetrics{Reloads: m.ConfigReloads, LastReloadSuccessful: m.ConfigLastReloadOK, Generation: m.ConfigGeneration},
			Logger:  opts.logger,
		}),
		watcher:    opts.watcher,
		tracer:     tp,
		learning:   lg,
		storeProbe: proxy.NewStoreProbe(core.Ping, storeProbeInterval),
		front:      opts.front(core, snap.Server, opts.logger),
		drainDelay: opts.drainDelay,
		grace:      opts.grace,
	}
	d.admin = newAdminServer(proxy.AdminHandler(proxy.AdminOptions{
		Gatherer: reg,
		Ready:    d.ready,
		Reload:   d.reloader.Reload,
		Config:   d.configInfo,
		Learn:    lg.handler(),
		Console:  console.New(console.Options{Core: core, Reloader: d.reloader, Learner: lg.summaries(), Logger: opts.logger}),
		Server:   func() *policy.Server { return &d.core.Snapshot().Server },
	}), opts.logger)
	return d, nil
}

// newRedisState connects to the state store st names (a single server, a
// Cluster or a Sentinel's primary) with the options the stores expect
// (redisstate.NewClient: commands bounded by the call's deadline, lost
// replies retried, fast failure while Redis is down), and puts the
// idempotency store, the budgets and the rate limits on it. The idempotency
// store owns the client and closes it; the others share it.
func newRedisState(st policy.State, opts *proxy.Options) error {
	client, err := redisstate.NewClient(st)
	if err != nil {
		return fmt.Errorf("state.redis: %w", err)
	}
	limiters, err := redisstate.NewRateLimiters(client, redisstate.RateOptions{OnError: st.OnError})
	if err != nil {
		_ = client.Close()
		return fmt.Errorf("state: %w", err)
	}
	opts.Store = redisstate.NewStore(client, redisstate.StoreOptions{ConfirmReplicas: st.ConfirmReplicas, ConfirmTimeout: st.ConfirmTimeout})
	opts.Budgets = redisstate.NewBudgets(client, redisstate.BudgetOptions{})
	opts.Limiters = limiters
	return nil
}

// listen opens the front's listener on server.listen (or the -listen
// flag), bounded by server.max_connections, and the admin listener with
// its own bound. On error the daemon is closed.
func (d *daemon) listen() error {
	s := d.core.Snapshot().Server
	var err error
	if d.frontLn, err = listenLimited(s.Listen, s.MaxConnections); err != nil {
		d.close()
		return fmt.Errorf("%s listener: %w", d.front.kind(), err)
	}
	if d.adminLn, err = listenAdmin(s.AdminListen); err != nil {
		d.frontLn.Close()
		d.close()
		return err
	}
	d.frontDone, d.adminDone = make(chan error, 1), make(chan error, 1)
	go func() { d.frontDone <- d.front.serve(d.frontLn) }()
	go func() { d.adminDone <- d.admin.Serve(d.adminLn) }()
	return nil
}

func (d *daemon) frontAddr() string { return d.frontLn.Addr().String() }
func (d *daemon) adminAddr() string { return d.adminLn.Addr().String() }

// run serves, after listen, until ctx ends or a server fails: it reloads
// the policy on every value from hup (SIGHUP; nil for none) and on file
// changes, then shuts down (see shutdown). It returns nil after a clean
// shutdown.
func (d *daemon) run(ctx context.Context, hup <-chan os.Signal) error {
	// The triggers stop when shutdown begins; a reload already under way
	// (it may wait for the files to settle) is waited for at the very end,
	// so no goroutine outlives run.
	var wg sync.WaitGroup
	defer wg.Wait()
	triggers, stopTriggers := context.WithCancel(ctx)
	defer stopTriggers()
	if hup != nil {
		wg.Go(func() {
			for {
				select {
				case <-triggers.Done():
					return
				case <-hup:
					_ = d.reloader.Reload()
				}
			}
		})
	}
	w := d.watcher
	if w != nil {
		d.watcher = nil // Run closes it
		wg.Go(func() { w.Run(triggers, func() { _ = d.reloader.Reload() }) })
	}
	releaseLoadGarbage()
	cur := d.reloader.Current().Snapshot
	d.logger.Info(d.name+" started", "version", version, "listen", d.frontAddr(), "admin", d.adminAddr(),
		"tools", len(cur.Tools), "checksum", cur.Checksum, "watch", w != nil)
	var failed error
	select {
	case err := <-d.frontDone:
		failed = fmt.Errorf("%s server: %w", d.front.kind(), err)
	case err := <-d.adminDone:
		failed = fmt.Errorf("admin server: %w", err)
	case <-ctx.Done():
	}
	stopTriggers()
	return errors.Join(failed, d.shutdown(failed == nil))
}

// notifySignals returns a context that ends on SIGTERM or SIGINT (once it
// has, a second signal ends the process at once, by its default action)
// and a channel of SIGHUPs, until stop is called.
func notifySignals() (ctx context.Context, hup <-chan os.Signal, stop func()) {
	ctx, stopNotify := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-ctx.Done()
		stopNotify()
	}()
	hups := make(chan os.Signal, 1)
	signal.Notify(hups, syscall.SIGHUP)
	return ctx, hups, func() {
		signal.Stop(hups)
		stopNotify()
	}
}

// shutdown stops the daemon gracefully, in this order, for every front:
//
//  1. /readyz fails at once, and the front asks clients to go elsewhere
//     (HTTP answers carry Connection: close; the gRPC health check says
//     NOT_SERVING), so load balancers and Envoy take the instance out.
//  2. Calls are still accepted for the drain delay, while the endpoints
//     are updated (skipped when a server failed: nothing is served).
//  3. The front stops accepting and waits up to the grace period for the
//     calls in flight. Each gets its envelope, and its idempotency record
//     is completed (or released, or kept as unknown) by the core.
//  4. Calls still running after grace are cancelled: they answer with
//     their envelope (side_effect unknown when the backend had the
//     request; an ext_proc stream ends its call as abandoned) and mark
//     their records unknown. After cutoffWait the remaining connections
//     are closed; a record not settled by then stays in flight until its
//     lease runs out, and then reads as unknown.
//  5. The admin server stops (it served until the calls were over, so
//     /readyz kept saying "shutting down" and /metrics saw the last
//     calls), the core closes its connections and the state store, and
//     buffered spans are flushed. The command flushes its log last.
//
// It returns nil after a clean drain and an error when calls had to be
// cut off.
func (d *daemon) shutdown(drain bool) error {
	d.draining.Store(true)
	d.front.drain()
	d.logger.Info("shutting down: draining", "drain_delay", d.drainDelay.String(), "grace", d.grace.String())
	if drain && d.drainDelay > 0 {
		time.Sleep(d.drainDelay)
	}
	d.logger.Info("shutting down: no longer accepting calls; waiting for calls in flight")
	gctx, cancel := context.WithTimeout(context.Background(), d.grace)
	defer cancel()
	var cutOff error
	err := d.front.stop(gctx)
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		cutOff = errors.New("calls still in flight after the grace period were cancelled")
		d.logger.Warn("grace period over; cancelling the calls still in flight")
		cctx, cancelCut := context.WithTimeout(context.Background(), cutoffWait)
		defer cancelCut()
		if err := d.front.cutOff(cctx); err != nil {
			// Calls may still be writing to the store: leave it open, the
			// process is about to exit.
			d.closeAdmin()
			d.flushTraces()
			return cutOff
		}
	case err != nil:
		d.logger.Warn("closing the "+d.front.kind()+" listener", "err", err.Error())
	}
	d.closeAdmin()
	d.close()
	return cutOff
}

// close releases what the daemon holds besides its listeners: the watcher
// if it never ran, the core (backend connections, the state store) and the
// tracer. It is for a daemon that never served, and the last step of
// shutdown.
func (d *daemon) close() {
	d.closeOnce.Do(func() {
		if d.watcher != nil {
			d.watcher.Close()
		}
		d.core.Close()
		d.learning.close()
		d.flushTraces()
	})
}

// flushTraces exports the spans still buffered.
func (d *daemon) flushTraces() {
	if d.tracer == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := d.tracer.Shutdown(ctx); err != nil {
		d.logger.Warn("flushing traces", "err", err.Error())
	}
}

// closeAdmin stops the admin listener, giving a scrape in progress a moment.
func (d *daemon) closeAdmin() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := d.admin.Shutdown(ctx); err != nil {
		d.admin.Close()
	}
}

// ready is /readyz: a valid policy is loaded (a daemon exists only once
// one is), the daemon is not draining, and the state store accepts writes
// (a Redis out of memory or turned read-only fails every side-effecting
// call, so the instance should not get traffic).
func (d *daemon) ready(ctx context.Context) error {
	if d.draining.Load() {
		return errors.New("shutting down")
	}
	if d.reloader.Current().Snapshot == nil {
		return errors.New("no policy loaded")
	}
	if err := d.storeProbe.Check(ctx); err != nil {
		return fmt.Errorf("state store: %w", err)
	}
	return nil
}

// configInfo is GET /v1/config: what is loaded, never a secret. Upstream
// headers, where ${VAR} secrets go, are not shown.
func (d *daemon) configInfo() any {
	cur := d.reloader.Current()
	return map[string]any{
		"generation": cur.Generation,
		"checksum":   cur.Snapshot.Checksum,
		"tools":      cur.Snapshot.ToolNames,
		"sources":    cur.Snapshot.Sources,
	}
}
