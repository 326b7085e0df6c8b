package redistest

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
)

func TestServerStartsRestartsAndStops(t *testing.T) {
	s := Start(t)
	if err := ping(s.Addr()); err != nil {
		t.Fatalf("PING after Start: %v", err)
	}
	if want := "redis://" + s.Addr() + "/0"; s.URL() != want {
		t.Fatalf("URL = %q, want %q", s.URL(), want)
	}
	addr := s.Addr()
	s.Restart()
	if s.Addr() != addr {
		t.Fatalf("Restart moved the server from %s to %s", addr, s.Addr())
	}
	if err := ping(s.Addr()); err != nil {
		t.Fatalf("PING after Restart: %v", err)
	}
	s.Stop()
	if err := ping(addr); err == nil {
		t.Fatal("PING answered after Stop")
	}
	s.Stop() // a second Stop does nothing
}

// recordingTB stands in for a test to watch Start skip or fail.
type recordingTB struct {
	testing.TB
	skipped, failed string
}

func (r *recordingTB) Helper() {}

func (r *recordingTB) Skipf(format string, args ...any) {
	r.skipped = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (r *recordingTB) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// startMissing runs Start with no redis-server binary to be found.
func startMissing(t *testing.T) *recordingTB {
	t.Setenv(BinaryEnv, "/nonexistent/redis-server")
	rec := &recordingTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Start(rec)
	}()
	<-done
	return rec
}

func TestMissingBinary(t *testing.T) {
	t.Run("skips when redis is not required", func(t *testing.T) {
		t.Setenv(RequireEnv, "")
		os.Unsetenv(RequireEnv) // t.Setenv restores the original value
		rec := startMissing(t)
		if rec.failed != "" || !strings.Contains(rec.skipped, "redis-server") || !strings.Contains(rec.skipped, RequireEnv) {
			t.Fatalf("skipped %q, failed %q; want a skip naming the binary and %s", rec.skipped, rec.failed, RequireEnv)
		}
	})
	t.Run("fails when redis is required", func(t *testing.T) {
		t.Setenv(RequireEnv, "1")
		rec := startMissing(t)
		if rec.skipped != "" || !strings.Contains(rec.failed, "redis-server") {
			t.Fatalf("skipped %q, failed %q; want a failure", rec.skipped, rec.failed)
		}
	})
}
