package upstream

import "sync"

// Bulkhead bounds the calls in flight to one upstream, in all and per
// caller. Beyond either bound a call fails fast (`upstream`, retryable,
// nothing sent) instead of queueing behind a slow backend; the per-caller
// bound keeps one caller from taking every slot the others need.
//
// Callers are counted by their metric label (a caller the policy names, or
// "unknown" for all others), so the map holds at most the listed callers
// and only while they have calls in flight.
type Bulkhead struct {
	slots     chan struct{} // one token per call in flight
	perCaller int

	mu   sync.Mutex
	held map[string]int
}

// NewBulkhead is a bulkhead of total slots, at most perCaller of them for
// one caller.
func NewBulkhead(total, perCaller int) *Bulkhead {
	return &Bulkhead{slots: make(chan struct{}, total), perCaller: perCaller, held: map[string]int{}}
}

// Resized returns a bulkhead with the new bounds that shares b's slots when
// the total is unchanged, so calls in flight across a reload still count.
func (b *Bulkhead) Resized(total, perCaller int) *Bulkhead {
	switch {
	case b == nil || cap(b.slots) != total:
		return NewBulkhead(total, perCaller)
	case b.perCaller == perCaller:
		return b
	}
	// The per-caller counts start afresh: calls in flight release into the
	// Bulkhead they acquired from.
	return &Bulkhead{slots: b.slots, perCaller: perCaller, held: map[string]int{}}
}

// Acquire takes a slot for caller; false when the upstream or the caller's
// share is full.
func (b *Bulkhead) Acquire(caller string) bool {
	select {
	case b.slots <- struct{}{}:
	default:
		return false
	}
	if b.perCaller >= cap(b.slots) {
		return true // the share is the whole bulkhead: nothing to count
	}
	b.mu.Lock()
	n := b.held[caller]
	if n >= b.perCaller {
		b.mu.Unlock()
		<-b.slots
		return false
	}
	b.held[caller] = n + 1
	b.mu.Unlock()
	return true
}

// Release gives back caller's slot.
func (b *Bulkhead) Release(caller string) {
	if b.perCaller < cap(b.slots) {
		b.mu.Lock()
		if n := b.held[caller] - 1; n > 0 {
			b.held[caller] = n
		} else {
			delete(b.held, caller)
		}
		b.mu.Unlock()
	}
	<-b.slots
}

// InUse returns the slots held now and the bulkhead's size, for the admin
// console.
func (b *Bulkhead) InUse() (held, size int) { return len(b.slots), cap(b.slots) }
