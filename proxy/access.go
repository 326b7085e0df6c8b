package proxy

import (
	"context"

	"github.com/toolgate/toolgate/contracts"
)

// The reasons of toolgate_access_rejections_total.
const (
	RejectDenied = "denied"
	RejectRate   = "rate"
	RejectBudget = "budget"
)

// allow is the access stage: may this caller call this tool at all? It runs
// before anything is parsed, so a caller without access costs almost
// nothing.
func (c *Core) allow(cl *Call) (contracts.Outcome, bool) {
	if !cl.st.snap.Access.Allows(cl.req.Caller, cl.tool.contract.Name) {
		c.reject(cl, RejectDenied)
		return contracts.Reject(contracts.ReasonDenied), false
	}
	return contracts.Outcome{}, true
}

// charge takes the call's rate token and cost from the caller's budget. It
// runs after the idempotency claim, so a replay, or a call that waited for
// its key's first call, charges neither (DESIGN section 8, "Replay comes
// first"). A spent budget is recorded on the call, to be refunded if the
// call turns out never to reach the backend.
func (c *Core) charge(ctx context.Context, cl *Call) (contracts.Outcome, bool) {
	entry := cl.st.snap.Access.Callers[cl.req.Caller]
	if entry == nil {
		return contracts.Outcome{}, true
	}
	name := cl.tool.contract.Name
	ok, wait, err := c.limiters.Take(ctx, entry, name)
	if err != nil {
		// state.on_error decided ok: this replica's own bucket (open), or
		// a refusal (closed).
		c.metrics.IdempotencyStoreErr.WithLabelValues("rate").Inc()
		c.logger.Warn("rate-limit store unavailable", "caller", entry.Name, "allowed", ok, "err", err.Error())
		if !ok && wait == 0 {
			return storeUnavailable(), false
		}
	}
	if !ok {
		c.reject(cl, RejectRate)
		o := contracts.Reject(contracts.ReasonRateLimited)
		o.RetryAfter = wait
		return o, false
	}
	if entry.Budget != nil && cl.tool.contract.Cost > 0 {
		charge, err := c.budgets.Spend(ctx, entry.Name, cl.tool.contract.Cost, *entry.Budget)
		if err != nil {
			c.metrics.IdempotencyStoreErr.WithLabelValues("budget").Inc()
			c.logger.Warn("budget store unavailable; failing closed", "caller", entry.Name, "err", err.Error())
			return storeUnavailable(), false
		}
		if !charge.OK {
			c.reject(cl, RejectBudget)
			o := contracts.Reject(contracts.ReasonBudget)
			o.RetryAfter = charge.ResetIn
			return o, false
		}
		cl.charge = &charge
	}
	return contracts.Outcome{}, true
}

func (c *Core) reject(cl *Call, reason string) {
	c.metrics.AccessRejections.WithLabelValues(cl.caller, cl.tool.contract.Name, reason).Inc()
}

// refund gives back a budget charge for a call that cost nothing: it never
// reached the backend, or a stored result answered it.
func (c *Core) refund(ctx context.Context, cl *Call) {
	if cl.charge == nil || !cl.charge.OK {
		return
	}
	if cl.sent && cl.replay == nil && !cl.replayLost {
		return
	}
	ctx, cancel := storeWriteContext(ctx)
	defer cancel()
	if err := c.budgets.Refund(ctx, *cl.charge); err != nil {
		c.logger.Warn("budget refund failed", "err", err.Error())
	}
}
