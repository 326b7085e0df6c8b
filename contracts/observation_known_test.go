package contracts

import (
	"strings"
	"testing"

	"github.com/toolgate/toolgate/examples"
)

// TestObservationWithMembersMatchesWithout: the data's members as
// DataMembers locates them (arrays of the answer with their elements
// counted) change what the observation costs, never what it says.
func TestObservationWithMembersMatchesWithout(t *testing.T) {
	env := newRuleEnv(t)
	nested := `{"results":[` + strings.Repeat(`[1,[2,"]"],{"k":"v\"]"}],`, 300) + `[]],"total":301,"x":"` + strings.Repeat("量", 900) + `"}`
	tests := []struct {
		name, data, answer string
	}{
		{"search answer of 1 KiB", `{"items": body.results, "total": body.total}`, string(examples.PaddedSearchAnswer(1 << 10))},
		{"search answer of 8 KiB", `{"items": body.results, "total": body.total}`, string(examples.PaddedSearchAnswer(8 << 10))},
		{"search answer of 64 KiB", `{"items": body.results, "total": body.total}`, string(examples.PaddedSearchAnswer(64 << 10))},
		{"the array after a member", `{"total": body.total, "items": body.results}`, string(examples.PaddedSearchAnswer(16 << 10))},
		{"nested arrays and escapes", `{"items": body.results, "x": body.x, "total": body.total}`, nested},
		{"the same array twice", `{"a": body.results, "b": body.results}`, nested},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := compileRules(env, RulesSpec{Data: tt.data})
			if err != nil {
				t.Fatal(err)
			}
			body, err := ParseBody([]byte(tt.answer))
			if err != nil {
				t.Fatal(err)
			}
			defer body.Release()
			data, members, shaped, err := r.DataMembers(nil, &RuleInput{Status: 200, Body: body})
			if err != nil || !shaped {
				t.Fatalf("data: shaped %v, %v", shaped, err)
			}
			counted := false
			for _, m := range members {
				counted = counted || m.Elements > 0
			}
			if !counted {
				t.Fatalf("no member counts its elements: %+v", members)
			}
			m := Message{Text: "命中 300 条。", ActionAt: len("命中 300 条。")}
			for _, maxChars := range []int{MinObservationMaxChars, 300, 700, 1800, 5000, 40000} {
				for _, status := range []Status{StatusOK, StatusUpstream} {
					opt := ObservationOptions{MaxChars: maxChars, Lang: "zh", Hint: "请换更具体的关键词"}
					want := EnvelopeObservation(status, m, data, opt)
					opt.Members = members
					if got := EnvelopeObservation(status, m, data, opt); got != want {
						t.Errorf("%s at %d chars:\n got %q\nwant %q", status, maxChars, got, want)
					}
				}
			}
		})
	}
}
