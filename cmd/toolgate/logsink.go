package main

import (
	"bufio"
	"io"
	"sync"
	"time"
)

// logSink buffers log lines and flushes them every flushEvery and on Close.
// A call writes one log line; one write system call per line is a visible
// share of a call's CPU at high rates, so lines are written in batches, as
// production loggers do. A line is at most flushEvery late, and warnings
// and errors are flushed at once.
type logSink struct {
	mu   sync.Mutex
	w    *bufio.Writer
	stop chan struct{}
	done chan struct{}
}

const flushEvery = 200 * time.Millisecond

func newLogSink(w io.Writer) *logSink {
	s := &logSink{w: bufio.NewWriterSize(w, 64<<10), stop: make(chan struct{}), done: make(chan struct{})}
	go every(flushEvery, s.stop, s.done, s.Flush)
	return s
}

// every runs f each interval until stop closes, then closes done.
func every(interval time.Duration, stop <-chan struct{}, done chan<- struct{}, f func()) {
	defer close(done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			f()
		}
	}
}

// Write buffers one log line.
func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// Flush writes the buffered lines.
func (s *logSink) Flush() {
	s.mu.Lock()
	_ = s.w.Flush()
	s.mu.Unlock()
}

// Close stops the flusher and writes what is left.
func (s *logSink) Close() {
	close(s.stop)
	<-s.done
	s.Flush()
}
