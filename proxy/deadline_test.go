package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/toolgate/toolgate/proxy/upstream"
)

// deadlineContext is a context bounded by a timeout, and the end of the
// call that holds it: the call context (deadline.go), or the
// context.WithTimeout it stands in for.
type deadlineContext struct {
	name string
	make func(parent context.Context, timeout time.Duration) (context.Context, func())
}

var deadlineContexts = []deadlineContext{
	{"context.WithTimeout", func(parent context.Context, timeout time.Duration) (context.Context, func()) {
		ctx, cancel := context.WithTimeout(parent, timeout)
		return ctx, cancel
	}},
	{"callContext", func(parent context.Context, timeout time.Duration) (context.Context, func()) {
		c := newCallContext(parent, timeout)
		return c, c.end
	}},
}

type probeKey struct{}

// TestCallContextBehavesAsWithTimeout is the call context's differential
// test: every scenario, run on the call context and on the
// context.WithTimeout it replaces, writes down what a user of the context
// sees (Err, Done, Cause, Deadline, values, AfterFunc, derived contexts)
// at each step, and the two records must be equal. Time is synctest's, so
// "a deadline passed" is exact.
func TestCallContextBehavesAsWithTimeout(t *testing.T) {
	const timeout = time.Second
	scenarios := []struct {
		name string
		run  func(rec func(string, ...any), ctx context.Context, cancelParent, end func())
	}{
		{"nothing waits and the deadline passes", func(rec func(string, ...any), ctx context.Context, _, _ func()) {
			rec("err before %v", ctx.Err())
			time.Sleep(timeout - time.Nanosecond)
			rec("err just before %v", ctx.Err())
			time.Sleep(time.Nanosecond)
			synctest.Wait()
			rec("err at %v cause %v", ctx.Err(), context.Cause(ctx))
			rec("done closed %v", closed(ctx.Done()))
		}},
		{"Done waits and the deadline passes", func(rec func(string, ...any), ctx context.Context, _, _ func()) {
			done := ctx.Done()
			rec("done before %v", closed(done))
			start := time.Now()
			<-done
			rec("waited %v err %v cause %v", time.Since(start), ctx.Err(), context.Cause(ctx))
		}},
		{"the agent leaves and nothing waits", func(rec func(string, ...any), ctx context.Context, cancelParent, _ func()) {
			cancelParent()
			rec("err %v cause %v done closed %v", ctx.Err(), context.Cause(ctx), closed(ctx.Done()))
		}},
		{"the agent leaves while Done waits", func(rec func(string, ...any), ctx context.Context, cancelParent, _ func()) {
			done := ctx.Done()
			time.Sleep(timeout / 2)
			cancelParent()
			<-done
			rec("err %v cause %v", ctx.Err(), context.Cause(ctx))
			time.Sleep(timeout)
			rec("after the deadline err %v", ctx.Err())
		}},
		{"the call ends", func(rec func(string, ...any), ctx context.Context, _, end func()) {
			end()
			rec("err %v cause %v done closed %v", ctx.Err(), context.Cause(ctx), closed(ctx.Done()))
			end()
			time.Sleep(2 * timeout)
			rec("after the deadline err %v", ctx.Err())
		}},
		{"AfterFunc runs at the deadline", func(rec func(string, ...any), ctx context.Context, _, _ func()) {
			start := time.Now()
			ran := make(chan time.Duration, 1)
			stop := context.AfterFunc(ctx, func() { ran <- time.Since(start) })
			rec("ran after %v", <-ran)
			rec("stop %v err %v", stop(), ctx.Err())
		}},
		{"AfterFunc runs when the agent leaves", func(rec func(string, ...any), ctx context.Context, cancelParent, _ func()) {
			ran := make(chan error, 1)
			context.AfterFunc(ctx, func() { ran <- ctx.Err() })
			cancelParent()
			rec("ran with %v", <-ran)
		}},
		{"AfterFunc stopped before the end", func(rec func(string, ...any), ctx context.Context, _, end func()) {
			ran := false
			stop := context.AfterFunc(ctx, func() { ran = true })
			rec("stop %v", stop())
			rec("stop again %v", stop())
			end()
			synctest.Wait()
			rec("ran %v", ran)
		}},
		{"AfterFunc after the end runs at once", func(rec func(string, ...any), ctx context.Context, _, end func()) {
			end()
			ran := make(chan error, 1)
			stop := context.AfterFunc(ctx, func() { ran <- ctx.Err() })
			rec("ran with %v stop %v", <-ran, stop())
		}},
		{"a derived context ends at the deadline", func(rec func(string, ...any), ctx context.Context, _, _ func()) {
			child, cancel := context.WithCancel(ctx)
			defer cancel()
			shorter, cancel2 := context.WithTimeout(ctx, 2*timeout)
			defer cancel2()
			d, _ := shorter.Deadline()
			rec("derived deadline in %v", time.Until(d))
			<-child.Done()
			rec("child err %v cause %v", child.Err(), context.Cause(child))
			<-shorter.Done()
			rec("shorter err %v", shorter.Err())
		}},
		{"a derived context ends when the agent leaves", func(rec func(string, ...any), ctx context.Context, cancelParent, _ func()) {
			child, cancel := context.WithCancelCause(ctx)
			defer cancel(nil)
			cancelParent()
			<-child.Done()
			rec("child err %v cause %v", child.Err(), context.Cause(child))
		}},
		{"a context without its cancellation keeps the values", func(rec func(string, ...any), ctx context.Context, _, end func()) {
			detached := context.WithoutCancel(ctx)
			end()
			rec("detached err %v value %v", detached.Err(), detached.Value(probeKey{}))
		}},
		{"values and the deadline", func(rec func(string, ...any), ctx context.Context, _, _ func()) {
			d, ok := ctx.Deadline()
			rec("deadline in %v %v value %v", time.Until(d), ok, ctx.Value(probeKey{}))
		}},
	}
	for _, sc := range scenarios {
		for _, parent := range []string{"cancellable", "with an earlier deadline", "already cancelled"} {
			t.Run(sc.name+", parent "+parent, func(t *testing.T) {
				var records []string
				for _, dc := range deadlineContexts {
					synctest.Test(t, func(t *testing.T) {
						var b strings.Builder
						rec := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
						base := context.WithValue(context.Background(), probeKey{}, "v")
						p, cancelParent := context.WithCancel(base)
						defer cancelParent()
						switch parent {
						case "with an earlier deadline":
							var cancel func()
							p, cancel = context.WithTimeout(p, timeout/4)
							defer cancel()
						case "already cancelled":
							cancelParent()
						}
						ctx, end := dc.make(p, timeout)
						defer end()
						sc.run(rec, ctx, cancelParent, end)
						records = append(records, b.String())
					})
				}
				if records[0] != records[1] {
					t.Errorf("%s:\n%s\n%s:\n%s", deadlineContexts[0].name, records[0], deadlineContexts[1].name, records[1])
				}
			})
		}
	}
}

