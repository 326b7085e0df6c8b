package proxy

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/policy"
)

// finish renders the outcome into the envelope, records metrics and writes
// the log line. It is the only place that does.
func (c *Core) finish(ctx context.Context, cl *Call, o *contracts.Outcome) *Result {
	st := cl.st
	res := &Result{Reason: o.Reason, RetryLater: o.RetryLater(), always200: st.snap.Server.HTTPStatus == policy.HTTPStatusAlways200,
		unsupportedMedia: unsupportedMedia(o)}
	env := &res.Envelope
	if cl.replay != nil {
		// The stored envelope answers, as this call: its own call_id, no
		// cost (nothing ran), marked replayed.
		*env = *cl.replay
		env.Replayed, env.Cost, env.CallID, env.Tool = true, 0, cl.callID, cl.req.Tool
		// It says so in words as well: many clients show the model only
		// the observation.
		m := c.message(st, cl, o)
		env.Message = m.Text
		env.Observation = contracts.EnvelopeObservation(env.Status, m, env.Data, observationOptions(st, cl))
		c.record(ctx, cl, res)
		return res
	}
	env.Status = o.Status
	env.Tool = cl.req.Tool
	env.CallID = cl.callID
	env.Data = o.Data
	env.Retryable = o.Retryable
	env.SideEffect = contracts.SideEffectNone
	sideEffect := cl.tool != nil && cl.tool.contract.SideEffect
	if sideEffect {
		env.SideEffect = o.Effect
	}
	env.SideEffectDone = env.SideEffect == contracts.SideEffectDone
	env.RetryAfterMS = o.RetryAfterMS()
	if cl.tool != nil && cl.sent {
		env.Cost = cl.tool.contract.Cost
	}
	env.Replayed = cl.replayLost
	m := c.message(st, cl, o)
	env.Message = m.Text
	// Envelope data is always compact, valid UTF-8 JSON (the backend's
	// answer went through the tape parser), so it is not validated again;
	// where its members lie is known from making it.
	opt := observationOptions(st, cl)
	opt.Members = o.Members
	env.Observation = contracts.EnvelopeObservation(env.Status, m, env.Data, opt)
	c.record(ctx, cl, res)
	return res
}

// record counts the call, keeps it among its tool's recent outcomes
// (live.go) and writes its log line.
func (c *Core) record(ctx context.Context, cl *Call, res *Result) {
	metrics := cl.st.unknown
	if cl.tool != nil {
		metrics = cl.tool.metrics
	}
	end := c.now()
	elapsed := end.Sub(cl.start)
	metrics.record(res.Envelope.Status, cl.caller, elapsed, res.Envelope.Cost)
	if cl.tool != nil {
		cl.tool.live.recordRecent(cl, &res.Envelope, res.Reason, end, elapsed)
	}
	if c.logger.Enabled(ctx, slog.LevelInfo) || len(cl.diags) > 0 && c.logger.Enabled(ctx, slog.LevelWarn) {
		c.log(ctx, cl, res, elapsed)
	}
}

// message composes the call's message (contracts.Catalog.Compose): what
// happened, in the tool's template where one speaks for the outcome or in
// the catalogue's words, and what to do, from the envelope's fields.
func (c *Core) message(st *state, cl *Call, o *contracts.Outcome) contracts.Message {
	said := contracts.Said{Args: cl.args, Attempts: cl.attempts, Replay: cl.replay, Sent: cl.sent}
	if cl.tool != nil {
		said.Tool, said.Contract = cl.tool.contract.Name, cl.tool.contract
	} else {
		said.Tool = printableName(cl.req.Tool)
		if o.Reason == contracts.ReasonUnknownTool {
			// The names the caller may use, as GET /v1/tools lists them.
			for _, name := range st.snap.ToolNames {
				if st.snap.Access.Allows(cl.req.Caller, name) {
					said.Tools = append(said.Tools, name)
				}
			}
		}
	}
	return st.snap.Catalog.Compose(&said, o)
}

// observationOptions are the observation's bound, the catalogue's language
// for its truncation marker, and the tool's truncation_hint.
func observationOptions(st *state, cl *Call) contracts.ObservationOptions {
	opt := contracts.ObservationOptions{MaxChars: st.snap.Server.ObservationMaxChars, Lang: st.snap.Catalog.Lang()}
	if cl.tool != nil {
		opt.Hint = cl.tool.contract.TruncationHint
	}
	return opt
}

// printableName makes an unknown tool name safe to repeat in a message.
func printableName(s string) string {
	if len(s) > 64 {
		s = s[:64]
	}
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return -1
		}
		return r
	}, s)
}

// diagnostic is a part of the contract that failed on a backend answer:
// a response expression that could not be evaluated, or an answer its
// response.schema does not accept. The call's log line names it, at warn,
// so an operator can tell a broken contract from a broken backend. It
// never holds the answer's body or values.
type diagnostic struct {
	expr        string // as the policy spells it: "response.data", "errors[2].when", "response.schema"
	err         string // CEL's error, or where the schema refused the answer and by which keyword
	code        int    // the backend's HTTP status
	contentType string // the answer's media type
	schema      *contracts.SchemaViolation
}

