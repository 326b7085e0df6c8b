package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/toolgate/toolgate/config"
)

// daemonFlags are the flags serve and extproc share, and how the two
// commands load their policy.
type daemonFlags struct {
	configPath string
	logLevel   slog.Level
	level      string
	drainDelay time.Duration
	grace      time.Duration
	watch      bool
	// listen and admin, when set, take the place of the policy's
	// server.listen and server.admin_listen.
	listen, admin string

	// listenDefault and listenHelp are the command's -listen; drainWhat
	// and graceWhat finish its help texts.
	listenDefault, listenHelp string
	drainWhat, graceWhat      string
	// byRoute loads the policy for a front that identifies every call by
	// its route (extproc): see config.Options.ByRoute.
	byRoute bool
}

// parseAndRun is serve and extproc: it parses their flags from args and
// runs the daemon (see run).
func (d *daemonFlags) parseAndRun(cmd, name string, front newFront, args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("toolgate "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	d.register(fs)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	return d.run(cmd, name, front, stderr)
}

// register adds the shared flags to fs.
func (d *daemonFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&d.configPath, "config", "", "policy file or directory")
	fs.StringVar(&d.listen, "listen", d.listenDefault, d.listenHelp)
	fs.StringVar(&d.admin, "admin", "", "admin address: /metrics, /healthz, /readyz, /-/reload, /v1/config (default: the policy's server.admin_listen)")
	fs.StringVar(&d.level, "log-level", "info", "log level: debug, info, warn, error")
	fs.DurationVar(&d.drainDelay, "drain-delay", 5*time.Second, "after SIGTERM, keep serving this long with "+d.drainWhat)
	fs.DurationVar(&d.grace, "grace", 30*time.Second, "after the drain delay, wait this long for "+d.graceWhat)
	fs.BoolVar(&d.watch, "watch", true, "reload the policy when its files change (SIGHUP and POST /-/reload work either way)")
}

// check validates the shared flags after parsing and returns the logger,
// whose lines are batched (see logSink); the caller closes the sink before
// it returns. ok=false means a usage error was printed.
func (d *daemonFlags) check(cmd string, stderr io.Writer) (*slog.Logger, *logSink, bool) {
	if d.configPath == "" {
		fmt.Fprintf(stderr, "toolgate %s: -config is required\n", cmd)
		return nil, nil, false
	}
	if err := d.logLevel.UnmarshalText([]byte(d.level)); err != nil {
		fmt.Fprintf(stderr, "toolgate %s: bad -log-level: %v\n", cmd, err)
		return nil, nil, false
	}
	sink := newLogSink(stderr)
	h := slog.NewJSONHandler(sink, &slog.HandlerOptions{Level: d.logLevel})
	return slog.New(flushOnWarn{Handler: h, sink: sink}), sink, true
}

// loaderOptions say how the command reads its policy: the listen flags
// over the policy's addresses, extproc's route rule, and the GC target
// while it compiles.
func (d *daemonFlags) loaderOptions() config.LoaderOptions {
	return config.LoaderOptions{Options: config.Options{ByRoute: d.byRoute, Listen: d.listen, AdminListen: d.admin}, GCPercent: loadGCPercent}
}

// run is serve and extproc once their flags are parsed: it loads the
// policy, builds the daemon with the command's front, and runs it until
// SIGTERM or SIGINT. It returns the exit code.
func (d *daemonFlags) run(cmd, name string, front newFront, stderr io.Writer) int {
	logger, sink, ok := d.check(cmd, stderr)
	if !ok {
		return 2
	}
	// Deferred first, so it runs last: the log is flushed after the
	// daemon's last line.
	defer sink.Close()
	watcher := d.startWatcher(logger)
	loader := config.NewLoader(d.configPath, d.loaderOptions())
	snap, err := loader.Load()
	if err != nil {
		if watcher != nil {
			watcher.Close()
		}
		printLoadError(stderr, err)
		return 1
	}
	dm, err := newDaemon(snap, daemonOptions{
		name: name, logger: logger, source: loader, watcher: watcher, front: front,
		drainDelay: d.drainDelay, grace: d.grace,
	})
	if err != nil {
		fmt.Fprintf(stderr, "toolgate: %v\n", err)
		return 1
	}
	ctx, hup, stop := notifySignals()
	defer stop()
	if err := dm.listen(); err != nil {
		fmt.Fprintf(stderr, "toolgate: %v\n", err)
		return 1
	}
	if err := dm.run(ctx, hup); err != nil {
		logger.Error(name+" stopped with an error", "err", err.Error())
		return 1
	}
	logger.Info(name + " stopped")
	return 0
}

// flushOnWarn writes warnings and errors out at once: they may be the last
// lines before a crash, and an operator watching the log wants them now.
type flushOnWarn struct {
	slog.Handler
	sink *logSink
}

func (f flushOnWarn) Handle(ctx context.Context, r slog.Record) error {
	err := f.Handler.Handle(ctx, r)
	if r.Level >= slog.LevelWarn {
		f.sink.Flush()
	}
	return err
}

func (f flushOnWarn) WithAttrs(attrs []slog.Attr) slog.Handler {
	return flushOnWarn{Handler: f.Handler.WithAttrs(attrs), sink: f.sink}
}

func (f flushOnWarn) WithGroup(name string) slog.Handler {
	return flushOnWarn{Handler: f.Handler.WithGroup(name), sink: f.sink}
}

// startWatcher watches the policy files when -watch is on. It starts before
// the first read, so a change made while toolgate starts is not missed; a
// watcher that cannot start leaves reloads to SIGHUP and POST /-/reload.
func (d *daemonFlags) startWatcher(logger *slog.Logger) *config.Watcher {
	if !d.watch {
		return nil
	}
	w, err := config.NewWatcher(d.configPath, logger)
	if err != nil {
		logger.Warn("not watching the policy files; reload with SIGHUP or POST /-/reload", "err", err.Error())
		return nil
	}
	return w
}
