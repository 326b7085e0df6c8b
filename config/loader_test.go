package config

import (
	"errors"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/testkit/policytest"
	"github.com/toolgate/toolgate/policy"
)

// settlePolicy is a small valid policy; its one tool's description tells
// versions apart.
func settlePolicy(version string) string {
	return `version: 1
upstreams:
  svc: {url: "http://127.0.0.1:1"}
tools:
  t:
    description: "version ` + version + `"
    upstream: svc
    request: {method: GET, path: /t}
`
}

// loaderClock is the loader's clock and sleep: time moves only when the
// loader sleeps, and onSleep runs at each sleep (a writer at work).
type loaderClock struct {
	mu      sync.Mutex
	now     time.Time
	sleeps  []time.Duration
	onSleep func(n int)
}

func (c *loaderClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *loaderClock) Sleep(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.sleeps = append(c.sleeps, d)
	n := len(c.sleeps)
	c.mu.Unlock()
	if c.onSleep != nil {
		c.onSleep(n)
	}
}

// testLoader loads path with clock c (starting at start) and counts
// compilations; onCompile runs after each one.
func testLoader(path string, c *loaderClock, start time.Time, onCompile func(n int)) (*Loader, *int) {
	c.now = start
	l := NewLoader(path, LoaderOptions{Now: c.Now, Sleep: c.Sleep})
	compiles := 0
	inner := l.compile
	l.compile = func(f *Files) (*policy.Snapshot, error) {
		snap, err := inner(f)
		compiles++
		if onCompile != nil {
			onCompile(compiles)
		}
		return snap, err
	}
	return l, &compiles
}

func description(snap *policy.Snapshot) string {
	if snap == nil || snap.Tools["t"] == nil {
		return ""
	}
	return snap.Tools["t"].Description
}

