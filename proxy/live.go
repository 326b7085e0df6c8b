package proxy

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/policy"
)

// This file is the live state the admin console (package console) shows:
// each upstream's breaker and bulkhead, each caller's rate and budget, and
// per tool its idempotency keys in flight and its last outcomes. Only the
// last two are kept for the console, and both cost the call little: a
// counter for a claimed key, and one slot of a fixed ring written under
// that slot's own lock, by finish's record (the one place a call ends).
// The rest is read from the state the pipeline keeps anyway.

// RecentCalls is how many outcomes the console keeps per tool.
const RecentCalls = 16

// RecentCall is one finished call of a tool, as the console lists it.
type RecentCall struct {
	At         time.Time // when it finished
	Duration   time.Duration
	Status     contracts.Status
	Reason     contracts.Reason
	Caller     string // the caller's metric label: a policy name, or "unknown"
	Front      string // http, mcp, transparent, extproc, try, console
	CallID     string
	SideEffect contracts.SideEffect
	Retryable  bool
	Replayed   bool
	Cost       float64
	// Message is the envelope's message: what the model read first.
	Message string
}

// toolLive is what a tool keeps for the console. It outlives reloads
// that keep the tool (Core.Swap carries it over by name).
type toolLive struct {
	keys atomic.Int64 // idempotency keys this replica holds for calls in flight
	next atomic.Uint64
	ring [RecentCalls]recentSlot
}

type recentSlot struct {
	mu   sync.Mutex
	seq  uint64 // 1 + the index of the call written here; 0 when empty
	call RecentCall
}

// recordRecent writes the finished call into its tool's ring. Out of
// line, so that the ring's entry takes no room on the call's stack.
//
//go:noinline
func (lv *toolLive) recordRecent(cl *Call, env *contracts.Envelope, reason contracts.Reason, end time.Time, elapsed time.Duration) {
	n := lv.next.Add(1)
	s := &lv.ring[(n-1)%RecentCalls]
	s.mu.Lock()
	s.seq = n
	s.call = RecentCall{
		At: end, Duration: elapsed, Status: env.Status, Reason: reason, Caller: cl.caller, Front: cl.req.Front,
		CallID: env.CallID, SideEffect: env.SideEffect, Retryable: env.Retryable, Replayed: env.Replayed,
		Cost: env.Cost, Message: env.Message,
	}
	s.mu.Unlock()
}

// recent returns the calls in the ring, newest first.
func (lv *toolLive) recent() []RecentCall {
	type entry struct {
		seq  uint64
		call RecentCall
	}
	got := make([]entry, 0, RecentCalls)
	for i := range lv.ring {
		s := &lv.ring[i]
		s.mu.Lock()
		if s.seq != 0 {
			got = append(got, entry{s.seq, s.call})
		}
		s.mu.Unlock()
	}
	slices.SortFunc(got, func(a, b entry) int { return cmp.Compare(b.seq, a.seq) })
	out := make([]RecentCall, len(got))
	for i, e := range got {
		out[i] = e.call
	}
	return out
}

// ToolState is a tool's live state.
type ToolState struct {
	// KeysInFlight counts the idempotency keys this replica holds for
	// calls of the tool still running (claimed, not yet settled).
	KeysInFlight int
	// Recent are the tool's last outcomes on this replica, newest first,
	// at most RecentCalls.
	Recent []RecentCall
}

// ToolState returns the named tool's live state; ok is false for a tool
// the view's policy does not have.
func (v View) ToolState(name string) (ts ToolState, ok bool) {
	t := v.st.tools[name]
	if t == nil {
		return ToolState{}, false
	}
	return ToolState{KeysInFlight: int(t.live.keys.Load()), Recent: t.live.recent()}, true
}

// UpstreamState is an upstream's live state.
type UpstreamState struct {
	Name string
	// URL is the upstream's base URL without its user information.
	URL     string
	Breaker policy.BreakerState
	// BreakerSettings are the breaker's thresholds.
	BreakerSettings policy.BreakerSettings
	// InFlight counts the calls holding a bulkhead slot; MaxConcurrent
	// is the bulkhead's size, MaxConcurrentPerCaller one caller's share.
	InFlight, MaxConcurrent, MaxConcurrentPerCaller int
}

