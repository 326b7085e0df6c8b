package proxy

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/toolgate/toolgate/contracts"
)

// validate is the arguments stage: it decodes and checks the arguments
// and the idempotency key, and binds the backend request (Call.bound).
func (c *Core) validate(ctx context.Context, cl *Call) (key string, o contracts.Outcome, ok bool) {
	if _, span := c.tr.child(ctx, "toolgate.validate", trace.SpanKindInternal); span != nil {
		defer func() { endChild(span, &o) }()
	}
	t := cl.tool
	if cl.req.Invalid != nil {
		t.metrics.violation(ViolationSchema)
		return "", argOutcome(cl.req.Invalid), false
	}
	args, o, ok := decodeArgs(cl.req, cl.st.snap.Server.MaxRequestBytes)
	if !ok {
		kind := ViolationSchema
		if o.Reason == contracts.ReasonTooLarge {
			kind = ViolationSize
		}
		t.metrics.violation(kind)
		return "", o, false
	}
	cl.args = args
	var keyArg any
	var hasKeyArg bool
	if t.contract.SideEffect {
		keyArg, hasKeyArg = contracts.TakeIdempotencyKeyArg(args)
	}
	if err := t.contract.Schema.Validate(args); err != nil {
		t.metrics.violation(ViolationSchema)
		return "", argOutcome(err), false
	}
	if t.contract.SideEffect {
		var reason contracts.Reason
		if key, reason = contracts.ResolveIdempotencyKey(cl.req.IdempotencyKey, keyArg, hasKeyArg); reason != "" {
			t.metrics.violation(ViolationKey)
			if reason == contracts.ReasonKeyMissing {
				t.metrics.event(EventMissingKey)
			}
			return "", contracts.Reject(reason), false
		}
	}
	bound, err := t.contract.Binding.Bind(args)
	if err != nil {
		t.metrics.violation(ViolationSchema)
		return "", argOutcome(err), false
	}
	cl.bound = bound
	return key, contracts.Outcome{}, true
}

func argOutcome(err error) contracts.Outcome { return contracts.ArgOutcome(err) }

// decodeArgs turns the request's arguments into a JSON object with numbers
// kept as json.Number, so the schema sees exactly what was sent.
func decodeArgs(req *Request, limit int64) (map[string]any, contracts.Outcome, bool) {
	if req.BodyTooLarge || int64(len(req.Body)) > limit {
		o := contracts.Reject(contracts.ReasonTooLarge)
		o.Detail = fmt.Sprint(limit)
		return nil, o, false
	}
	if req.Body == nil {
		if req.Args == nil {
			return map[string]any{}, contracts.Outcome{}, true
		}
		return req.Args, contracts.Outcome{}, true
	}
	body := bytes.TrimSpace(req.Body)
	if len(body) == 0 {
		return map[string]any{}, contracts.Outcome{}, true
	}
	args, err := contracts.DecodeArgs(body, contracts.MaxArgsDepth)
	if err != nil {
		return nil, contracts.ArgOutcome(err), false
	}
	return args, contracts.Outcome{}, true
}

// callID returns the request's id when it is a safe header value (it is
// echoed in the envelope and forwarded to the backend as X-Request-Id),
// otherwise a fresh ULID-shaped id.
func callID(given string) string {
	if given != "" && len(given) <= 128 {
		ok := true
		for i := 0; i < len(given); i++ {
			if given[i] < 0x21 || given[i] > 0x7e {
				ok = false
				break
			}
		}
		if ok {
			return given
		}
	}
	return newULID(time.Now())
}

// newULID makes a 26-character ULID: 48 bits of milliseconds, 80 random
// bits, Crockford base32. It sorts by time, which helps reading logs.
func newULID(now time.Time) string {
	const alphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
	var b [16]byte
	ms := uint64(now.UnixMilli())
	for i := 5; i >= 0; i-- {
		b[i] = byte(ms)
		ms >>= 8
	}
	_, _ = rand.Read(b[6:])
	var out [26]byte
	// 128 bits as 26 base32 digits, most significant first (the first
	// digit carries the top 3 bits).
	hi := uint64(b[0])<<56 | uint64(b[1])<<48 | uint64(b[2])<<40 | uint64(b[3])<<32 | uint64(b[4])<<24 | uint64(b[5])<<16 | uint64(b[6])<<8 | uint64(b[7])
	lo := uint64(b[8])<<56 | uint64(b[9])<<48 | uint64(b[10])<<40 | uint64(b[11])<<32 | uint64(b[12])<<24 | uint64(b[13])<<16 | uint64(b[14])<<8 | uint64(b[15])
	for i := 25; i >= 0; i-- {
		out[i] = alphabet[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
	return string(out[:])
}