func TestLoaderReadsSettledFilesOnly(t *testing.T) {
	t.Run("files unchanged for the window load at once", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "policy.yaml")
		policytest.WriteFile(t, path, settlePolicy("1"))
		c := &loaderClock{}
		l, compiles := testLoader(path, c, time.Now().Add(time.Hour), nil)
		snap, err := l.Load()
		if err != nil || description(snap) != "version 1" {
			t.Fatalf("load = %q, %v", description(snap), err)
		}
		if len(c.sleeps) != 0 || *compiles != 1 {
			t.Errorf("slept %v and compiled %d times for files an hour old", c.sleeps, *compiles)
		}
	})
	t.Run("files changed within the window are read again once it has passed", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "policy.yaml")
		policytest.WriteFile(t, path, settlePolicy("1"))
		c := &loaderClock{}
		l, _ := testLoader(path, c, time.Now(), nil)
		snap, err := l.Load()
		if err != nil || description(snap) != "version 1" {
			t.Fatalf("load = %q, %v", description(snap), err)
		}
		if len(c.sleeps) != 1 || c.sleeps[0] <= 0 || c.sleeps[0] > SettleWindow {
			t.Errorf("sleeps %v, want one of at most the window", c.sleeps)
		}
	})
	t.Run("change times in the future are waited out by one window and two equal reads", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "policy.yaml")
		policytest.WriteFile(t, path, settlePolicy("1"))
		c := &loaderClock{}
		l, _ := testLoader(path, c, time.Now().Add(-time.Hour), nil)
		snap, err := l.Load()
		if err != nil || description(snap) != "version 1" {
			t.Fatalf("load = %q, %v", description(snap), err)
		}
		if len(c.sleeps) != 1 || c.sleeps[0] != SettleWindow {
			t.Errorf("sleeps %v, want one window", c.sleeps)
		}
	})
	t.Run("a file half written when first read is never compiled", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "policy.yaml")
		full := settlePolicy("2")
		half := full[:strings.Index(full, "tools:")]
		policytest.WriteFile(t, path, half)
		c := &loaderClock{}
		// The writer finishes while the loader waits.
		c.onSleep = func(n int) {
			if n == 1 {
				f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
				if err != nil {
					t.Error(err)
					return
				}
				_, _ = f.WriteString(full[len(half):])
				f.Close()
			}
		}
		l, compiles := testLoader(path, c, time.Now(), nil)
		snap, err := l.Load()
		if err != nil || description(snap) != "version 2" {
			t.Fatalf("load = %q, %v", description(snap), err)
		}
		if *compiles != 1 {
			t.Errorf("compiled %d times, want once (the whole file only)", *compiles)
		}
		if len(c.sleeps) != 2 || c.sleeps[1] != SettleWindow {
			t.Errorf("sleeps %v: after a change the loader must wait a whole window again", c.sleeps)
		}
	})
	t.Run("a file that changes while it is compiled is not returned", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "policy.yaml")
		policytest.WriteFile(t, path, settlePolicy("1"))
		c := &loaderClock{}
		l, compiles := testLoader(path, c, time.Now().Add(time.Hour), func(n int) {
			if n == 1 {
				policytest.WriteFile(t, path, settlePolicy("2"))
			}
		})
		snap, err := l.Load()
		if err != nil || description(snap) != "version 2" {
			t.Fatalf("load = %q, %v: the snapshot of content no longer on disk was returned", description(snap), err)
		}
		if *compiles != 2 {
			t.Errorf("compiled %d times, want 2", *compiles)
		}
	})
	t.Run("files that never stop changing are given up on", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "policy.yaml")
		policytest.WriteFile(t, path, settlePolicy("0"))
		c := &loaderClock{}
		c.onSleep = func(n int) { policytest.WriteFile(t, path, settlePolicy(strings.Repeat("x", n))) }
		l, compiles := testLoader(path, c, time.Now(), nil)
		snap, err := l.Load()
		if !errors.Is(err, ErrNotSettled) || snap != nil {
			t.Fatalf("load = %v, %v; want ErrNotSettled", snap, err)
		}
		if *compiles != 0 {
			t.Errorf("compiled %d times files that never settled", *compiles)
		}
		if elapsed := c.Now().Sub(c.sleepsStart()); elapsed < SettleTimeout {
			t.Errorf("gave up after %v, before the timeout %v", elapsed, SettleTimeout)
		}
	})
	t.Run("a broken policy is reported once it stands still", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "policy.yaml")
		policytest.WriteFile(t, path, settlePolicy("1")+"bogus: true\n")
		c := &loaderClock{}
		l, _ := testLoader(path, c, time.Now(), nil)
		_, err := l.Load()
		var errs Errors
		if !errors.As(err, &errs) || !strings.Contains(err.Error(), "bogus: unknown key") {
			t.Fatalf("load error %v, want the policy's errors", err)
		}
	})
	t.Run("a missing file is an error at once", func(t *testing.T) {
		c := &loaderClock{}
		l, _ := testLoader(filepath.Join(t.TempDir(), "none.yaml"), c, time.Now(), nil)
		if _, err := l.Load(); !errors.Is(err, os.ErrNotExist) || len(c.sleeps) != 0 {
			t.Fatalf("load error %v after sleeps %v", err, c.sleeps)
		}
	})
	t.Run("a directory's files settle together", func(t *testing.T) {
		dir := t.TempDir()
		policytest.WriteFile(t, filepath.Join(dir, "a.yaml"), "version: 1\nupstreams:\n  svc: {url: \"http://127.0.0.1:1\"}\n")
		policytest.WriteFile(t, filepath.Join(dir, "b.yaml"), "version: 1\n")
		c := &loaderClock{}
		// The second file gets its tool while the loader waits.
		c.onSleep = func(n int) {
			if n == 1 {
				full := settlePolicy("3")
				policytest.WriteFile(t, filepath.Join(dir, "b.yaml"), "version: 1\n"+full[strings.Index(full, "tools:"):])
			}
		}
		l, compiles := testLoader(dir, c, time.Now(), nil)
		snap, err := l.Load()
		if err != nil || description(snap) != "version 3" || *compiles != 1 {
			t.Fatalf("load = %q, %v after %d compiles", description(snap), err, *compiles)
		}
	})
}

// sleepsStart is the clock's time before its first sleep.
func (c *loaderClock) sleepsStart() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.now
	for _, d := range c.sleeps {
		t = t.Add(-d)
	}
	return t
}

// TestLoaderLowersTheGCTargetWhileCompiling: LoaderOptions.GCPercent is the
// collector's target while the policy compiles when the process's is
// higher, and the process's target is back after; a lower one, or the
// collector off, is left alone.
func TestLoaderLowersTheGCTargetWhileCompiling(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.yaml")
	if err := os.WriteFile(path, []byte(settlePolicy("1")), 0o600); err != nil {
		t.Fatal(err)
	}
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	tests := []struct {
		name                   string
		process, option, while int
	}{
		{"a higher target is lowered", 400, 25, 25},
		{"a lower target stays", 10, 25, 10},
		{"a collector turned off stays off", -1, 25, -1},
		{"no option leaves the target alone", 400, 0, 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			debug.SetGCPercent(tt.process)
			l := NewLoader(path, LoaderOptions{Settle: time.Nanosecond, GCPercent: tt.option})
			inner := l.compile
			while := 0
			l.compile = func(f *Files) (*policy.Snapshot, error) {
				while = debug.SetGCPercent(tt.process)
				debug.SetGCPercent(while)
				return inner(f)
			}
			if _, err := l.Load(); err != nil {
				t.Fatal(err)
			}
			if while != tt.while {
				t.Errorf("GC target while compiling = %d, want %d", while, tt.while)
			}
			if after := debug.SetGCPercent(100); after != tt.process {
				t.Errorf("GC target after = %d, want %d", after, tt.process)
			}
		})
	}
}
