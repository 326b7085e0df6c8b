package config

import (
	"errors"
	"fmt"
	"io/fs"
	"runtime/debug"
	"time"

	"github.com/toolgate/toolgate/policy"
)

// SettleWindow is how long the policy files must have been unchanged before
// a Loader reads them as a policy: a file written in place by a writer that
// pauses for less than this between two writes is never read half written.
// Atomic replacements (a file renamed over the old one, a ConfigMap's
// ..data symlink swap) are complete whenever they are seen; they only wait
// out the window when they are younger than it.
const SettleWindow = 2 * time.Second

// SettleTimeout bounds the wait for files that keep changing: after it the
// load fails, the running policy stays, and the next file event tries
// again.
const SettleTimeout = 30 * time.Second

// ErrNotSettled is a load given up on files that never stood still.
var ErrNotSettled = errors.New("the policy files kept changing")

// LoaderOptions tune a Loader. Zero values are the defaults.
type LoaderOptions struct {
	// Options say how the files compile.
	Options
	// Settle is how long the files must have been unchanged; zero means
	// SettleWindow.
	Settle time.Duration
	// Timeout bounds the wait for files that keep changing; zero means
	// SettleTimeout.
	Timeout time.Duration
	// Now and Sleep are the clock; nil means time.Now and time.Sleep.
	Now   func() time.Time
	Sleep func(time.Duration)
	// GCPercent, when above zero, is the Go collector's target
	// (debug.SetGCPercent) while the policy compiles, when the process's
	// own is higher: compiling makes several times the policy's size in
	// short-lived values, and a sidecar's high GC target (cmd/toolgate
	// sets 400) would let them grow the heap, and the RSS, to that many
	// times the live heap. The process's target is restored after. Loads
	// through one Loader must not overlap (a Reloader serializes them);
	// the process's target must not change during one.
	GCPercent int
}

// Loader reads the policy at a path only once its files have settled, then
// compiles it; it is the one way serve and extproc read their policy, at
// start and on every reload.
//
// What it guarantees: the snapshot Load returns was compiled from content
// that (1) had not changed for the settle window when it was read, by the
// files' change times (ctime on Linux, which no writer can set back;
// modification time elsewhere), or, when those are in the future, by two
// reads a window apart that were identical; and (2) was still on disk,
// byte for byte, in a read made after compiling, right before the snapshot
// is handed to the swap. A read that fails either test is thrown away and
// the files are read again, until the timeout.
type Loader struct {
	path      string
	compile   func(*Files) (*policy.Snapshot, error)
	gcPercent int
	settle    time.Duration
	timeout   time.Duration
	now       func() time.Time
	sleep     func(time.Duration)
}

// NewLoader returns a Loader of the policy at path (a file or a directory).
func NewLoader(path string, opts LoaderOptions) *Loader {
	l := &Loader{path: path, settle: SettleWindow, timeout: SettleTimeout, now: time.Now, sleep: time.Sleep, gcPercent: opts.GCPercent}
	compileOpts := opts.Options
	l.compile = func(f *Files) (*policy.Snapshot, error) { return f.Compile(compileOpts) }
	if opts.Settle > 0 {
		l.settle = opts.Settle
	}
	if opts.Timeout > 0 {
		l.timeout = opts.Timeout
	}
	if opts.Now != nil {
		l.now = opts.Now
	}
	if opts.Sleep != nil {
		l.sleep = opts.Sleep
	}
	return l
}

// Path is the policy path the loader reads.
func (l *Loader) Path() string { return l.path }

// Load returns the policy compiled from settled files, or the error of
// settled files (a broken policy is reported only once it stands still),
// an I/O error, or ErrNotSettled.
func (l *Loader) Load() (*policy.Snapshot, error) {
	deadline := l.now().Add(l.timeout)
	// changing: the files were just seen to change, whatever their times
	// say (a file system with coarse times): wait a whole window.
	changing := false
	for {
		files, err := ReadFiles(l.path)
		if err != nil {
			return nil, err
		}
		wait := l.settle - l.now().Sub(newestChange(files.Stats))
		if changing {
			wait = l.settle
		}
		if wait > 0 {
			// Changed within the window, or (clock skew) in the future:
			// wait, at most one window, and read again.
			l.sleep(min(wait, l.settle))
			again, err := ReadFiles(l.path)
			if err != nil {
				return nil, err
			}
			if again.Checksum != files.Checksum || !newestChange(again.Stats).Equal(newestChange(files.Stats)) {
				if err := l.giveUp(deadline); err != nil {
					return nil, err
				}
				changing = true
				continue
			}
			files = again
		}
		sum := files.Checksum
		snap, cerr := l.compileWithGC(files)
		// Right before the swap: the files must still hold what was
		// compiled. (Only checksums are kept: the bytes are not held
		// beside the compiled policy.)
		now, err := readChecksum(l.path)
		if err != nil {
			return nil, err
		}
		if now == sum {
			return snap, cerr
		}
		if err := l.giveUp(deadline); err != nil {
			return nil, err
		}
		changing = true
	}
}

// compileWithGC compiles files under the GC target of LoaderOptions.GCPercent.
func (l *Loader) compileWithGC(files *Files) (*policy.Snapshot, error) {
	if l.gcPercent > 0 {
		if was := debug.SetGCPercent(l.gcPercent); was < l.gcPercent {
			debug.SetGCPercent(was) // lower already, or off
		} else {
			defer debug.SetGCPercent(was)
		}
	}
	return l.compile(files)
}

func (l *Loader) giveUp(deadline time.Time) error {
	if l.now().After(deadline) {
		return fmt.Errorf("%s: %w for %v; not loaded", l.path, ErrNotSettled, l.timeout)
	}
	return nil
}

// newestChange is the latest change time among the files read.
func newestChange(stats []fs.FileInfo) time.Time {
	var newest time.Time
	for _, st := range stats {
		if t := changeTime(st); t.After(newest) {
			newest = t
		}
	}
	return newest
}
