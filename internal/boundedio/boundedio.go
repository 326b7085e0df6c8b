// Package boundedio reads inputs that must not grow without bound: policy
// secrets, learned summaries, manifests, admission reviews, and the bodies
// the sidecar reads on every call (agents' requests, backends' answers,
// the chunks Envoy hands the external processor: ReadBody, AppendBody,
// into buffers the caller pools). It is the one home of "read at most N
// bytes, and say so when there were more".
package boundedio

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
)

// TooLargeError says an input went past its limit. Nothing of it is kept.
type TooLargeError struct{ Limit int64 }

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("larger than %d bytes", e.Limit)
}

// ReadAll reads r to its end, or fails with *TooLargeError as soon as it has
// read more than limit bytes.
func ReadAll(r io.Reader, limit int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, &TooLargeError{Limit: limit}
	}
	return b, nil
}

// ReadFile reads a regular file (through symlinks) of at most limit bytes.
// Anything else that can be opened is refused: a FIFO or a device could
// block the read, or never end.
func ReadFile(path string, limit int64) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, errors.New("not a regular file")
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ReadAll(f, limit)
}

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

// ReadHTTPBody reads an agent's request body into *buf, within limit
// bytes. tooLarge says the body is over the limit: a declared length over
// it is refused without reading. err is a body that broke off (the client
// went away, a truncated chunked stream).
func ReadHTTPBody(r *http.Request, limit int64, buf *[]byte) (body []byte, tooLarge bool, err error) {
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
