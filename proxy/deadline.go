package proxy

import (
	"context"
	"sync"
	"time"

	"github.com/toolgate/toolgate/proxy/upstream"
)

// callContext is a call's context: its parent's values and cancellation,
// and the tool's deadline. It behaves as context.WithDeadline's context,
// but the timer, the done channel and the link into the parent's
// cancellation exist only once something waits on it (Done, or
// context.AfterFunc and the contexts derived from it).
//
// Most calls never wait: the stages run in turn on the agent's goroutine
// and ask Err, which reads the clock and the parent; toolgate's HTTP/1
// client takes the deadline from Deadline and sets it on the connection,
// and watches only the parent (upstream.Cancellation, asked of this
// context itself, so a context derived from it is watched whole). So a call pays for
// no timer of its own, where context.WithTimeout made a timer, linked the
// context into its parent, and the client's hook (context.AfterFunc) made
// a done channel and linked into that context in turn: about 5 % of a
// call's CPU (bench/RESULTS.md, 2026-12-03).
//
// Err is exact at any time: past the deadline, or once the parent ended,
// the context ends as it is asked, closing the done channel if there is
// one, so Err and Done never disagree. Cause is Err: unlike
// WithDeadline's, the context does not pass on a cause its parent was
// cancelled with (nothing in toolgate sets one, and net/http's request
// contexts carry none).
type callContext struct {
	parent context.Context
	// parent's values are this context's, but for its cancellation
	// (causeKey), so that context.Cause and the contexts derived from
	// this one do not take the parent's cancellation for this context's.
	deadline time.Time // the earlier of the tool's and the parent's

	mu       sync.Mutex
	err      error
	done     chan struct{} // made by the first Done
	watching bool          // the timer and the parent's hook are set
	timer    *time.Timer
	unhook   func() bool // stops the hook on the parent's end
	hooks    []*afterHook
}

var _ upstream.Cancellation = (*callContext)(nil)

// afterHook is a function context.AfterFunc registered on a callContext.
type afterHook struct{ f func() }

// newCallContext is a context of parent that ends at the latest after
// timeout, or when end is called.
func newCallContext(parent context.Context, timeout time.Duration) *callContext {
	deadline := time.Now().Add(timeout)
	if d, ok := parent.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	return &callContext{parent: parent, deadline: deadline}
}

// Deadline implements context.Context.
func (c *callContext) Deadline() (time.Time, bool) { return c.deadline, true }

// Value implements context.Context: the parent's values, but for the
// parent's cancellation, as context.WithoutCancel hides it (whose Value
// allocates on every lookup, and takes stack the call has not to spare:
// TestACallStaysWithinASmallStack).
func (c *callContext) Value(key any) any {
	if key == causeKey {
		return nil
	}
	return c.parent.Value(key)
}

// causeKey is the key the context package finds a context's cancellation
// by (its own, unexported): context.Cause asks an ended context for it,
// and the probe records what it asked. TestCallContextKeepsItsOwnCause
// fails if a Go release finds the cancellation otherwise.
var causeKey = func() any {
	var p causeProbe
	_ = context.Cause(&p)
	return p.key
}()

// causeProbe is a context that records the key Value is asked for.
type causeProbe struct {
	context.Context
	key any
}

func (p *causeProbe) Value(key any) any {
	if p.key == nil {
		p.key = key
	}
	return nil
}

func (p *causeProbe) Err() error { return context.Canceled }

// EndsWith implements upstream.Cancellation: the parent, whose end, with
// the deadline, is all that ends this context before its call does.
func (c *callContext) EndsWith() context.Context { return c.parent }

// Err implements context.Context. It ends the context when the deadline
// passed or the parent ended, whether or not anything waits on it.
func (c *callContext) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.checkLocked()
	return c.err
}

// checkLocked ends the context if the deadline passed or the parent
// ended. When both are found at once, nothing having asked in between,
// the deadline wins, as context.WithTimeout's timer would have: a parent
// ended after the deadline is the common case (an agent that gives up on
// a call that timed out), and the deadline is what the envelope must say.
// A parent ended before the deadline is seen earlier by whatever waits on
// it (the HTTP/1 client, a store, Done).
func (c *callContext) checkLocked() {
	if c.err != nil {
		return
	}
	if !time.Now().Before(c.deadline) {
		c.endLocked(context.DeadlineExceeded)
	} else if err := c.parent.Err(); err != nil {
		c.endLocked(err)
	}
}

// Done implements context.Context: the first call makes the channel, and
// the timer and the hook on the parent's end that close it.
func (c *callContext) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		c.done = make(chan struct{})
		if c.err != nil {
			close(c.done)
		} else if c.checkLocked(); c.err == nil {
			c.watchLocked()
		}
	}
	return c.done
}

// AfterFunc arranges for f to run in its own goroutine once the context
// ends, as context.AfterFunc does (which calls it, and so do the contexts
// derived from this one, instead of starting a goroutine that waits); stop
// unregisters f and reports whether it did so before f was started.
func (c *callContext) AfterFunc(f func()) (stop func() bool) {
	h := &afterHook{f: f}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.checkLocked(); c.err != nil {
		go f()
		return func() bool { return false }
	}
	c.hooks = append(c.hooks, h)
	c.watchLocked()
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		for i, x := range c.hooks {
			if x == h {
				c.hooks = append(c.hooks[:i], c.hooks[i+1:]...)
				return true
			}
		}
		return false
	}
}

// end ends the context (the call's end), as the cancel function of
// context.WithDeadline does.
func (c *callContext) end() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.endLocked(context.Canceled)
}

// watchLocked sets the timer and the hook on the parent's end, once, for
// a context that has not ended (checkLocked).
func (c *callContext) watchLocked() {
	if c.watching {
		return
	}
	c.watching = true
	c.timer = time.AfterFunc(time.Until(c.deadline), func() { c.endWith(context.DeadlineExceeded) })
	if c.parent.Done() != nil {
		// A parent that already ended runs the hook at once, in its own
		// goroutine, which waits for this lock.
		c.unhook = context.AfterFunc(c.parent, func() { c.endWith(c.parent.Err()) })
	}
}

func (c *callContext) endWith(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.endLocked(err)
}

// endLocked ends the context with err, once: the done channel closes, the
// timer and the parent's hook stop, and the functions of AfterFunc start.
func (c *callContext) endLocked(err error) {
	if c.err != nil {
		return
	}
	c.err = err
	if c.done != nil {
		close(c.done)
	}
	if c.timer != nil {
		c.timer.Stop()
	}
	if c.unhook != nil {
		c.unhook()
	}
	for _, h := range c.hooks {
		go h.f()
	}
	c.hooks = nil
}

// String names the context as the standard library's do.
func (c *callContext) String() string {
	return "proxy.callContext(deadline " + c.deadline.String() + ")"
}
