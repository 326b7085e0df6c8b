package upstream

import (
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// FileCheckInterval is how often a credential file in use is looked at
// for a change. A rotated file is used within this time of its change.
const FileCheckInterval = time.Second

// watchedFiles is a value read from files (a secret, a CA pool, a client
// certificate) and read again when they change: a mounted Kubernetes
// Secret is rotated by swapping its "..data" symlink, a certificate by
// cert-manager rewriting it.
//
// Files are checked by stat, at most once per FileCheckInterval and only
// when the value is used, not watched with fsnotify: a stat follows the
// symlinks, so the kubelet's swap shows as another file with no special
// case, while inotify watches sit on one directory entry (the swap raises
// events for "..data", not for the names used; a watch on a replaced
// directory goes silent), each takes a goroutine whose lifetime must
// follow policy reloads, and every watch counts against the node's
// inotify limits. A stat a second per file in use costs nothing next to
// a backend call, and nothing runs while an upstream is idle.
//
// A change that cannot be read or used keeps the last good value, and
// logs a warning (once per distinct error).
type watchedFiles[T any] struct {
	paths []string
	load  func() (T, error)
	now   func() time.Time
	log   *slog.Logger
	what  string // "the upstream's password file", for the log

	cur  atomic.Pointer[T]
	next atomic.Int64 // the clock's UnixNano at which to look again

	mu      sync.Mutex // held while looking
	stats   []os.FileInfo
	lastErr string
}

// newWatchedFiles reads the value once; a failure is logged and retried
// when the value is next used.
func newWatchedFiles[T any](paths []string, load func() (T, error), env Env, what string) *watchedFiles[T] {
	w := &watchedFiles[T]{paths: paths, load: load, now: env.Now, log: env.Logger, what: what}
	w.mu.Lock()
	w.refresh(w.now())
	w.mu.Unlock()
	return w
}

// get returns the current value, looking at the files first when it is
// time to. While another goroutine looks, the current value is used.
func (w *watchedFiles[T]) get() (T, error) {
	if now := w.now(); now.UnixNano() >= w.next.Load() && w.mu.TryLock() {
		if now.UnixNano() >= w.next.Load() {
			w.refresh(now)
		}
		w.mu.Unlock()
	}
	if v := w.cur.Load(); v != nil {
		return *v, nil
	}
	var zero T
	return zero, errNoCredentialFile
}

// errNoCredentialFile: no good value was ever read from the files.
var errNoCredentialFile = credentialError("a credential file could not be read (see the log)")

// credentialError is an error whose text is fixed and safe to log.
type credentialError string

func (e credentialError) Error() string { return string(e) }

// refresh reads the files again if any of them changed. w.mu is held.
func (w *watchedFiles[T]) refresh(now time.Time) {
	w.next.Store(now.Add(FileCheckInterval).UnixNano())
	stats := make([]os.FileInfo, len(w.paths))
	changed := w.cur.Load() == nil || len(w.stats) != len(w.paths)
	for i, p := range w.paths {
		st, err := os.Stat(p)
		if err != nil {
			w.fail(err)
			return
		}
		stats[i] = st
		if !changed && !sameFile(w.stats[i], st) {
			changed = true
		}
	}
	if !changed {
		return
	}
	v, err := w.load()
	if err != nil {
		// The stats are not kept: the next look reads the files again, so
		// a pair rewritten one file at a time is picked up once both are.
		w.fail(err)
		return
	}
	w.stats = stats
	w.cur.Store(&v)
	if w.lastErr != "" {
		w.lastErr = ""
		w.log.Info("credential file usable again", "what", w.what, "files", strings.Join(w.paths, ","))
	}
}

// fail logs a failed look once per distinct error; the value stays.
func (w *watchedFiles[T]) fail(err error) {
	msg := err.Error()
	if msg == w.lastErr {
		return
	}
	w.lastErr = msg
	kept := "keeping the last good value"
	if w.cur.Load() == nil {
		kept = "no good value yet; calls that need it fail"
	}
	w.log.Warn("credential file unusable; "+kept, "what", w.what, "files", strings.Join(w.paths, ","), "err", msg)
}

// sameFile reports whether two stats are of the same, unchanged file: a
// swapped symlink shows as another inode, a rewrite as another size or
// modification time.
func sameFile(a, b os.FileInfo) bool {
	return os.SameFile(a, b) && a.Size() == b.Size() && a.ModTime().Equal(b.ModTime())
}
