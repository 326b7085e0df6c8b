package proxy

import (
	"errors"
	"net/http"
	"sync"

	"github.com/toolgate/toolgate/internal/boundedio"
)

// This file reads an agent's request body, bounded by
// server.max_request_bytes through boundedio.ReadBody, the one bounded body
// reader (a backend's answer is read through it by either client, and the
// chunks Envoy hands the external processor through boundedio.AppendBody).

// readRequestBody reads an agent's request body into *buf, within limit
// bytes. tooLarge says the body is over the limit: a declared length over
// it is refused without reading. err is a body that broke off (the client
// went away, a truncated chunked stream).
func readRequestBody(r *http.Request, limit int64, buf *[]byte) (body []byte, tooLarge bool, err error) {
	if r.ContentLength > limit {
		return nil, true, nil
	}
	body, err = boundedio.ReadBody(r.Body, limit, r.ContentLength, buf)
	switch {
	case errors.Is(err, boundedio.ErrBodyTooLarge):
		return nil, true, nil
	case err != nil:
		return nil, false, err
	}
	return body, false, nil
}

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