// TestCallContextKeepsItsOwnCause: a call context that ended at its
// deadline says so in context.Cause even when its parent is cancelled
// later with a cause of its own, as context.WithTimeout's does; the
// parent's cancellation is hidden from Value (causeKey).
func TestCallContextKeepsItsOwnCause(t *testing.T) {
	if causeKey == nil {
		t.Fatal("context.Cause asked no key of the probe")
	}
	for _, dc := range deadlineContexts {
		t.Run(dc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				parent, cancel := context.WithCancelCause(context.Background())
				ctx, end := dc.make(parent, time.Second)
				defer end()
				time.Sleep(2 * time.Second)
				cancel(errors.New("the agent left"))
				if got := context.Cause(ctx); got != context.DeadlineExceeded {
					t.Errorf("Cause = %v, want %v", got, context.DeadlineExceeded)
				}
			})
		})
	}
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestCallContextNamesItsCancellation: the HTTP/1 client watches the
// parent the call context names, and sets the deadline on the connection
// itself (upstream.Cancellation); a context derived from the call context
// does not name it, so the client watches that context whole.
func TestCallContextNamesItsCancellation(t *testing.T) {
	parent, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := newCallContext(parent, time.Second)
	defer c.end()
	var ctx context.Context = c
	if cc, ok := ctx.(upstream.Cancellation); !ok || cc.EndsWith() != parent {
		t.Errorf("the call context names %v, want the parent", cc)
	}
	if c.watching || c.timer != nil || c.done != nil {
		t.Error("a context nothing waited on made its timer")
	}
	derived, stop := context.WithCancel(c)
	defer stop()
	if _, ok := derived.(upstream.Cancellation); ok {
		t.Error("a context derived from the call context names its cancellation")
	}
}

// TestADerivedContextStopsTheBackendCall: a context derived from the call
// context, with a cancel of its own, stops a request the HTTP/1 client
// has in flight when it is cancelled, well before the call's deadline and
// with the agent still there.
func TestADerivedContextStopsTheBackendCall(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(io.Discard, nc); nc.Close() }()
		}
	}()
	client := upstream.NewH1Client(upstream.H1Options{Addr: ln.Addr().String(), MaxIdle: 1})
	defer client.CloseIdleConnections()
	c := newCallContext(context.Background(), time.Hour)
	defer c.end()
	ctx, cancel := context.WithCancel(c)
	time.AfterFunc(100*time.Millisecond, cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+ln.Addr().String()+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan *upstream.Report, 1)
	go func() {
		r := new(upstream.Report)
		client.Send(ctx, req, upstream.SendOptions{MaxBody: 1 << 20}, r)
		done <- r
	}()
	select {
	case r := <-done:
		if r.Err == nil {
			t.Errorf("status %d, want the request stopped", r.Status)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the cancelled request did not stop")
	}
}
