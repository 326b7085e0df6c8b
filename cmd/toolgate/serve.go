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
	"github.com/redis/go-redis/v9"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/proxy"
)

// serveOptions are the flags of `toolgate serve`.
type serveOptions struct {
	configPath string
	logLevel   slog.Level
	drainDelay time.Duration
	grace      time.Duration
}

func runServe(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var opts serveOptions
	fs.StringVar(&opts.configPath, "config", "", "policy file or directory")
	level := fs.String("log-level", "info", "log level: debug, info, warn, error")
	fs.DurationVar(&opts.drainDelay, "drain-delay", 5*time.Second, "after SIGTERM, keep serving this long with /readyz failing, so endpoints are updated")
	fs.DurationVar(&opts.grace, "grace", 30*time.Second, "after the drain delay, wait this long for calls in flight")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if opts.configPath == "" {
		fmt.Fprintln(stderr, "toolgate serve: -config is required")
		return 2
	}
	if err := opts.logLevel.UnmarshalText([]byte(*level)); err != nil {
		fmt.Fprintf(stderr, "toolgate serve: bad -log-level: %v\n", err)
		return 2
	}
	logger := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: opts.logLevel}))
	load := func() (*policy.Snapshot, error) { return config.Load(opts.configPath, config.Options{}) }
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
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
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
	if err := srv.listen(); err != nil {
		fmt.Fprintf(stderr, "toolgate: %v\n", err)
		return 1
	}
	logger.Info("toolgate started", "version", version, "listen", srv.agentAddr(), "admin", srv.adminAddr(),
		"tools", len(snap.Tools), "checksum", snap.Checksum)
	if err := srv.serve(ctx, opts.drainDelay, opts.grace); err != nil {
		logger.Error("toolgate stopped with an error", "err", err)
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

	reloadMu   sync.Mutex
	generation atomic.Int64
	draining   atomic.Bool

	agent, admin         *http.Server
	agentLn, adminLn     net.Listener
	agentDone, adminDone chan error
}

