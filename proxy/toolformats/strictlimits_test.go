package toolformats

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/policy"
)

// objectOf is an object schema whose properties are all required.
func objectOf(props map[string]any) map[string]any {
	req := make([]any, 0, len(props))
	for name := range props {
		req = append(req, name)
	}
	return map[string]any{"type": "object", "properties": props, "required": req, "additionalProperties": false}
}

// withProperties has n string properties.
func withProperties(n int) map[string]any {
	props := make(map[string]any, n)
	for i := range n {
		props[fmt.Sprintf("p%d", i)] = map[string]any{"type": "string"}
	}
	return objectOf(props)
}

// nestedTo has a string at depth levels below the root, each level an
// object property.
func nestedTo(depth int) map[string]any {
	var node map[string]any = map[string]any{"type": "string"}
	for range depth - 1 {
		node = objectOf(map[string]any{"n": node})
	}
	return objectOf(map[string]any{"n": node})
}

// withEnum has one property whose enum has n values (strings of size
// characters, or integers with size 0).
func withEnum(n, size int) map[string]any {
	values := make([]any, n)
	for i := range values {
		if size == 0 {
			values[i] = i
			continue
		}
		s := fmt.Sprintf("%d-", i)
		values[i] = s + strings.Repeat("x", size-len(s))
	}
	return objectOf(map[string]any{"e": map[string]any{"enum": values}})
}

// withLongEnum has one property whose enum has n string values totalling
// chars characters.
func withLongEnum(n, chars int) map[string]any {
	values := make([]any, n)
	left := chars
	for i := range values {
		size := left / (n - i)
		s := fmt.Sprintf("%d", i)
		values[i] = s + strings.Repeat("x", size-len(s))
		left -= size
	}
	return objectOf(map[string]any{"e": map[string]any{"type": "string", "enum": values}})
}

// withChars has property names and a const totalling chars characters.
func withChars(chars int) map[string]any {
	return objectOf(map[string]any{"c": map[string]any{"const": strings.Repeat("x", chars-1)}})
}

func strictSnapshot(t *testing.T, schemas map[string]map[string]any) *policy.Snapshot {
	t.Helper()
	snap := &policy.Snapshot{Tools: map[string]*contracts.Contract{}}
	for name, schema := range schemas {
		ct, err := contracts.Compile(nil, contracts.ContractSpec{
			Name: name, Upstream: "u", Args: schema,
			Request: contracts.BindingSpec{Method: "GET", Path: "/x"},
		})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		snap.Tools[name] = ct
		snap.ToolNames = append(snap.ToolNames, name)
	}
	slices.Sort(snap.ToolNames)
	return snap
}

// TestStrictFormatsLeaveOutToolsPastOpenAIsLimits checks each documented
// size limit of strict mode at the limit (listed) and one past it (left
// out, with a reason that names the limit), in both strict formats.
func TestStrictFormatsLeaveOutToolsPastOpenAIsLimits(t *testing.T) {
	cases := []struct {
		name   string
		schema map[string]any
		reason string // "" when the tool is listed
	}{
		{"5000 object properties are taken", withProperties(5000), ""},
		{"5001 object properties are left out", withProperties(5001), "has 5001 object properties; strict mode takes at most 5000"},
		{"10 levels of nesting are taken", nestedTo(10), ""},
		{"11 levels of nesting are left out", nestedTo(11), "strict mode nests at most 10 levels"},
		{"1000 enum values are taken", withEnum(1000, 0), ""},
		{"1001 enum values are left out", withEnum(1001, 0), "has 1001 enum values; strict mode takes at most 1000"},
		{"251 enum strings of 15000 characters are taken", withLongEnum(251, 15000), ""},
		{"251 enum strings of 15001 characters are left out", withLongEnum(251, 15001),
			"an enum of 251 values (more than 250) whose strings total 15001 characters; strict mode takes at most 15000"},
		{"250 enum strings may total more than 15000 characters", withLongEnum(250, 20000), ""},
		{"120000 characters of names and values are taken", withChars(120000), ""},
		{"120001 characters of names and values are left out", withChars(120001),
			"has 120001 characters of property names, definition names, enum and const values; strict mode takes at most 120000"},
	}
	for _, tc := range cases {
		snap := strictSnapshot(t, map[string]map[string]any{"big": tc.schema})
		for _, format := range []string{"openai-strict", "openai-responses-strict"} {
			t.Run(format+": "+tc.name, func(t *testing.T) {
				entries, left, err := ListIn(snap, func(string) bool { return true }, format)
				if err != nil {
					t.Fatal(err)
				}
				if tc.reason == "" {
					if len(left) != 0 || len(entries) != 1 {
						t.Fatalf("left out %v, want the tool listed", left)
					}
					return
				}
				if len(entries) != 0 || len(left) != 1 || left[0].Name != "big" || !strings.Contains(left[0].Reason, tc.reason) {
					t.Fatalf("%d listed, left out %v; want big left out for %q", len(entries), left, tc.reason)
				}
			})
		}
	}
	t.Run("the loose formats list every tool", func(t *testing.T) {
		snap := strictSnapshot(t, map[string]map[string]any{"big": withProperties(5001), "deep": nestedTo(11)})
		for _, format := range []string{"openai", "openai-responses", "anthropic"} {
			if _, left, _ := ListIn(snap, func(string) bool { return true }, format); len(left) != 0 {
				t.Errorf("%s left out %v", format, left)
			}
		}
	})
}

// TestStrictTotalsAreCountedOverTheList: a request carries every listed
// tool, so the totals hold for the list; a tool that would take the list
// past one is left out, and the tools after it are still listed while
// they fit.
func TestStrictTotalsAreCountedOverTheList(t *testing.T) {
	cases := []struct {
		name    string
		schemas map[string]map[string]any
		listed  string
		left    map[string]string
	}{
		{"object properties", map[string]map[string]any{
			"a": withProperties(2500), "b": withProperties(2499), "c": withProperties(2), "d": withProperties(1),
		}, "a,b,d", map[string]string{
			"c": "the argument schema has 2 object properties, and the tools listed before it 4999: strict mode takes at most 5000 in a request",
		}},
		{"enum values", map[string]map[string]any{
			"a": withEnum(600, 0), "b": withEnum(401, 0), "c": withEnum(400, 0),
		}, "a,c", map[string]string{
			"b": "the argument schema has 401 enum values, and the tools listed before it 600: strict mode takes at most 1000 in a request",
		}},
		{"characters", map[string]map[string]any{
			"a": withChars(100000), "b": withChars(20001), "c": withChars(20000),
		}, "a,c", map[string]string{
			"b": "the argument schema has 20001 characters of property names, definition names, enum and const values, and the tools listed before it 100000: strict mode takes at most 120000 in a request",
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			entries, left, err := ListIn(strictSnapshot(t, tc.schemas), func(string) bool { return true }, "openai-responses-strict")
			if err != nil {
				t.Fatal(err)
			}
			var listed []string
			for _, e := range entries {
				raw, _ := json.Marshal(e)
				var m struct{ Name string }
				_ = json.Unmarshal(raw, &m)
				listed = append(listed, m.Name)
			}
			if got := strings.Join(listed, ","); got != tc.listed {
				t.Errorf("listed %s, want %s", got, tc.listed)
			}
			if len(left) != len(tc.left) {
				t.Fatalf("left out %v, want %v", left, tc.left)
			}
			for _, l := range left {
				if tc.left[l.Name] != l.Reason {
					t.Errorf("%s left out for %q, want %q", l.Name, l.Reason, tc.left[l.Name])
				}
			}
		})
	}
}
