package contracts

import (
	"fmt"
	"strings"
	"testing"
)

// BenchmarkTapeReaders measures the paths that read JSON through the tape:
// a stored envelope decoded for a replay, arguments decoded for a call, and
// a backend answer parsed and read by the example's rules (direct path and
// CEL).
func BenchmarkTapeReaders(b *testing.B) {
	env := Envelope{Status: StatusOK, Message: "Found 3 articles.", Data: []byte(`{"items":[{"id":"kb-1","title":"Tool calling"}],"total":1}`),
		SideEffect: SideEffectDone, SideEffectDone: true, Cost: 0.01, Tool: "send_notification", CallID: "c", Observation: "[OK] Found 3 articles.\n{}"}
	stored := env.AppendJSON(nil)
	b.Run("decode envelope", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := DecodeEnvelope(stored); err != nil {
				b.Fatal(err)
			}
		}
	})
	args := []byte(`{"q":"go tool calling","limit":5,"tags":["a","b"],"filter":{"lang":"en","since":"2024-01-01"}}`)
	b.Run("decode arguments", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := DecodeArgs(args, 32); err != nil {
				b.Fatal(err)
			}
		}
	})
	var items []string
	for i := range 8 {
		items = append(items, fmt.Sprintf(`{"id": "kb-%04d", "title": "Article %d about tool calling", "score": 0.5, "tags": ["a", "b"]}`, i, i))
	}
	answer := []byte(`{"results": [` + strings.Join(items, ", ") + `], "total": 8, "took_ms": 3}`)
	renv, err := NewRuleEnv(RuleOptions{})
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		rules RulesSpec
	}{
		{"rules, direct", RulesSpec{Data: `{"items": body.results, "total": body.total}`, Empty: `size(body.results) == 0`,
			Errors: []ErrorRuleSpec{{When: `status == 200 && has(body.code) && body.code == "E_NOPERM"`, Status: StatusForbidden}}}},
		{"rules, CEL", RulesSpec{Data: `{"items": body.results.filter(r, r.score > 0.1), "total": body.total}`, Empty: `body.results.all(r, r.score < 0.1)`,
			Errors: []ErrorRuleSpec{{When: `body.results.exists(r, "c" in r.tags)`, Status: StatusForbidden}}}},
	} {
		rules, err := compileRules(renv, tc.rules)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			buf := make([]byte, 0, 4096)
			for b.Loop() {
				body, err := ParseBody(answer)
				if err != nil {
					b.Fatal(err)
				}
				in := &RuleInput{Status: 200, Body: body}
				if _, matched, err := rules.MatchError(in); matched || err != nil {
					b.Fatal(matched, err)
				}
				if empty, _, err := rules.Empty(in); empty || err != nil {
					b.Fatal(empty, err)
				}
				if _, _, _, err := rules.DataMembers(buf[:0], in); err != nil {
					b.Fatal(err)
				}
				body.Release()
			}
		})
	}
}
