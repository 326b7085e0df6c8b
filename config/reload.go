package config

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolgate/toolgate/policy"
)

// ErrNoSource is the error of a reload of a policy that was not read from
// files (the demo's, a test's).
var ErrNoSource = errors.New("this instance has no policy file to reload")

// Loaded is the policy new calls run on and its generation, read together
// (GET /v1/config). The generation is 1 at start and grows by one on every
// reload that changed the policy's checksum.
type Loaded struct {
	Generation int64
	Snapshot   *policy.Snapshot
}

// ReloadMetrics are the metrics a Reloader keeps: toolgate_config_reloads_total
// (label result: success, failure), toolgate_config_last_reload_successful
// and toolgate_config_generation. A nil field is not recorded.
type ReloadMetrics struct {
	Reloads              *prometheus.CounterVec
	LastReloadSuccessful prometheus.Gauge
	Generation           prometheus.Gauge
}

// ReloaderOptions are a Reloader's source and consumer.
type ReloaderOptions struct {
	// Source reads the policy again; nil means the policy cannot be
	// reloaded (Reload returns ErrNoSource).
	Source *Loader
	// Swap hands a new snapshot to its consumer (the core's Swap): once it
	// returns nil, new calls run on the snapshot. Required.
	Swap func(*policy.Snapshot) error
	// Metrics are recorded on every reload.
	Metrics ReloadMetrics
	// Logger receives one line per reload; nil discards.
	Logger *slog.Logger
}

// Reloader holds the policy a process runs on and replaces it from its
// source, the way blackbox_exporter's SafeConfig does: the new snapshot is
// built completely (from settled files, see Loader), checked against the
// running one, handed to the consumer, and only then published; on any
// error the running policy stays. Every trigger (a file change, SIGHUP,
// POST /-/reload) ends in Reload, for serve and extproc alike; reloads run
// one at a time.
//
// A reload is refused, keeping the running policy, when the new policy
//   - does not load (its errors, each with file:line:col);
//   - changes what is built once at start: state, the listeners and their
//     bounds (server.listen, admin_listen, max_connections, read_timeout,
//     write_timeout, idle_timeout), server.tracing;
//   - would let callers do more without saying so (a file cut before its
//     access section or its default; see policy.Access.WidensImplicitly).
type Reloader struct {
	source  *Loader
	swap    func(*policy.Snapshot) error
	metrics ReloadMetrics
	logger  *slog.Logger

	mu sync.Mutex
	// failed: the last reload failed (guarded by mu), so the next good one
	// is a recovery, logged as such.
	failed bool
	cur    atomic.Pointer[Loaded]
	last   atomic.Pointer[ReloadStatus]
}

// ReloadStatus is how the last reload ended, for the admin console.
type ReloadStatus struct {
	// At is when it ended; zero when no reload ran since the start.
	At time.Time
	// Err says why the running policy stayed; empty after a success.
	Err string
}

// NewReloader returns a Reloader running initial as generation 1, which
// its consumer already has; it sets the metrics accordingly.
func NewReloader(initial *policy.Snapshot, opts ReloaderOptions) *Reloader {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	r := &Reloader{source: opts.Source, swap: opts.Swap, metrics: opts.Metrics, logger: opts.Logger}
	r.cur.Store(&Loaded{Generation: 1, Snapshot: initial})
	r.last.Store(&ReloadStatus{})
	r.setGauge(r.metrics.Generation, 1)
	r.setGauge(r.metrics.LastReloadSuccessful, 1)
	return r
}

// Current returns the policy new calls run on and its generation.
func (r *Reloader) Current() Loaded { return *r.cur.Load() }

// LastReload returns how the last reload ended.
func (r *Reloader) LastReload() ReloadStatus { return *r.last.Load() }

