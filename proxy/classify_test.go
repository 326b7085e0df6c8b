package proxy

import (
	"fmt"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/contracts"
)

// TestStatusMappingTable drives every row of DESIGN.md section 1's mapping
// table through the HTTP front, for a read-only and a side-effecting tool.
func TestStatusMappingTable(t *testing.T) {
	h := newHarness(t, harnessPolicy)
	type want struct {
		status     contracts.Status
		retryable  bool
		sideEffect contracts.SideEffect // of the side-effecting tool; read-only tools always say none
		http       int
		retryAfter bool // Retry-After header and retry_after_ms
	}
	rows := []struct {
		name     string
		args     string
		ro, se   want
		roTool   string
		seTool   string
		costless bool // the backend was never called
	}{
		{name: "2xx with data", args: `{"mode":"ok"}`,
			ro: want{contracts.StatusOK, false, "", 200, false}, se: want{contracts.StatusOK, false, contracts.SideEffectDone, 200, false}},
		{name: "2xx with empty data", args: `{"mode":"empty"}`,
			ro: want{contracts.StatusEmpty, false, "", 200, false}, se: want{contracts.StatusOK, false, contracts.SideEffectDone, 200, false}},
		{name: "arguments fail the schema", args: `{"mode":"ok","limit":9}`, costless: true,
			ro: want{contracts.StatusBadArgs, false, "", 400, false}, se: want{contracts.StatusBadArgs, false, contracts.SideEffectNone, 400, false}},
		{name: "upstream 400", args: `{"mode":"400"}`,
			ro: want{contracts.StatusBadArgs, false, "", 400, false}, se: want{contracts.StatusBadArgs, false, contracts.SideEffectNone, 400, false}},
		{name: "upstream 409", args: `{"mode":"409"}`,
			ro: want{contracts.StatusBadArgs, false, "", 400, false}, se: want{contracts.StatusBadArgs, false, contracts.SideEffectNone, 400, false}},
		{name: "upstream 413", args: `{"mode":"413"}`,
			ro: want{contracts.StatusBadArgs, false, "", 400, false}, se: want{contracts.StatusBadArgs, false, contracts.SideEffectNone, 400, false}},
		{name: "upstream 422", args: `{"mode":"422"}`,
			ro: want{contracts.StatusBadArgs, false, "", 400, false}, se: want{contracts.StatusBadArgs, false, contracts.SideEffectNone, 400, false}},
		{name: "upstream 401", args: `{"mode":"401"}`,
			ro: want{contracts.StatusForbidden, false, "", 403, false}, se: want{contracts.StatusForbidden, false, contracts.SideEffectNone, 403, false}},
		{name: "upstream 403", args: `{"mode":"403"}`,
			ro: want{contracts.StatusForbidden, false, "", 403, false}, se: want{contracts.StatusForbidden, false, contracts.SideEffectNone, 403, false}},
		{name: "upstream 404", args: `{"mode":"404"}`,
			ro: want{contracts.StatusNotFound, false, "", 404, false}, se: want{contracts.StatusNotFound, false, contracts.SideEffectNone, 404, false}},
		{name: "upstream 408", args: `{"mode":"408"}`,
			ro: want{contracts.StatusTimeout, true, "", 504, false}, se: want{contracts.StatusTimeout, true, contracts.SideEffectNone, 504, false}},
		{name: "upstream 429 honours Retry-After", args: `{"mode":"429"}`,
			ro: want{contracts.StatusUpstream, true, "", 503, true}, se: want{contracts.StatusUpstream, true, contracts.SideEffectNone, 503, true}},
		{name: "upstream 503 honours Retry-After", args: `{"mode":"503"}`,
			ro: want{contracts.StatusUpstream, true, "", 503, true}, se: want{contracts.StatusUpstream, true, contracts.SideEffectNone, 503, true}},
		{name: "upstream 500", args: `{"mode":"500"}`,
			ro: want{contracts.StatusUpstream, true, "", 502, false}, se: want{contracts.StatusUpstream, false, contracts.SideEffectUnknown, 502, false}},
		{name: "upstream 502", args: `{"mode":"502"}`,
			ro: want{contracts.StatusUpstream, true, "", 502, false}, se: want{contracts.StatusUpstream, false, contracts.SideEffectUnknown, 502, false}},
		{name: "upstream 500 at a backend that dedupes on the forwarded key", args: `{"mode":"500"}`, seTool: "write_dedupe",
			ro: want{contracts.StatusUpstream, true, "", 502, false}, se: want{contracts.StatusUpstream, true, contracts.SideEffectUnknown, 502, false}},
		{name: "connection reset after the request was written", args: `{"mode":"reset"}`,
			ro: want{contracts.StatusUpstream, true, "", 502, false}, se: want{contracts.StatusUpstream, false, contracts.SideEffectUnknown, 502, false}},
		{name: "upstream 504", args: `{"mode":"504"}`,
			ro: want{contracts.StatusTimeout, true, "", 504, false}, se: want{contracts.StatusTimeout, false, contracts.SideEffectUnknown, 504, false}},
		{name: "our deadline passed after the request was written", args: `{"mode":"hang"}`,
			ro: want{contracts.StatusTimeout, true, "", 504, false}, se: want{contracts.StatusTimeout, false, contracts.SideEffectUnknown, 504, false}},
		{name: "upstream 501", args: `{"mode":"501"}`,
			ro: want{contracts.StatusUpstream, false, "", 502, false}, se: want{contracts.StatusUpstream, false, contracts.SideEffectNone, 502, false}},
		{name: "upstream 505", args: `{"mode":"505"}`,
			ro: want{contracts.StatusUpstream, false, "", 502, false}, se: want{contracts.StatusUpstream, false, contracts.SideEffectNone, 502, false}},
		{name: "2xx whose body declares JSON but is not", args: `{"mode":"badjson"}`,
			ro: want{contracts.StatusUpstream, false, "", 502, false}, se: want{contracts.StatusUpstream, false, contracts.SideEffectDone, 502, false}},
		{name: "2xx with an oversized body", args: `{"mode":"big"}`,
			ro: want{contracts.StatusUpstream, false, "", 502, false}, se: want{contracts.StatusUpstream, false, contracts.SideEffectDone, 502, false}},
		{name: "connect failure before anything was sent", args: `{}`, roTool: "read_refused", seTool: "write_refused", costless: true,
			ro: want{contracts.StatusUpstream, true, "", 503, true}, se: want{contracts.StatusUpstream, true, contracts.SideEffectNone, 503, true}},
		{name: "TLS trust failure", args: `{}`, roTool: "read_tls", seTool: "", costless: true,
			ro: want{contracts.StatusUpstream, false, "", 502, false}},
	}
	for i, row := range rows {
		for _, kind := range []string{"read-only", "side-effecting"} {
			tool, w := "read", row.ro
			if row.roTool != "" {
				tool = row.roTool
			}
			if kind == "side-effecting" {
				tool, w = "write", row.se
				if row.seTool != "" {
					tool = row.seTool
				}
				if row.name == "TLS trust failure" {
					continue
				}
			}
			t.Run(row.name+" for a "+kind+" tool", func(t *testing.T) {
				hdr := map[string]string{"Idempotency-Key": fmt.Sprintf("table-%d", i)}
				resp, env := h.call(t, tool, row.args, hdr)
				wantEffect := contracts.SideEffectNone
				if kind == "side-effecting" {
					wantEffect = w.sideEffect
				}
				if env.Status != w.status || env.Retryable != w.retryable || env.SideEffect != wantEffect {
					t.Errorf("envelope = %s retryable=%v side_effect=%s, want %s %v %s (message %q)",
						env.Status, env.Retryable, env.SideEffect, w.status, w.retryable, wantEffect, env.Message)
				}
				if env.SideEffectDone != (env.SideEffect == contracts.SideEffectDone) {
					t.Error("side_effect_done disagrees with side_effect")
				}
				if resp.StatusCode != w.http {
					t.Errorf("HTTP status = %d, want %d", resp.StatusCode, w.http)
				}
				if got := resp.Header.Get("Toolgate-Status"); got != string(w.status) {
					t.Errorf("Toolgate-Status = %q", got)
				}
				if w.retryAfter != (resp.Header.Get("Retry-After") != "") || w.retryAfter != (env.RetryAfterMS > 0) {
					t.Errorf("Retry-After = %q, retry_after_ms = %d, want set=%v", resp.Header.Get("Retry-After"), env.RetryAfterMS, w.retryAfter)
				}
				if strings.ContainsAny(env.Message, "\n") || env.Message == "" {
					t.Errorf("message is not one line: %q", env.Message)
				}
				// The message agrees with the envelope.
				if !env.Retryable && strings.Contains(env.Message, "retry the same call") {
					t.Errorf("not retryable, yet the message says to retry: %q", env.Message)
				}
				if !row.costless && (strings.Contains(env.Message, "before the call was sent") || strings.Contains(env.Message, "nothing was sent")) {
					t.Errorf("the request reached the backend, yet the message says it was not sent: %q", env.Message)
				}
				for _, leak := range []string{secretHost, "127.0.0.1", "java.lang", "<html>", "localhost"} {
					if strings.Contains(env.Message, leak) || strings.Contains(env.Observation, leak) {
						t.Errorf("message or observation leaks %q: %q / %q", leak, env.Message, env.Observation)
					}
				}
				if prefix := w.status.Tag() + " " + env.Message; !strings.HasPrefix(env.Observation, prefix) {
					t.Errorf("observation %q does not start with %q", env.Observation, prefix)
				}
				if row.costless && env.Cost != 0 {
					t.Errorf("cost = %v for a call that never reached the backend", env.Cost)
				}
				if env.Tool != tool || env.CallID == "" || env.Replayed {
					t.Errorf("tool=%q call_id=%q replayed=%v", env.Tool, env.CallID, env.Replayed)
				}
			})
		}
	}
}

func TestErrorRuleClassifiesA200ErrorBody(t *testing.T) {
	h := newHarness(t, harnessPolicy)
	resp, env := h.call(t, "read", `{"mode":"nocode"}`, nil)
	if env.Status != contracts.StatusForbidden || env.Retryable || resp.StatusCode != 403 {
		t.Fatalf("envelope = %+v", env)
	}
}

func TestUnknownToolIsNotFound(t *testing.T) {
	h := newHarness(t, harnessPolicy)
	resp, env := h.call(t, "nope", `{}`, nil)
	if env.Status != contracts.StatusNotFound || resp.StatusCode != 404 || env.Cost != 0 {
		t.Fatalf("envelope = %+v", env)
	}
	if h.backend.calls.Load() != 0 {
		t.Error("the backend was called")
	}
}

func TestDataIsShapedByTheContract(t *testing.T) {
	h := newHarness(t, harnessPolicy)
	_, env := h.call(t, "read", `{"mode":"ok"}`, nil)
	if string(env.Data) != `{"items":[{"id":1,"title":"t"}],"total":1}` {
		t.Errorf("data = %s", env.Data)
	}
	if env.Cost != 0.5 {
		t.Errorf("cost = %v", env.Cost)
	}
}
