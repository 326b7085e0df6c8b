package proxy

import (
	"sync"
)

// This file pools the buffers of agents' request bodies, which are read
// within server.max_request_bytes by boundedio.ReadHTTPBody, the one
// bounded body reader (a backend's answer is read through it by either
// client, and the chunks Envoy hands the external processor through
// boundedio.AppendBody).

// inPool recycles the buffers of request bodies that are read only while
// their call runs (the tool endpoint: arguments are decoded into their own
// strings).
var inPool = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

func putIn(p *[]byte) {
	if cap(*p) <= 64<<10 {
		*p = (*p)[:0]
		inPool.Put(p)
	}
}