// Reload reads the policy again and, if it may replace the running one,
// makes it the policy for new calls. A policy whose checksum did not change
// is a successful reload that changes nothing. The error says why the
// running policy stays.
func (r *Reloader) Reload() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.source == nil {
		return ErrNoSource
	}
	cur := r.cur.Load()
	snap, err := r.source.Load()
	if err == nil {
		err = r.check(cur.Snapshot, snap)
	}
	if err == nil && snap.Checksum != cur.Snapshot.Checksum {
		err = r.swap(snap)
	}
	if err != nil {
		r.last.Store(&ReloadStatus{At: time.Now(), Err: err.Error()})
		r.failed = true
		r.count("failure")
		r.setGauge(r.metrics.LastReloadSuccessful, 0)
		r.logger.Error("policy reload failed; keeping the last good policy", "errors", errorLines(err))
		return err
	}
	r.last.Store(&ReloadStatus{At: time.Now()})
	recovered := r.failed
	r.failed = false
	r.count("success")
	r.setGauge(r.metrics.LastReloadSuccessful, 1)
	if snap.Checksum == cur.Snapshot.Checksum {
		// Spurious file events cost nothing, and the generation counts
		// real changes only.
		if recovered {
			r.logger.Info("policy reload recovered; the policy files are valid again and unchanged from the running policy",
				"generation", cur.Generation, "checksum", snap.Checksum)
		} else {
			r.logger.Debug("policy unchanged", "generation", cur.Generation, "checksum", snap.Checksum)
		}
		return nil
	}
	// Published last, so whoever sees the new generation also sees the
	// metrics of the reload that made it.
	gen := cur.Generation + 1
	r.setGauge(r.metrics.Generation, float64(gen))
	r.cur.Store(&Loaded{Generation: gen, Snapshot: snap})
	r.logger.Info("policy reloaded", "generation", gen, "checksum", snap.Checksum, "tools", len(snap.Tools), "recovered", recovered)
	return nil
}

// check refuses a policy that cannot replace old on reload.
func (r *Reloader) check(old, snap *policy.Snapshot) error {
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
	if !snap.Server.Learn.Equal(old.Server.Learn) {
		return errors.New("server.learn cannot change on reload; restart toolgate to apply it")
	}
	if why := snap.Access.WidensImplicitly(&old.Access); why != "" {
		// A file cut before its access section (or its default) reads as
		// "allow everyone": refused, whatever wrote it. Opening access is
		// one explicit line, or a restart.
		return fmt.Errorf("access: reload refused: %s (a file still being written?); to open access on purpose, set access.default: allow", why)
	}
	if !hasAccess(snap.Access) && hasAccess(old.Access) {
		r.logger.Warn("the new policy has no access section; the running one had one", "checksum", snap.Checksum)
	}
	return nil
}

func (r *Reloader) count(result string) {
	if r.metrics.Reloads != nil {
		r.metrics.Reloads.WithLabelValues(result).Inc()
	}
}

func (r *Reloader) setGauge(g prometheus.Gauge, v float64) {
	if g != nil {
		g.Set(v)
	}
}

// hasAccess says a policy has an access section that says anything.
func hasAccess(a policy.Access) bool {
	return a.DefaultSet || len(a.Callers) > 0 || len(a.Identities) > 0
}

// listenerChange names the first server setting of the listeners that
// differs between two policies, or returns "": the listeners and their
// servers are built once, at start. An address given on the command line
// (Options.Listen, AdminListen) is the same in both.
func listenerChange(old, cur policy.Server) string {
	for _, f := range []struct {
		name    string
		changed bool
	}{
		{"listen", old.Listen != cur.Listen},
		{"admin_listen", old.AdminListen != cur.AdminListen},
		{"max_connections", old.MaxConnections != cur.MaxConnections},
		{"read_timeout", old.ReadTimeout != cur.ReadTimeout},
		{"write_timeout", old.WriteTimeout != cur.WriteTimeout},
		{"idle_timeout", old.IdleTimeout != cur.IdleTimeout},
	} {
		if f.changed {
			return f.name
		}
	}
	return ""
}

// errorLines lists a policy error one problem per line, each starting with
// file:line:col.
func errorLines(err error) []string {
	var errs Errors
	if !errors.As(err, &errs) {
		return []string{err.Error()}
	}
	lines := make([]string, len(errs))
	for i, e := range errs {
		lines[i] = e.Error()
	}
	return lines
}