// Upstreams returns the live state of the view's upstreams, by name.
func (v View) Upstreams() []UpstreamState {
	out := make([]UpstreamState, 0, len(v.st.upstreams))
	for name, up := range v.st.upstreams {
		held, size := up.bulk.InUse()
		out = append(out, UpstreamState{
			Name: name, URL: up.cfg.URL.Redacted(), Breaker: up.breaker.State(), BreakerSettings: up.breaker.Settings(),
			InFlight: held, MaxConcurrent: size, MaxConcurrentPerCaller: up.cfg.MaxConcurrentPerCaller,
		})
	}
	slices.SortFunc(out, func(a, b UpstreamState) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// CallerState is a caller's rates and budget as they stand.
type CallerState struct {
	Name  string
	Tools []string // the tools it may call; "*" for all
	// Rates are its buckets: its own (Tool "*") first, then its per-tool
	// overrides by tool name.
	Rates  []RateState
	Budget *BudgetState // nil without a budget
}

// RateState is one rate bucket.
type RateState struct {
	Tool     string // policy.RateAllTools for the caller's own bucket
	Settings policy.RateSettings
	// Tokens is what the bucket holds now, when Known: the memory limiter
	// is read (a bucket no call used yet is full); the Redis one is not.
	Tokens float64
	Known  bool
}

// BudgetState is a caller's cost budget.
type BudgetState struct {
	Settings policy.BudgetSettings
	// Spent is the cost spent in the current window and ResetIn how long
	// until it ends, when Known; Err says why the store could not tell.
	Spent   float64
	ResetIn time.Duration
	Known   bool
	Err     string
}

// Callers returns the rates and budgets of the view's callers, by name. A
// budget kept in Redis is read there (one GET per caller with a budget,
// bounded by ctx).
func (v View) Callers(ctx context.Context) []CallerState {
	callers := v.st.snap.Access.Callers
	rates, _ := v.c.limiters.(policy.RateInspector)
	budgets, _ := v.c.budgets.(policy.BudgetInspector)
	out := make([]CallerState, 0, len(callers))
	for name, c := range callers {
		cs := CallerState{Name: name, Tools: c.Tools}
		rate := func(tool string, s policy.RateSettings) RateState {
			rs := RateState{Tool: tool, Settings: s}
			if rates != nil {
				rs.Known = true
				var used bool
				if rs.Tokens, used = rates.Tokens(policy.RateKey{Caller: name, Tool: tool}); !used {
					rs.Tokens = float64(s.Burst)
				}
			}
			return rs
		}
		if c.Rate != nil {
			cs.Rates = append(cs.Rates, rate(policy.RateAllTools, *c.Rate))
		}
		for _, tool := range slices.Sorted(maps.Keys(c.ToolRates)) {
			cs.Rates = append(cs.Rates, rate(tool, c.ToolRates[tool]))
		}
		if c.Budget != nil {
			cs.Budget = &BudgetState{Settings: *c.Budget}
			if budgets != nil {
				var err error
				cs.Budget.Spent, cs.Budget.ResetIn, err = budgets.Spent(ctx, name, *c.Budget)
				if cs.Budget.Known = err == nil; err != nil {
					cs.Budget.Err = err.Error()
				}
			}
		}
		out = append(out, cs)
	}
	slices.SortFunc(out, func(a, b CallerState) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Try is the dry run of the view's policy (Try) for a console of the
// running process. The request shows the upstream's credential masked,
// as Try does, and every ${VAR} value the tool's request carries (its
// upstream's headers', its binding's) as ***, as `toolgate try` shows them
// as ${VAR} (MaskRequest). An answer handed to it is also cleared of the
// secrets the view's tool holds now (its upstream's credential as sent,
// OAuth2's tokens included, and those ${VAR} values), which the dry run's
// masked credential does not know, so a pasted answer never shows one.
func (v View) Try(ctx context.Context, d DryRun) (*DryRunResult, error) {
	if d.Version == "" {
		d.Version = v.c.version
	}
	t := v.st.tools[d.Tool]
	if t == nil {
		return try(ctx, v.st.snap, d, nil)
	}
	res, err := try(ctx, v.st.snap, d, t.redactor().match.Needles())
	if err != nil || res.Request == nil {
		return res, err
	}
	var masks []SecretMask
	for _, s := range slices.Concat(t.upstream.cfg.HeaderSecrets, t.contract.Binding.Secrets()) {
		masks = append(masks, SecretMask{Value: s, As: maskedSecret})
	}
	res.URL, res.Request = MaskRequest(res.URL, res.Request, masks, d.Version)
	return res, nil
}

// SecretHider returns a function that replaces in a string, with ***,
// every secret the view's policy holds: the ${VAR} values of the
// upstreams' headers and the tools' requests (of MinMaskedSecret bytes or
// more) and the forms of the credentials the tools' answers are cleared
// of, as they are now. The console passes everything it shows from the
// policy through it (descriptions, schemas, rules, a reload's errors),
// so a secret the policy put anywhere is never rendered. Make one per
// page: it gathers every tool's secrets.
func (v View) SecretHider() func(string) string {
	var masks []SecretMask
	for _, up := range v.st.upstreams {
		for _, sec := range up.cfg.HeaderSecrets {
			masks = append(masks, SecretMask{Value: sec, As: maskedSecret})
		}
	}
	for _, t := range v.st.tools {
		for _, sec := range t.contract.Binding.Secrets() {
			masks = append(masks, SecretMask{Value: sec, As: maskedSecret})
		}
		for _, n := range t.redactor().match.Needles() {
			masks = append(masks, SecretMask{Value: n.Text(), As: maskedSecret})
		}
	}
	return masker(masks).Replace
}
