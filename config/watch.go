package config

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
)

// watchDebounce is how long the policy watcher waits for a burst of file
// system events to end before it reloads. One change is several events: an
// editor's save (write a temporary file, rename it over the old one) or the
// kubelet's ConfigMap update (a new timestamped directory, a new ..data
// symlink renamed over the old one, the old directory removed).
const watchDebounce = 200 * time.Millisecond

// watchMaxDelay bounds the wait when events never stop, a file written to
// continuously, so that a reload still happens.
const watchMaxDelay = 2 * time.Second

// configMapData is the symlink through which the kubelet publishes a mounted
// ConfigMap's current files; it is replaced atomically on every update.
const configMapData = "..data"

// Watcher reloads the policy when its files change: one of the triggers of
// a Reloader, beside SIGHUP and POST /-/reload.
//
// It watches directories, never files: editors and the kubelet replace a
// file rather than write to it, and a watch on a file goes away with the
// file. For a policy file it watches the file's directory for the file's
// name and for ..data; for a policy directory, the directory for every
// *.yaml and *.yml file and ..data. Symbolic links are followed, and the
// directory of each link's target is watched too, so a change behind a link
// is seen. The set is recomputed after every change, which moves the
// watches when a link is repointed.
//
// Every event on a relevant name counts (create, write, remove, rename,
// chmod): a reload of an unchanged policy is cheap and changes nothing.
type Watcher struct {
	path     string
	debounce time.Duration
	maxDelay time.Duration
	logger   *slog.Logger

	fsw  *fsnotify.Watcher // nil when the loop is fed events directly (tests)
	dirs map[string]nameFilter
}

// nameFilter says which names in a watched directory belong to the policy.
type nameFilter struct {
	names map[string]bool
	yaml  bool // every *.yaml and *.yml whose name does not start with "."
}

func (f nameFilter) match(name string) bool {
	if f.names[name] {
		return true
	}
	return f.yaml && isPolicyFileName(name)
}

// isPolicyFileName says which names of a directory are policy files, for
// ReadFiles and the watcher alike: *.yaml and *.yml, hidden names skipped
// (a ConfigMap's ..data and its timestamped directories).
func isPolicyFileName(name string) bool {
	return !strings.HasPrefix(name, ".") && (strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml"))
}

// NewWatcher starts watching the policy at path. Events are queued
// from this moment; run delivers them. Call it before the policy is first
// read, so that no change goes unseen.
func NewWatcher(path string, logger *slog.Logger) (*Watcher, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("policy watcher: %w", err)
	}
	fsw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("policy watcher: %w", err)
	}
	w := &Watcher{
		path:     abs,
		debounce: watchDebounce,
		maxDelay: watchMaxDelay,
		logger:   logger,
		fsw:      fsw,
	}
	if err := w.refresh(); err != nil {
		fsw.Close()
		return nil, fmt.Errorf("policy watcher: %w", err)
	}
	return w, nil
}

// Close stops watching; it is for a watcher whose Run never started.
func (w *Watcher) Close() error { return w.fsw.Close() }

// Run calls reload after each change, once a burst of events has settled,
// until ctx ends; then it stops watching.
func (w *Watcher) Run(ctx context.Context, reload func()) {
	defer w.fsw.Close()
	w.loop(ctx, w.fsw.Events, w.fsw.Errors, reload)
}

// loop debounces events: the first relevant event arms a timer, each
// further one pushes it back by the debounce interval, but never beyond
// maxDelay after the first. When the timer fires the watches are brought up
// to date, then reload runs.
func (w *Watcher) loop(ctx context.Context, events <-chan fsnotify.Event, errs <-chan error, reload func()) {
	var (
		timer *time.Timer
		fire  <-chan time.Time
		first time.Time
	)
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-events:
			if !ok {
				return
			}
			if !w.relevant(ev) {
				continue
			}
			w.logger.Debug("policy file event", "event", ev.String())
			now := time.Now()
			if fire == nil {
				first = now
				timer = time.NewTimer(w.debounce)
				fire = timer.C
				continue
			}
			wait := min(w.debounce, first.Add(w.maxDelay).Sub(now))
			timer.Reset(max(wait, 0))
		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			// An overflowed event queue loses events, not the change: the
			// reload reads the files as they are now.
			w.logger.Warn("watching the policy files", "err", err.Error())
			if errors.Is(err, fsnotify.ErrEventOverflow) && fire == nil {
				first = time.Now()
				timer = time.NewTimer(w.debounce)
				fire = timer.C
			}
		case <-fire:
			fire, timer = nil, nil
			if err := w.refresh(); err != nil {
				w.logger.Warn("watching the policy files", "err", err.Error())
			}
			reload()
		}
	}
}

// relevant says whether an event concerns the policy.
func (w *Watcher) relevant(ev fsnotify.Event) bool {
	f, ok := w.dirs[filepath.Dir(ev.Name)]
	return ok && f.match(filepath.Base(ev.Name))
}

// refresh brings the watched directories in line with what the policy path
// is now. The first directory that cannot be watched is reported; the
// others are still set up.
func (w *Watcher) refresh() error {
	next := watchTargets(w.path)
	var first error
	if w.fsw != nil {
		for dir := range w.dirs {
			if _, keep := next[dir]; !keep {
				// A removed directory has lost its watch already.
				_ = w.fsw.Remove(dir)
			}
		}
		for dir := range next {
			if err := w.fsw.Add(dir); err != nil && first == nil {
				first = fmt.Errorf("watch %s: %w", dir, err)
			}
		}
	}
	w.dirs = next
	return first
}

// watchTargets lists the directories to watch for the policy at path (an
// absolute path), with the names in each that matter. Directories are keyed
// by their real path: inotify knows a directory once, under the last name
// it was added with, so two spellings of one directory must not both be
// added.
func watchTargets(path string) map[string]nameFilter {
	targets := map[string]nameFilter{}
	add := func(dir, name string, yaml bool) {
		if real, err := filepath.EvalSymlinks(dir); err == nil {
			dir = real
		}
		f, ok := targets[dir]
		if !ok {
			f = nameFilter{names: map[string]bool{}}
		}
		f.names[name] = true
		f.yaml = f.yaml || yaml
		targets[dir] = f
	}
	// followLink watches the directory of a symbolic link's target too.
	followLink := func(p string) {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			add(filepath.Dir(real), filepath.Base(real), false)
		}
	}
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		add(path, configMapData, true)
		entries, _ := os.ReadDir(path)
		for _, e := range entries {
			if isPolicyFileName(e.Name()) {
				followLink(filepath.Join(path, e.Name()))
			}
		}
		return targets
	}
	// A file, or nothing at the moment (a replacement under way): its
	// directory, for its name.
	add(filepath.Dir(path), filepath.Base(path), false)
	add(filepath.Dir(path), configMapData, false)
	followLink(path)
	return targets
}
