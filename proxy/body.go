package proxy

import (
	"errors"
	"io"
	"net/http"
	"sync"
)

// This file is the one bounded body reader. Every body toolgate reads is
// bounded by a limit from the policy, and its size is found by reading,
// never by trusting Content-Length: an agent's request body on the tool
// endpoint, on a transparent route or on /mcp, a backend's answer read by
// either client, and the chunks Envoy hands the external processor.

// ErrBodyTooLarge is a body longer than its limit.
var ErrBodyTooLarge = errors.New("body too large")

// ReadBody appends r's bytes to *buf until r ends, keeping at most limit
// bytes in all: past that it stops reading and returns ErrBodyTooLarge. A
// body that comes in chunks (Envoy's) is read with one call per chunk on
// the same buffer. sizeHint, when known (a Content-Length, a chunk's
// length), sizes the buffer once. On success the body is returned and
// *buf holds it; on any error *buf holds what was read, which is not a
// body.
func ReadBody(r io.Reader, limit, sizeHint int64, buf *[]byte) ([]byte, error) {
	b := *buf
	if sizeHint > 0 && int64(len(b))+sizeHint <= limit && int64(cap(b)-len(b)) < sizeHint+1 {
		// One read past the end sees EOF.
		grown := make([]byte, len(b), int64(len(b))+sizeHint+1)
		copy(grown, b)
		b = grown
	}
	for {
		if len(b) == cap(b) {
			if int64(len(b)) > limit {
				break
			}
			b = append(b, 0)[:len(b)]
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if int64(len(b)) > limit {
			break
		}
		if err == io.EOF {
			*buf = b
			return b, nil
		}
		if err != nil {
			*buf = b
			return nil, err
		}
	}
	*buf = b
	return nil, ErrBodyTooLarge
}

// AppendBody is ReadBody for a body that is already in memory, one chunk
// at a time: the chunk is appended to *buf, or ErrBodyTooLarge says the
// body went past limit (and *buf is not a body).
func AppendBody(chunk []byte, limit int64, buf *[]byte) ([]byte, error) {
	if int64(len(*buf))+int64(len(chunk)) > limit {
		return nil, ErrBodyTooLarge
	}
	*buf = append(*buf, chunk...)
	return *buf, nil
}

// readRequestBody reads an agent's request body into *buf, within limit
// bytes. tooLarge says the body is over the limit: a declared length over
// it is refused without reading. err is a body that broke off (the client
// went away, a truncated chunked stream).
func readRequestBody(r *http.Request, limit int64, buf *[]byte) (body []byte, tooLarge bool, err error) {
	if r.ContentLength > limit {
		return nil, true, nil
	}
	body, err = ReadBody(r.Body, limit, r.ContentLength, buf)
	switch {
	case errors.Is(err, ErrBodyTooLarge):
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

// Backend answer buffers are pooled in two parts, so that a call waiting
// on its backend holds no buffer: bodyPool hands out the empty slice a
// send reads into, readAnswerBody gives it an array from bodyArrays once
// the answer's header has come, and putBody returns the array once the
// answer is classified (the envelope's data is always a copy). The
// slices move from one pool to the other, so neither allocates once warm.
var (
	bodyPool   = sync.Pool{New: func() any { return new([]byte) }}
	bodyArrays sync.Pool // *[]byte with an array
)

// readAnswerBody is ReadBody for a backend's answer into a slice from
// bodyPool.
func readAnswerBody(r io.Reader, limit, sizeHint int64, buf *[]byte) ([]byte, error) {
	if cap(*buf) == 0 {
		if p, _ := bodyArrays.Get().(*[]byte); p != nil {
			*buf, *p = (*p)[:0], nil
			bodyPool.Put(p)
		} else {
			*buf = make([]byte, 0, 4096)
		}
	}
	return ReadBody(r, limit, sizeHint, buf)
}

func putBody(buf *[]byte) {
	switch {
	case buf == nil:
	case cap(*buf) == 0:
		bodyPool.Put(buf)
	case cap(*buf) <= 256<<10:
		*buf = (*buf)[:0]
		bodyArrays.Put(buf)
	}
}
