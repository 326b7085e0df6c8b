package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The sidecar's footprint bounds (docs/performance.md says what the
// megabytes are): the stripped binary as make build builds it (issue 29's
// target, 40 MB; 29.2 MB measured, 41.1 MB before the message templates
// left text/template), and its resident memory idle with the example
// policy. Issue 29's target for the RSS, 24 MiB, is not reached: about
// 27–28 MiB is measured (34 MB before), of which about 20 MiB are the
// binary's own pages touched at start, 23 MiB before main runs. The bound
// holds what was reached with room for another machine's kernel and page
// cache, and still fails if the method pruning is lost (33.6 MiB).
const (
	maxSidecarBytes = 40_000_000
	maxIdleRSSKiB   = 32 << 10
)

// buildSidecar builds cmd/toolgate as make build does (static, stripped,
// -tags grpcnotrace) into dir, with the linker's dependency dump, and
// returns the binary's path and the dump.
func buildSidecar(t *testing.T, dir string) (string, []byte) {
	t.Helper()
	bin := filepath.Join(dir, "toolgate")
	cmd := exec.Command("go", "build", "-trimpath", "-tags", "grpcnotrace", "-ldflags", "-s -w -dumpdep", "-o", bin, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	var dump bytes.Buffer
	cmd.Stderr = &dump
	if err := cmd.Run(); err != nil {
		t.Fatalf("go build: %v\n%s", err, tail(dump.Bytes(), 2000))
	}
	return bin, dump.Bytes()
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// reflectMethodUsers lists the functions of a linker dependency dump that
// can call a method found by name at run time (marked <ReflectMethod>). One
// of them reachable makes the linker keep every exported method of every
// type that reaches an interface.
func reflectMethodUsers(dump []byte) []string {
	var users []string
	for line := range strings.Lines(string(dump)) {
		from, _, ok := strings.Cut(line, " -> ")
		if !ok {
			continue
		}
		if name, marked := strings.CutSuffix(from, " <ReflectMethod>"); marked && !slices.Contains(users, name) {
			users = append(users, name)
		}
	}
	return users
}

// TestSidecarFootprint builds the sidecar and checks it against the
// targets: no function that defeats the linker's pruning of methods (such
// as text/template's field lookup, which is why message templates run on
// internal/texttemplate), the binary's size, and its idle RSS with the
// example policy (the median of three starts; RSS is the binary's pages
// touched at start and the heap, docs/performance.md).
func TestSidecarFootprint(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the sidecar")
	}
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	t.Run("reflectMethodUsers", func(t *testing.T) {
		for _, c := range []struct {
			name, dump string
			want       []string
		}{
			{"none", "main.main -> fmt.Println\nfmt.Println -> os.Stdout\n", nil},
			{"one", "a.f -> text/template.(*state).evalField <ReflectMethod>\ntext/template.(*state).evalField <ReflectMethod> -> reflect.Value.MethodByName\n",
				[]string{"text/template.(*state).evalField"}},
		} {
			t.Run(c.name, func(t *testing.T) {
				if got := reflectMethodUsers([]byte(c.dump)); !slices.Equal(got, c.want) {
					t.Errorf("got %q, want %q", got, c.want)
				}
			})
		}
	})
	bin, dump := buildSidecar(t, t.TempDir())
	t.Run("methods are pruned", func(t *testing.T) {
		if !bytes.Contains(dump, []byte(" -> ")) {
			t.Fatalf("the linker printed no dependency dump:\n%s", tail(dump, 500))
		}
		if users := reflectMethodUsers(dump); len(users) > 0 {
			t.Errorf("the sidecar reaches functions that look methods up by name, so the linker keeps every exported method: %s", strings.Join(users, ", "))
		}
	})
	t.Run("binary size", func(t *testing.T) {
		info, err := os.Stat(bin)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("stripped sidecar: %d bytes", info.Size())
		if info.Size() > maxSidecarBytes {
			t.Errorf("the stripped sidecar is %d bytes, above %d", info.Size(), maxSidecarBytes)
		}
	})
	t.Run("idle RSS", func(t *testing.T) {
		var rss []int
		for range 3 {
			rss = append(rss, idleRSS(t, bin))
		}
		slices.Sort(rss)
		t.Logf("idle RSS of toolgate serve with examples/policy.yaml: %v KiB", rss)
		if rss[1] > maxIdleRSSKiB {
			t.Errorf("idle RSS %d KiB (median of %v), above %d KiB", rss[1], rss, maxIdleRSSKiB)
		}
	})
}

// idleRSS starts bin serve on the example policy, waits until it has
// started and a second more, and returns its VmRSS in KiB.
func idleRSS(t *testing.T, bin string) int {
	t.Helper()
	cmd := exec.Command(bin, "serve", "-config", filepath.Join("..", "..", "examples", "policy.yaml"),
		"-listen", "127.0.0.1:0", "-admin", "127.0.0.1:0", "-drain-delay", "0s", "-grace", "0s")
	// What the process is given decides its GC settings: none, as a
	// container's sidecar without GOGC or GOMEMLIMIT.
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "GOGC=") || strings.HasPrefix(kv, "GOMEMLIMIT=") || strings.HasPrefix(kv, "GODEBUG=")
	})
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	started := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var line struct{ Msg string }
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "toolgate started" {
				started <- true
			}
		}
		close(started)
	}()
	select {
	case ok := <-started:
		if !ok {
			t.Fatal("toolgate serve ended before it started")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("toolgate serve did not start within 30s")
	}
	time.Sleep(time.Second)
	status, err := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^VmRSS:\s+(\d+) kB`).FindSubmatch(status)
	if m == nil {
		t.Fatalf("no VmRSS in\n%s", status)
	}
	kib, _ := strconv.Atoi(string(m[1]))
	return kib
}