// maxDiagnostics bounds what one call keeps: the first failure is the
// one to fix, the next may be its consequence.
const maxDiagnostics = 4

// diagnose records that expr failed on the answer of a.
func (cl *Call) diagnose(a *attempt, expr, err string, v *contracts.SchemaViolation) {
	if len(cl.diags) >= maxDiagnostics {
		return
	}
	ct := headerMediaType(a.header)
	if len(ct) > 100 {
		ct = ct[:100]
	}
	cl.diags = append(cl.diags, diagnostic{expr: expr, err: oneLineLog(err), code: a.code, contentType: printableName(ct), schema: v})
}

// diagnoseRule records a response expression's failure (a
// *contracts.EvalError).
func (cl *Call) diagnoseRule(a *attempt, err error) {
	var ee *contracts.EvalError
	if errors.As(err, &ee) {
		cl.diagnose(a, ee.Expr, ee.Err.Error(), nil)
		return
	}
	cl.diagnose(a, "response", err.Error(), nil)
}

// oneLineLog bounds an error for the log line: one line, 300 bytes.
func oneLineLog(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 300 {
		s = strings.ToValidUTF8(s[:300], "") + "…"
	}
	return s
}

// diagnosticAttrs are the log line's fields for the contract's failures:
// the first in full, the others by expression and error.
func (cl *Call) diagnosticAttrs(attrs []slog.Attr) []slog.Attr {
	d := cl.diags[0]
	attrs = append(attrs,
		slog.String("expression", d.expr),
		slog.String("error", d.err),
		slog.Int("backend_status", d.code),
		slog.String("content_type", d.contentType),
	)
	if d.schema != nil {
		attrs = append(attrs, slog.String("schema_location", d.schema.Location), slog.String("schema_keyword", d.schema.Keyword))
	}
	if len(cl.diags) > 1 {
		more := make([]string, 0, len(cl.diags)-1)
		for _, d := range cl.diags[1:] {
			more = append(more, d.expr+": "+d.err)
		}
		attrs = append(attrs, slog.String("more_errors", strings.Join(more, "; ")))
	}
	return attrs
}

func (c *Core) log(ctx context.Context, cl *Call, res *Result, elapsed time.Duration) {
	level := slog.LevelInfo
	if len(cl.diags) > 0 {
		level = slog.LevelWarn
	}
	// The record goes to the handler directly: Logger.LogAttrs would add
	// a frame of almost a kilobyte (the caller's PC, which no toolgate
	// handler reads) on the call's stack, under the JSON handler's own,
	// which is deep (it writes a float through encoding/json), and the
	// call must stay within 8 KiB (TestACallStaysWithinASmallStack).
	h := c.logger.Handler()
	if !h.Enabled(ctx, level) {
		return
	}
	r := slog.NewRecord(time.Now(), level, "call", 0)
	r.AddAttrs(cl.logAttrs(res, elapsed)...)
	_ = h.Handle(ctx, r)
}

// logAttrs are the attributes of a call's log line. Out of line: the
// attributes it builds would otherwise take room on the stack under the
// log handler's own, which is deep (a JSON handler writes a float through
// encoding/json).
//
//go:noinline
func (cl *Call) logAttrs(res *Result, elapsed time.Duration) []slog.Attr {
	env := &res.Envelope
	attrs := make([]slog.Attr, 0, 18+len(cl.req.LogAttrs))
	attrs = append(attrs,
		slog.String("tool", cl.metricsName()),
		slog.String("status", string(env.Status)),
		slog.String("reason", string(res.Reason)),
		slog.String("caller", cl.caller),
		slog.Float64("duration_ms", float64(elapsed.Microseconds())/1000),
		slog.String("call_id", env.CallID),
		slog.String("front", cl.req.Front),
	)
	if cl.tool != nil {
		attrs = append(attrs, slog.String("upstream", cl.tool.contract.Upstream))
	}
	if cl.upCode != "" {
		attrs = append(attrs, slog.String("upstream_code", cl.upCode), slog.Int("attempts", cl.attempts))
	}
	if env.Replayed {
		attrs = append(attrs, slog.Bool("replayed", true))
	}
	if id := traceID(cl.span); id != "" {
		attrs = append(attrs, slog.String("trace_id", id))
	}
	if len(cl.diags) > 0 {
		attrs = cl.diagnosticAttrs(attrs)
	}
	return append(attrs, cl.req.LogAttrs...)
}

func (cl *Call) metricsName() string {
	if cl.tool == nil {
		return "unknown"
	}
	return cl.tool.contract.Name
}

// unsupportedMedia reports whether the outcome refuses the request body's
// media type alone, which an HTTP front answers with 415 rather than 400
// (render.go): the tool endpoint for a body that is not JSON, a
// transparent route for one that is neither JSON nor a form.
func unsupportedMedia(o *contracts.Outcome) bool {
	return o.Reason == contracts.ReasonBadJSON && o.Args != nil && len(o.Args.List) == 1 &&
		o.Args.List[0].Problem == contracts.ProblemMediaType
}
