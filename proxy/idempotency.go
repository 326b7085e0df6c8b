package proxy

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/policy"
)

// leaseMargin is added to a tool's timeout to make the idempotency lease.
// The timeout bounds the whole call, every attempt and wait included, so the
// lease outlives the longest a first call can run and a takeover can never
// overlap a live call.
const leaseMargin = 5 * time.Second

// The store writes that settle a call (its idempotency record, its budget
// refund) run even when the caller has gone away, so they get a context of
// their own (storeWriteContext): at most storeWriteTimeout from the write's
// start, and at most storeWriteGrace past the call's deadline, so a stalled
// Redis holds an answer little past its deadline; but at least
// storeWriteFloor, so a call that ended late is still recorded. With a
// stalled store a call therefore answers at most 1.25s after its deadline:
// a claim or a charge that timed out is withdrawn within 500ms (see
// redisstate.Store), and the writes after it end by the deadline plus 1s,
// plus 250ms for a second write.
const (
	storeWriteTimeout = 2 * time.Second
	storeWriteGrace   = time.Second
	storeWriteFloor   = 250 * time.Millisecond
)

// storeWriteContext returns the context of a store write that settles the
// call whose context is ctx.
func storeWriteContext(ctx context.Context) (context.Context, context.CancelFunc) {
	now := time.Now()
	end := now.Add(storeWriteTimeout)
	if deadline, ok := ctx.Deadline(); ok && deadline.Add(storeWriteGrace).Before(end) {
		end = deadline.Add(storeWriteGrace)
	}
	if floor := now.Add(storeWriteFloor); end.Before(floor) {
		end = floor
	}
	return context.WithDeadline(context.WithoutCancel(ctx), end)
}

// claim is a call's hold on its idempotency key.
type claim struct {
	key   policy.IdempotencyKey
	token string
	ttl   time.Duration
}

// claimKey makes a side-effecting call run at most once per key: owned=true
// means this call holds the key and may send; otherwise the outcome answers
// the call (a replay of what the key holds, the result of the call that
// held it, or a rejection).
func (c *Core) claimKey(ctx context.Context, cl *Call, key string) (contracts.Outcome, bool) {
	ctx, span := c.tr.child(ctx, "toolgate.idempotency.claim", trace.SpanKindInternal)
	o, owned := c.claimStored(ctx, cl, key)
	if span != nil {
		endChild(span, &o)
	}
	return o, owned
}

// claimStored is claimKey's work, under the claim's span. Out of line:
// its frame is large (the store's answers, the key), and the tracer's
// Start, deep itself, runs before it under claimKey's small one
// (TestACallStaysWithinASmallStack).
//
//go:noinline
func (c *Core) claimStored(ctx context.Context, cl *Call, key string) (contracts.Outcome, bool) {
	t := cl.tool
	ct := t.contract
	fp, err := policy.NewFingerprint(ct.Name, cl.args)
	if err != nil {
		// Arguments that passed the schema are JSON; this cannot happen
		// short of a bug, and must not run the call unguarded.
		return storeUnavailable(), false
	}
	scope, err := c.identityScope(ctx, cl)
	if err != nil {
		c.metrics.IdempotencyStoreErr.WithLabelValues("claim").Inc()
		c.logger.Warn("idempotency scope key unavailable; failing closed", "tool", ct.Name, "err", err.Error())
		return storeUnavailable(), false
	}
	k := policy.IdempotencyKey{Caller: cl.req.Caller, Tool: ct.Name, Key: key, Scope: scope}
	lease := ct.Timeout + leaseMargin
	ttl := ct.Idempotency.TTL
	dedupes := ct.Idempotency.ForwardHeader != ""
	cl.forwardKey = key
	for {
		got, err := c.store.Claim(ctx, k, fp, lease, ttl)
		if err != nil {
			c.metrics.IdempotencyStoreErr.WithLabelValues("claim").Inc()
			c.logger.Warn("idempotency store unavailable; failing closed", "tool", ct.Name, "err", err.Error())
			return storeUnavailable(), false
		}
		if got.Outcome != policy.ClaimOwned && !got.Record.Matches(fp) {
			t.metrics.event(EventMismatch)
			t.metrics.violation(ViolationKey)
			return contracts.Reject(contracts.ReasonKeyMismatch), false
		}
		switch got.Outcome {
		case policy.ClaimOwned:
			cl.claim = &claim{key: k, token: got.Token, ttl: ttl}
			t.live.keys.Add(1)
			return contracts.Outcome{}, true
		case policy.ClaimCompleted:
			t.metrics.event(EventReplayed)
			return cl.answeredBy(got.Record), false
		case policy.ClaimUnknown:
			if dedupes {
				// The backend dedupes on the key we forward: resending with
				// the same key cannot act twice.
				again, err := c.store.Reclaim(ctx, k, fp, lease, ttl)
				if err != nil {
					c.metrics.IdempotencyStoreErr.WithLabelValues("claim").Inc()
					return storeUnavailable(), false
				}
				if again.Outcome == policy.ClaimOwned {
					cl.claim = &claim{key: k, token: again.Token, ttl: ttl}
					t.live.keys.Add(1)
					return contracts.Outcome{}, true
				}
				continue // someone else reclaimed or finished it meanwhile
			}
			t.metrics.event(EventUnknownKept)
			return cl.answeredBy(got.Record), false
		case policy.ClaimInFlight:
			rec, err := c.store.Wait(ctx, k)
			switch {
			case err == nil && rec.State != policy.RecordInFlight:
				t.metrics.event(EventWaited)
				if rec.State == policy.RecordUnknown && dedupes {
					continue
				}
				return cl.answeredBy(rec), false
			case errors.Is(err, policy.ErrNoRecord):
				// The first call was withdrawn before it sent anything (or
				// its record expired): this call may run.
				continue
			case ctx.Err() != nil:
				return contracts.Reject(contracts.ReasonInFlightTimeout), false
			default:
				c.metrics.IdempotencyStoreErr.WithLabelValues("wait").Inc()
				return storeUnavailable(), false
			}
		default:
			return storeUnavailable(), false
		}
	}
}

