package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"
)

// daemonFlags are the flags serve and extproc share.
type daemonFlags struct {
	configPath string
	logLevel   slog.Level
	level      string
	drainDelay time.Duration
	grace      time.Duration
	watch      bool
}

// register adds the shared flags to fs; drainWhat and graceWhat finish the
// help texts for the command.
func (d *daemonFlags) register(fs *flag.FlagSet, drainWhat, graceWhat string) {
	fs.StringVar(&d.configPath, "config", "", "policy file or directory")
	fs.StringVar(&d.level, "log-level", "info", "log level: debug, info, warn, error")
	fs.DurationVar(&d.drainDelay, "drain-delay", 5*time.Second, "after SIGTERM, keep serving this long with "+drainWhat)
	fs.DurationVar(&d.grace, "grace", 30*time.Second, "after the drain delay, wait this long for "+graceWhat)
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
func (d *daemonFlags) startWatcher(logger *slog.Logger) *policyWatcher {
	if !d.watch {
		return nil
	}
	w, err := newPolicyWatcher(d.configPath, logger)
	if err != nil {
		logger.Warn("not watching the policy files; reload with SIGHUP or POST /-/reload", "err", err.Error())
		return nil
	}
	return w
}
