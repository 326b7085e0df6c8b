package config

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/toolgate/toolgate/internal/testkit/policytest"
)

// reloadRecorder is a reload callback that reads the policy files as a
// reload would, and remembers what it saw.
type reloadRecorder struct {
	path string
	mu   sync.Mutex
	seen []string
}

func (r *reloadRecorder) reload() {
	content := readPolicy(r.path)
	r.mu.Lock()
	r.seen = append(r.seen, content)
	r.mu.Unlock()
}

func (r *reloadRecorder) last() (string, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.seen) == 0 {
		return "", 0
	}
	return r.seen[len(r.seen)-1], len(r.seen)
}

// waitFor waits until a reload has seen want.
func (r *reloadRecorder) waitFor(t *testing.T, want string) {
	t.Helper()
	policytest.Eventually(t, fmt.Sprintf("a reload that reads %q", want), func() bool {
		got, _ := r.last()
		return got == want
	})
}

// readPolicy reads a policy file, or a directory's policy files in order,
// joined with "|".
func readPolicy(path string) string {
	st, err := os.Stat(path)
	if err != nil {
		return "error: " + err.Error()
	}
	if !st.IsDir() {
		b, err := os.ReadFile(path)
		if err != nil {
			return "error: " + err.Error()
		}
		return string(b)
	}
	entries, _ := os.ReadDir(path)
	var parts []string
	for _, e := range entries {
		if isPolicyFileName(e.Name()) {
			b, err := os.ReadFile(filepath.Join(path, e.Name()))
			if err != nil {
				return "error: " + err.Error()
			}
			parts = append(parts, e.Name()+"="+string(b))
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, "|")
}

// startWatcher watches path with a short debounce until the test ends.
func startWatcher(t *testing.T, path string) *reloadRecorder {
	t.Helper()
	w, err := NewWatcher(path, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	w.debounce = 20 * time.Millisecond
	rec := &reloadRecorder{path: path}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.Run(ctx, rec.reload)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return rec
}

func TestWatcherSeesAFileWrittenAndReplaced(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policy.yaml")
	policytest.WriteFile(t, path, "v1")
	rec := startWatcher(t, path)

	policytest.WriteFile(t, path, "v2 written in place")
	rec.waitFor(t, "v2 written in place")
	// A replaced file is a new inode: the watch is on the directory, so
	// every later replacement is still seen.
	for i := 3; i <= 5; i++ {
		content := fmt.Sprintf("v%d replaced", i)
		policytest.ReplaceFile(t, path, content)
		rec.waitFor(t, content)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	rec.waitFor(t, "error: stat "+path+": no such file or directory")
	policytest.WriteFile(t, path, "v6 recreated")
	rec.waitFor(t, "v6 recreated")
}

func TestWatcherFollowsASymlinkedFile(t *testing.T) {
	// The policy path is a link into another directory; edits behind the
	// link are seen, and so are edits behind a repointed link.
	dir, elsewhere, third := t.TempDir(), t.TempDir(), t.TempDir()
	path := filepath.Join(dir, "policy.yaml")
	policytest.WriteFile(t, filepath.Join(elsewhere, "real.yaml"), "v1")
	if err := os.Symlink(filepath.Join(elsewhere, "real.yaml"), path); err != nil {
		t.Fatal(err)
	}
	rec := startWatcher(t, path)

	policytest.WriteFile(t, filepath.Join(elsewhere, "real.yaml"), "v2 behind the link")
	rec.waitFor(t, "v2 behind the link")

	policytest.WriteFile(t, filepath.Join(third, "other.yaml"), "v3 new target")
	tmp := filepath.Join(dir, "link.tmp")
	if err := os.Symlink(filepath.Join(third, "other.yaml"), tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	rec.waitFor(t, "v3 new target")
	policytest.WriteFile(t, filepath.Join(third, "other.yaml"), "v4 behind the new link")
	rec.waitFor(t, "v4 behind the new link")
}

func TestWatcherDirectoryMode(t *testing.T) {
	dir := t.TempDir()
	policytest.WriteFile(t, filepath.Join(dir, "a.yaml"), "a1")
	rec := startWatcher(t, dir)

	policytest.WriteFile(t, filepath.Join(dir, "b.yml"), "b1")
	rec.waitFor(t, "a.yaml=a1|b.yml=b1")
	policytest.ReplaceFile(t, filepath.Join(dir, "a.yaml"), "a2")
	rec.waitFor(t, "a.yaml=a2|b.yml=b1")
	if err := os.Remove(filepath.Join(dir, "b.yml")); err != nil {
		t.Fatal(err)
	}
	rec.waitFor(t, "a.yaml=a2")
	if err := os.Rename(filepath.Join(dir, "a.yaml"), filepath.Join(dir, "c.yaml")); err != nil {
		t.Fatal(err)
	}
	rec.waitFor(t, "c.yaml=a2")
}

func TestWatcherSeesAConfigMapUpdate(t *testing.T) {
	for _, mode := range []string{"directory", "file"} {
		t.Run("with -config naming the "+mode, func(t *testing.T) {
			cm := policytest.NewConfigMap(t, map[string]string{"policy.yaml": "v1"})
			path := cm.Dir
			if mode == "file" {
				path = filepath.Join(cm.Dir, "policy.yaml")
			}
			want := func(v string) string {
				if mode == "file" {
					return v
				}
				return "policy.yaml=" + v
			}
			rec := startWatcher(t, path)
			for i := 2; i <= 4; i++ {
				v := fmt.Sprintf("v%d", i)
				cm.Update(t, map[string]string{"policy.yaml": v})
				rec.waitFor(t, want(v))
			}
			if mode == "directory" {
				// A file added to the ConfigMap appears as a new link.
				cm.Update(t, map[string]string{"policy.yaml": "v5", "tools.yaml": "t1"})
				rec.waitFor(t, "policy.yaml=v5|tools.yaml=t1")
			}
		})
	}
}

func TestWatcherRelevantEvents(t *testing.T) {
	cm := policytest.NewConfigMap(t, map[string]string{"policy.yaml": "v1"})
	plain := policytest.RealTempDir(t)
	policytest.WriteFile(t, filepath.Join(plain, "policy.yaml"), "v1")
	data, err := filepath.EvalSymlinks(filepath.Join(cm.Dir, configMapData))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		path  string // the -config path
		event string // the event's file
		want  bool
	}{
		{"the policy file counts", filepath.Join(plain, "policy.yaml"), filepath.Join(plain, "policy.yaml"), true},
		{"a neighbour of the policy file does not", filepath.Join(plain, "policy.yaml"), filepath.Join(plain, "other.yaml"), false},
		{"an editor's temporary file does not", filepath.Join(plain, "policy.yaml"), filepath.Join(plain, ".policy.yaml.swp"), false},
		{"..data next to the policy file counts", filepath.Join(cm.Dir, "policy.yaml"), filepath.Join(cm.Dir, "..data"), true},
		{"the file behind the link counts", filepath.Join(cm.Dir, "policy.yaml"), filepath.Join(data, "policy.yaml"), true},
		{"a yaml file in the policy directory counts", plain, filepath.Join(plain, "new.yml"), true},
		{"a hidden yaml file in the policy directory does not", plain, filepath.Join(plain, ".new.yaml"), false},
		{"another file in the policy directory does not", plain, filepath.Join(plain, "README.md"), false},
		{"..data in the policy directory counts", cm.Dir, filepath.Join(cm.Dir, "..data"), true},
		{"..data_tmp in the policy directory does not", cm.Dir, filepath.Join(cm.Dir, "..data_tmp"), false},
		{"a file in a subdirectory does not", plain, filepath.Join(plain, "sub", "a.yaml"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := &Watcher{path: tt.path}
			if err := w.refresh(); err != nil {
				t.Fatal(err)
			}
			ev := fsnotify.Event{Name: tt.event, Op: fsnotify.Create}
			if got := w.relevant(ev); got != tt.want {
				t.Errorf("relevant(%s) = %v, want %v (watching %v)", tt.event, got, tt.want, w.dirs)
			}
		})
	}
}

// loopHarness runs the watcher's event loop on fake time, fed by hand.
type loopHarness struct {
	events  chan fsnotify.Event
	errs    chan error
	reloads atomic.Int32
	stop    func()
}

func startLoop(t *testing.T, path string, debounce, maxDelay time.Duration) *loopHarness {
	w := &Watcher{path: path, debounce: debounce, maxDelay: maxDelay, logger: slog.New(slog.DiscardHandler)}
	if err := w.refresh(); err != nil {
		t.Fatal(err)
	}
	h := &loopHarness{events: make(chan fsnotify.Event), errs: make(chan error)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.loop(ctx, h.events, h.errs, func() { h.reloads.Add(1) })
	}()
	h.stop = func() {
		cancel()
		<-done
	}
	return h
}

func (h *loopHarness) count() int32 {
	synctest.Wait()
	return h.reloads.Load()
}

func TestWatcherDebounce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policy.yaml")
	policytest.WriteFile(t, path, "v1")
	write := fsnotify.Event{Name: path, Op: fsnotify.Write}

	t.Run("a burst of events is one reload, after the burst", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			h := startLoop(t, path, 200*time.Millisecond, 2*time.Second)
			defer h.stop()
			for range 5 {
				h.events <- write
				time.Sleep(150 * time.Millisecond)
			}
			h.events <- fsnotify.Event{Name: path, Op: fsnotify.Rename}
			time.Sleep(199 * time.Millisecond)
			if n := h.count(); n != 0 {
				t.Fatalf("%d reloads before the burst settled", n)
			}
			time.Sleep(2 * time.Millisecond)
			if n := h.count(); n != 1 {
				t.Fatalf("%d reloads after the burst, want 1", n)
			}
			time.Sleep(time.Minute)
			if n := h.count(); n != 1 {
				t.Fatalf("%d reloads a minute later, want 1", n)
			}
		})
	})
	t.Run("events that never stop still reload every maxDelay", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			h := startLoop(t, path, 200*time.Millisecond, 1050*time.Millisecond)
			defer h.stop()
			// Events at 0, 100ms, … 2400ms: bursts close at 1050ms and
			// 2150ms (maxDelay after their first event), the last one
			// 200ms after 2400ms.
			for i := range 25 {
				if i > 0 {
					time.Sleep(100 * time.Millisecond)
				}
				h.events <- write
			}
			if n := h.count(); n != 2 {
				t.Fatalf("%d reloads while events kept coming, want 2", n)
			}
			time.Sleep(300 * time.Millisecond)
			if n := h.count(); n != 3 {
				t.Fatalf("%d reloads in all, want 3", n)
			}
		})
	})
	t.Run("events on other files are ignored", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			h := startLoop(t, path, 200*time.Millisecond, 2*time.Second)
			defer h.stop()
			dir := filepath.Dir(path)
			for _, name := range []string{"other.yaml", ".policy.yaml.swp", "..2026_11_30_00_00_00.000000001", "..data_tmp"} {
				h.events <- fsnotify.Event{Name: filepath.Join(dir, name), Op: fsnotify.Create}
			}
			time.Sleep(time.Minute)
			if n := h.count(); n != 0 {
				t.Fatalf("%d reloads for unrelated files", n)
			}
		})
	})
	t.Run("an event queue overflow reloads, since changes may be lost", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			h := startLoop(t, path, 200*time.Millisecond, 2*time.Second)
			defer h.stop()
			h.errs <- fsnotify.ErrEventOverflow
			time.Sleep(time.Second)
			if n := h.count(); n != 1 {
				t.Fatalf("%d reloads after an overflow, want 1", n)
			}
		})
	})
}
