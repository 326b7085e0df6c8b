package policy

import (
	"container/heap"
	"math"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// recordOverhead is what a kept record costs besides its envelope and key
// strings: the record, its LRU entry and its map slot, rounded up from what
// BenchmarkMemoryStoreFootprint measures (about 390 bytes).
const recordOverhead = 416

// RecordSize is the number of bytes the memory store counts for a completed
// or unknown record of k holding envelope: the envelope, the caller, tool,
// key and scope strings, and a fixed overhead for the record's bookkeeping.
func RecordSize(k IdempotencyKey, envelope []byte) int64 {
	return int64(len(envelope)) + int64(len(k.Caller)+len(k.Tool)+len(k.Key)+len(k.Scope)) + recordOverhead
}

// memPartitions holds the completed and unknown records of a MemoryStore,
// one LRU per caller, with running totals and two max-heaps of partitions
// (by keys and by bytes) to find the largest at once, whatever the number of
// callers.
type memPartitions struct {
	parts   map[string]*memPartition // by caller; only callers with records
	byKeys  partitionHeap
	byBytes partitionHeap
	keys    int
	bytes   int64
}

// memPartition is one caller's records, least recently used first out.
type memPartition struct {
	lru   *simplelru.LRU[IdempotencyKey, *memRecord]
	bytes int64
	// index is the partition's position in byKeys and byBytes.
	index [2]int
}

func newMemPartitions() memPartitions {
	return memPartitions{
		parts:   map[string]*memPartition{},
		byKeys:  partitionHeap{which: 0},
		byBytes: partitionHeap{which: 1},
	}
}

// get returns k's record and makes it the most recently used of its caller.
func (ps *memPartitions) get(k IdempotencyKey) (*memRecord, bool) {
	p := ps.parts[k.Caller]
	if p == nil {
		return nil, false
	}
	return p.lru.Get(k)
}

// peek returns k's record without touching its recency.
func (ps *memPartitions) peek(k IdempotencyKey) (*memRecord, bool) {
	p := ps.parts[k.Caller]
	if p == nil {
		return nil, false
	}
	return p.lru.Peek(k)
}

// add keeps m as k's record, the most recently used of its caller,
// replacing any record k had.
func (ps *memPartitions) add(k IdempotencyKey, m *memRecord) {
	ps.remove(k)
	p := ps.parts[k.Caller]
	if p == nil {
		// The bound is enforced by the store, by eviction; the LRU itself
		// never drops anything.
		lru, _ := simplelru.NewLRU[IdempotencyKey, *memRecord](math.MaxInt, nil)
		p = &memPartition{lru: lru}
		ps.parts[k.Caller] = p
		heap.Push(&ps.byKeys, p)
		heap.Push(&ps.byBytes, p)
	}
	p.lru.Add(k, m)
	ps.account(p, 1, m.size)
}

// remove drops k's record, if any.
func (ps *memPartitions) remove(k IdempotencyKey) {
	p := ps.parts[k.Caller]
	if p == nil {
		return
	}
	m, ok := p.lru.Peek(k)
	if !ok {
		return
	}
	p.lru.Remove(k)
	ps.account(p, -1, -m.size)
	ps.dropIfEmpty(k.Caller, p)
}

// evict removes the least recently used record of the partition holding the
// most keys (byKeys) or the most bytes, and returns it. There must be one.
func (ps *memPartitions) evict(byKeys bool) (IdempotencyKey, *memRecord) {
	h := &ps.byBytes
	if byKeys {
		h = &ps.byKeys
	}
	p := h.parts[0]
	k, m, _ := p.lru.RemoveOldest()
	ps.account(p, -1, -m.size)
	ps.dropIfEmpty(k.Caller, p)
	return k, m
}

func (ps *memPartitions) account(p *memPartition, keys int, bytes int64) {
	p.bytes += bytes
	ps.keys += keys
	ps.bytes += bytes
	heap.Fix(&ps.byKeys, p.index[0])
	heap.Fix(&ps.byBytes, p.index[1])
}

func (ps *memPartitions) dropIfEmpty(caller string, p *memPartition) {
	if p.lru.Len() > 0 {
		return
	}
	heap.Remove(&ps.byKeys, p.index[0])
	heap.Remove(&ps.byBytes, p.index[1])
	delete(ps.parts, caller)
}

// partitionHeap is a max-heap of partitions by keys (which 0) or bytes
// (which 1), for container/heap.
type partitionHeap struct {
	parts []*memPartition
	which int
}

func (h *partitionHeap) weight(i int) int64 {
	if h.which == 0 {
		return int64(h.parts[i].lru.Len())
	}
	return h.parts[i].bytes
}

func (h *partitionHeap) Len() int           { return len(h.parts) }
func (h *partitionHeap) Less(i, j int) bool { return h.weight(i) > h.weight(j) }

func (h *partitionHeap) Swap(i, j int) {
	h.parts[i], h.parts[j] = h.parts[j], h.parts[i]
	h.parts[i].index[h.which] = i
	h.parts[j].index[h.which] = j
}

func (h *partitionHeap) Push(x any) {
	p := x.(*memPartition)
	p.index[h.which] = len(h.parts)
	h.parts = append(h.parts, p)
}

func (h *partitionHeap) Pop() any {
	last := len(h.parts) - 1
	p := h.parts[last]
	h.parts[last] = nil
	h.parts = h.parts[:last]
	return p
}
