package main

import (
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/policy"
)

// settleWindow is how long the policy files must have been unchanged before
// toolgate reads them as a policy: a file written in place by a writer that
// pauses for less than this between two writes is never read half written.
// Atomic replacements (a file renamed over the old one, a ConfigMap's
// ..data symlink swap) are complete whenever they are seen; they only wait
// out the window when they are younger than it.
const settleWindow = 2 * time.Second

// settleTimeout bounds the wait for files that keep changing: after it the
// load fails, the running policy stays, and the next file event tries
// again.
const settleTimeout = 30 * time.Second

// errNotSettled is a load given up on files that never stood still.
var errNotSettled = errors.New("the policy files kept changing")

// policyLoader reads the policy at path only once its files have settled,
// then compiles it; it is the one way serve and extproc read their policy,
// at start and on every reload.
//
// What it guarantees: the snapshot it returns was compiled from content
// that (1) had not changed for settleWindow when it was read, by the
// files' change times (ctime on Linux, which no writer can set back;
// modification time elsewhere), or, when those are in the future, by two
// reads settleWindow apart that were identical; and (2) was still on disk,
// byte for byte, in a read made after compiling, right before the snapshot
// is handed to the swap. A read that fails either test is thrown away and
// the files are read again, until settleTimeout.
type policyLoader struct {
	path    string
	compile func(*config.Files) (*policy.Snapshot, error)
	settle  time.Duration
	timeout time.Duration
	now     func() time.Time
	sleep   func(time.Duration)
}

// newPolicyLoader loads the policy at path; check, when not nil, refuses a
// compiled policy the command cannot run (extproc's ambiguous routes).
func newPolicyLoader(path string, check func(*policy.Snapshot) error) *policyLoader {
	return &policyLoader{
		path: path,
		compile: func(f *config.Files) (*policy.Snapshot, error) {
			snap, err := f.Compile(config.Options{})
			if err == nil && check != nil {
				err = check(snap)
			}
			if err != nil {
				return nil, err
			}
			return snap, nil
		},
		settle:  settleWindow,
		timeout: settleTimeout,
		now:     time.Now,
		sleep:   time.Sleep,
	}
}

// load returns the policy compiled from settled files, or the error of
// settled files (a broken policy is reported only once it stands still),
// an I/O error, or errNotSettled.
func (l *policyLoader) load() (*policy.Snapshot, error) {
	deadline := l.now().Add(l.timeout)
	// changing: the files were just seen to change, whatever their times
	// say (a file system with coarse times): wait a whole window.
	changing := false
	for {
		files, err := config.ReadFiles(l.path)
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
			again, err := config.ReadFiles(l.path)
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
		snap, cerr := l.compile(files)
		// Right before the swap: the files must still hold what was
		// compiled.
		now, err := config.ReadFiles(l.path)
		if err != nil {
			return nil, err
		}
		if now.Checksum == files.Checksum {
			return snap, cerr
		}
		if err := l.giveUp(deadline); err != nil {
			return nil, err
		}
		changing = true
	}
}

func (l *policyLoader) giveUp(deadline time.Time) error {
	if l.now().After(deadline) {
		return fmt.Errorf("%s: %w for %v; not loaded", l.path, errNotSettled, l.timeout)
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