func newServer(snap *policy.Snapshot, load func() (*policy.Snapshot, error), logger *slog.Logger) (*server, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	opts := proxy.Options{Registry: reg, Logger: logger, Version: version}
	if snap.State.Backend == policy.BackendRedis {
		client, err := newRedisClient(snap.State.RedisURL)
		if err != nil {
			return nil, err
		}
		// The idempotency store owns the client and closes it; budgets
		// share it.
		opts.Store = policy.NewRedisStore(client, policy.RedisOptions{})
		opts.Budgets = policy.NewRedisBudgets(client, policy.RedisBudgetOptions{})
	}
	core, err := proxy.NewCore(snap, opts)
	if err != nil {
		return nil, err
	}
	s := &server{core: core, registry: reg, logger: logger, load: load}
	s.generation.Store(1)
	m := core.Metrics()
	m.ConfigGeneration.Set(1)
	m.ConfigLastReloadOK.Set(1)
	s.agent = &http.Server{
		Handler:           core.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	s.admin = &http.Server{
		Handler: proxy.AdminHandler(proxy.AdminOptions{
			Gatherer: reg,
			Ready:    s.ready,
			Reload:   s.reload,
			Config:   s.configInfo,
		}),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       120 * time.Second,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	return s, nil
}

// reload builds the new snapshot completely, then swaps it; on any error
// the last good policy stays.
func (s *server) reload() error {
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	m := s.core.Metrics()
	if s.load == nil {
		return errors.New("this instance has no policy file to reload")
	}
	snap, err := s.load()
	if err == nil {
		err = s.swap(snap)
	}
	if err != nil {
		m.ConfigReloads.WithLabelValues("failure").Inc()
		m.ConfigLastReloadOK.Set(0)
		s.logger.Error("policy reload failed; keeping the last good policy", "err", err.Error())
		return err
	}
	m.ConfigReloads.WithLabelValues("success").Inc()
	m.ConfigLastReloadOK.Set(1)
	return nil
}

func (s *server) swap(snap *policy.Snapshot) error {
	old := s.core.Snapshot()
	if snap.State != old.State {
		return errors.New("state: the state store cannot change on reload; restart toolgate to apply it")
	}
	if snap.Server.Listen != old.Server.Listen || snap.Server.AdminListen != old.Server.AdminListen {
		return errors.New("server.listen and server.admin_listen cannot change on reload; restart toolgate to apply them")
	}
	if err := s.core.Swap(snap); err != nil {
		return err
	}
	if old.Checksum != snap.Checksum {
		gen := s.generation.Add(1)
		s.core.Metrics().ConfigGeneration.Set(float64(gen))
		s.logger.Info("policy reloaded", "generation", gen, "checksum", snap.Checksum, "tools", len(snap.Tools))
	}
	return nil
}

func (s *server) ready(ctx context.Context) error {
	if s.draining.Load() {
		return errors.New("shutting down")
	}
	if err := s.core.Ping(ctx); err != nil {
		return fmt.Errorf("state store: %w", err)
	}
	return nil
}

// newRedisClient connects to the state store. Retries are few and short:
// while Redis is down, side-effecting calls must fail closed quickly rather
// than hang on reconnects.
func newRedisClient(rawURL string) (*redis.Client, error) {
	opts, err := redis.ParseURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("state.redis_url: %w", err)
	}
	opts.DialerRetries = 1
	opts.MaxRetries = 1
	if opts.DialTimeout == 0 || opts.DialTimeout > time.Second {
		opts.DialTimeout = time.Second
	}
	return redis.NewClient(opts), nil
}

// configInfo is GET /v1/config: what is loaded, never a secret.
func (s *server) configInfo() any {
	snap := s.core.Snapshot()
	return map[string]any{
		"generation": s.generation.Load(),
		"checksum":   snap.Checksum,
		"tools":      snap.ToolNames,
		"sources":    snap.Sources,
	}
}

func (s *server) listen() error {
	snap := s.core.Snapshot()
	var err error
	if s.agentLn, err = net.Listen("tcp", snap.Server.Listen); err != nil {
		return fmt.Errorf("agent listener: %w", err)
	}
	if s.adminLn, err = net.Listen("tcp", snap.Server.AdminListen); err != nil {
		s.agentLn.Close()
		return fmt.Errorf("admin listener: %w", err)
	}
	s.agentDone, s.adminDone = make(chan error, 1), make(chan error, 1)
	go func() { s.agentDone <- s.agent.Serve(s.agentLn) }()
	go func() { s.adminDone <- s.admin.Serve(s.adminLn) }()
	return nil
}

func (s *server) agentAddr() string { return s.agentLn.Addr().String() }
func (s *server) adminAddr() string { return s.adminLn.Addr().String() }

// serve runs until ctx ends, then shuts down gracefully: /readyz fails at
// once, the listener keeps serving for drainDelay so load balancers take
// the instance out, then it stops accepting and waits up to grace for calls
// in flight.
func (s *server) serve(ctx context.Context, drainDelay, grace time.Duration) error {
	select {
	case err := <-s.agentDone:
		return fmt.Errorf("agent server: %w", err)
	case err := <-s.adminDone:
		return fmt.Errorf("admin server: %w", err)
	case <-ctx.Done():
	}
	s.draining.Store(true)
	s.logger.Info("shutting down: draining", "drain_delay", drainDelay.String(), "grace", grace.String())
	if drainDelay > 0 {
		time.Sleep(drainDelay)
	}
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	err := s.agent.Shutdown(sctx)
	_ = s.admin.Shutdown(sctx)
	if errors.Is(err, context.DeadlineExceeded) {
		s.agent.Close()
		// Calls cut off here keep their idempotency records in flight;
		// the records read as unknown once their lease runs out.
		s.core.Close()
		return errors.New("calls still in flight after the grace period")
	}
	s.core.Close()
	return nil
}