// identityScope is the call's identity scope (policy.IdentityScope): the
// keyed hash of the identifying headers its upstream forwards, as the agent
// sent them; "" when it sent none. The key is state.scope_key, or the
// store's own. Out of line: the hash's sum takes room on the stack only
// while it is computed.
//
//go:noinline
func (c *Core) identityScope(ctx context.Context, cl *Call) (string, error) {
	names := cl.tool.upstream.cfg.IdentityHeaders
	h := cl.req.Header
	sent := false
	for _, name := range names {
		if _, ok := h[name]; ok {
			sent = true
			break
		}
	}
	if !sent {
		return "", nil
	}
	var key []byte
	if k := cl.st.snap.State.ScopeKey.Value; k != "" {
		key = []byte(k)
	} else {
		var err error
		if key, err = c.store.ScopeKey(ctx); err != nil {
			return "", err
		}
	}
	return policy.IdentityScope(key, names, h), nil
}

func storeUnavailable() contracts.Outcome {
	return contracts.Reject(contracts.ReasonStoreUnavailable)
}

// replay turns the stored record that answers the call (Call.stored) into
// its outcome (Call.out). A record whose outcome the store itself declared
// unknown (an owner that died mid-call) has no envelope; the call then
// says so. Out of line, writing in place: Call.end runs it, and the
// outcome and the decoding must not widen end's frame, under which the
// log line is written (TestACallStaysWithinASmallStack).
//
//go:noinline
func (c *Core) replay(cl *Call) {
	if len(cl.stored) > 0 {
		if env, err := contracts.DecodeEnvelope(cl.stored); err == nil {
			cl.replay = env
			cl.out = contracts.Outcome{Status: env.Status, Reason: contracts.ReasonReplayed, Retryable: env.Retryable,
				Effect: env.SideEffect, Data: env.Data, RetryAfter: time.Duration(env.RetryAfterMS) * time.Millisecond}
			return
		}
	}
	cl.replayLost = true
	cl.out = contracts.Reject(contracts.ReasonOutcomeLost)
}

// answeredBy says rec answers the call: Call.end decodes its envelope
// (Core.replay). The outcome returned stands until then.
func (cl *Call) answeredBy(rec policy.Record) contracts.Outcome {
	cl.stored = rec.Envelope
	if cl.stored == nil {
		cl.stored = []byte{} // no envelope: the outcome is lost
	}
	return contracts.Outcome{Reason: contracts.ReasonReplayed}
}

// settle finishes the call's claim once its envelope exists: a call that
// sent nothing, or whose backend refused without acting and invites the
// identical retry (429, 503, 408), releases the key (so that retry runs);
// one whose outcome is unknown keeps it as unknown; any other stores its
// envelope for replay.
func (c *Core) settle(ctx context.Context, cl *Call, res *Result, body []byte) {
	cl2 := cl.claim
	defer cl.tool.live.keys.Add(-1)
	ctx, cancel := storeWriteContext(ctx)
	defer cancel()
	var err error
	switch {
	case !contracts.KeyKept(res.Envelope.SideEffect, res.Envelope.Retryable, cl.sent):
		// Storing a retryable refusal would answer the retry it invites
		// with the same refusal until the record expires.
		err = c.store.Release(ctx, cl2.key, cl2.token)
	case res.Envelope.SideEffect == contracts.SideEffectUnknown:
		err = c.store.MarkUnknown(ctx, cl2.key, cl2.token, body, cl2.ttl)
		if err == nil {
			cl.tool.metrics.event(EventUnknownKept)
		}
	default:
		err = c.store.Complete(ctx, cl2.key, cl2.token, body, cl2.ttl)
		if err == nil {
			cl.tool.metrics.event(EventStored)
		}
	}
	if err != nil {
		// The envelope still goes to the caller. The record stays in flight
		// until its lease runs out and then reads as unknown: never as a
		// result that did not happen.
		c.metrics.IdempotencyStoreErr.WithLabelValues("complete").Inc()
		c.logger.Warn("idempotency record not stored", "tool", cl.tool.contract.Name, "err", err.Error())
	}
}

// onEvict counts a record the memory store dropped before it expired.
func (c *Core) onEvict(k policy.IdempotencyKey) {
	st := c.state.Load()
	if st == nil {
		return
	}
	if t := st.tools[k.Tool]; t != nil {
		t.metrics.event(EventEvicted)
		return
	}
	st.unknown.event(EventEvicted)
}
