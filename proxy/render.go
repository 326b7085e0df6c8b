package proxy

import (
	"net/http"
	"strconv"
	"sync"

	"github.com/toolgate/toolgate/contracts"
)

// This file encodes a Result as an HTTP answer, for every front that
// answers in HTTP: the tool endpoint and transparent routes write it
// (writeResult), the Envoy external processor hands it to Envoy
// (Result.Render). The status follows server.http_status of the snapshot
// the call ran on, which the Result carries.

// Rendered is a result encoded as the HTTP front writes it.
type Rendered struct {
	Code   int
	Header http.Header
	// Body is the envelope as JSON with a trailing newline.
	Body []byte
}

// Render encodes the result exactly as the HTTP front answers it: the
// status by server.http_status, the headers (Content-Type,
// Toolgate-Status, Cache-Control, Idempotent-Replayed, Retry-After,
// Content-Length) and the body.
func (r *Result) Render() Rendered {
	h := make(http.Header, 6)
	code := r.head(h)
	p := outPool.Get().(*[]byte)
	b := append(r.Envelope.AppendJSON((*p)[:0]), '\n')
	body := append([]byte(nil), b...)
	putOut(p, b)
	setContentLength(h, len(body))
	return Rendered{Code: code, Header: h, Body: body}
}

// head sets the answer's headers but Content-Length, and returns its
// status.
func (r *Result) head(h http.Header) int {
	// Constant values share their slices: the server only reads them.
	h["Content-Type"] = headerJSON
	h["Toolgate-Status"] = statusHeader(r.Envelope.Status)
	h["Cache-Control"] = headerNoStore
	if r.Envelope.Replayed {
		h["Idempotent-Replayed"] = headerTrue
	}
	// Retry-After is the envelope's wait, in any mode and with any status:
	// never a wait the envelope does not state.
	if r.Envelope.RetryAfterMS > 0 {
		h.Set("Retry-After", contracts.RetryAfterHeader(r.Envelope.RetryAfterMS))
	}
	if r.always200 {
		return http.StatusOK
	}
	return r.HTTPStatus()
}

// outPool recycles the buffers envelopes are rendered into.
var outPool = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

// writeResult writes a result as the HTTP answer. Data of at least
// splitDataBytes is written from where it lies, between the envelope's
// other fields, rather than copied into the envelope's buffer first.
func writeResult(w http.ResponseWriter, res *Result) {
	h := w.Header()
	code := res.head(h)
	p := outPool.Get().(*[]byte)
	data := res.Envelope.Data
	if len(data) < splitDataBytes {
		b := res.Envelope.AppendJSON((*p)[:0])
		b = append(b, '\n')
		setContentLength(h, len(b))
		w.WriteHeader(code)
		_, _ = w.Write(b)
		putOut(p, b)
		return
	}
	b, at := res.Envelope.AppendJSONAround((*p)[:0])
	b = append(b, '\n')
	setContentLength(h, len(b)+len(data))
	w.WriteHeader(code)
	if _, err := w.Write(b[:at]); err == nil {
		if _, err = w.Write(data); err == nil {
			_, _ = w.Write(b[at:])
		}
	}
	putOut(p, b)
}

// setContentLength sets the answer's Content-Length, as h.Set does
// without canonicalizing the name again.
func setContentLength(h http.Header, n int) {
	h[headerContentLength] = []string{strconv.Itoa(n)}
}

// splitDataBytes is the size of data from which writeResult writes it
// where it lies: below it, copying it into the pooled envelope buffer
// costs less than the two writes more.
const splitDataBytes = 16 << 10

// putOut returns a buffer to outPool, keeping the array b grew it to.
func putOut(p *[]byte, b []byte) {
	if cap(b) <= 64<<10 {
		*p = b[:0]
		outPool.Put(p)
	}
}

var (
	headerJSON    = []string{"application/json"}
	headerNoStore = []string{"no-store"}
	headerTrue    = []string{"true"}
	statusHeaders = func() map[contracts.Status][]string {
		m := map[contracts.Status][]string{}
		for _, st := range contracts.Statuses() {
			m[st] = []string{string(st)}
		}
		return m
	}()
)

func statusHeader(st contracts.Status) []string {
	if v, ok := statusHeaders[st]; ok {
		return v
	}
	return []string{string(st)}
}
