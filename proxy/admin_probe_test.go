package proxy

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestStoreProbe(t *testing.T) {
	errDown := errors.New("OOM command not allowed")

	t.Run("a result is shared for the interval, then checked again", func(t *testing.T) {
		var calls atomic.Int64
		var fail atomic.Bool
		p := NewStoreProbe(func(context.Context) error {
			calls.Add(1)
			if fail.Load() {
				return errDown
			}
			return nil
		}, 200*time.Millisecond)
		for range 5 {
			if err := p.Check(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
		if n := calls.Load(); n != 1 {
			t.Fatalf("%d checks within the interval, want 1", n)
		}
		fail.Store(true)
		time.Sleep(250 * time.Millisecond)
		if err := p.Check(t.Context()); !errors.Is(err, errDown) {
			t.Fatalf("Check after the interval = %v, want the store's error", err)
		}
		if err := p.Check(t.Context()); !errors.Is(err, errDown) || calls.Load() != 2 {
			t.Fatalf("Check = %v after %d checks; want the cached error after 2", err, calls.Load())
		}
	})

	t.Run("concurrent callers wait for the check in flight", func(t *testing.T) {
		var calls atomic.Int64
		release := make(chan struct{})
		p := NewStoreProbe(func(context.Context) error {
			calls.Add(1)
			<-release
			return errDown
		}, time.Minute)
		var wg sync.WaitGroup
		errs := make([]error, 10)
		for i := range errs {
			wg.Go(func() { errs[i] = p.Check(context.Background()) })
		}
		time.Sleep(50 * time.Millisecond)
		close(release)
		wg.Wait()
		for i, err := range errs {
			if !errors.Is(err, errDown) {
				t.Fatalf("caller %d got %v", i, err)
			}
		}
		if n := calls.Load(); n != 1 {
			t.Fatalf("%d checks ran, want 1", n)
		}
	})

	t.Run("a check cut short by its caller is not kept", func(t *testing.T) {
		var calls atomic.Int64
		p := NewStoreProbe(func(ctx context.Context) error {
			if calls.Add(1) == 1 {
				<-ctx.Done()
				return ctx.Err()
			}
			return nil
		}, time.Minute)
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
		defer cancel()
		if err := p.Check(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Check = %v, want the deadline", err)
		}
		if err := p.Check(t.Context()); err != nil {
			t.Fatalf("the next Check = %v, want a fresh check", err)
		}
	})
}
