package upstream

import (
	"bytes"
	"runtime"
	"testing"
)

// TestLargeAnswersReuseTheirArrays: an answer whose Content-Length says it
// is large reads into an array a large answer gave back, not into a fresh
// one the size of the answer on every call; a small answer never takes
// such an array.
func TestLargeAnswersReuseTheirArrays(t *testing.T) {
	large := bytes.Repeat([]byte("x"), 1<<20)
	const reads = 40
	t.Run("a large answer reads into a pooled array", func(t *testing.T) {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range reads {
			var r Report
			r.readAnswerBody(bytes.NewReader(large), 2<<20, int64(len(large)))
			if r.BodyErr != nil || !bytes.Equal(r.Body, large) {
				t.Fatalf("read %d bytes, error %v", len(r.Body), r.BodyErr)
			}
			r.Release()
		}
		runtime.ReadMemStats(&after)
		// Without the pool every read allocates the answer's size; with
		// it only the first, and those whose array a collection took
		// (sync.Pool drops a quarter of its puts under the race
		// detector).
		if got := after.TotalAlloc - before.TotalAlloc; got > reads/2*uint64(len(large)) {
			t.Errorf("%d reads of 1 MiB allocated %d MiB", reads, got>>20)
		}
	})
	t.Run("a small answer never takes a large array", func(t *testing.T) {
		for range reads {
			var r Report
			r.readAnswerBody(bytes.NewReader(large), 2<<20, int64(len(large)))
			r.Release()
			var s Report
			s.readAnswerBody(bytes.NewReader([]byte(`{}`)), 2<<20, 2)
			if c := cap(*s.buf); c > maxSmallBody {
				t.Fatalf("a 2-byte answer read into an array of %d bytes", c)
			}
			s.Release()
		}
	})
}
