package contracts

import (
	"encoding/json"
	"strconv"

	"github.com/toolgate/toolgate/internal/jsontape"
)

// Coerce turns the text values of a query parameter or path segment into
// the argument's JSON value by the schema's declared type: "3" becomes the
// integer 3 for an integer argument, repeated values become an array where
// the schema says array. A value that does not fit is an *ArgError naming
// the argument.
func (s *Schema) Coerce(arg string, raw []string) (any, error) {
	ptr := "/" + escapePointer(arg)
	sub := s.propertySchema(arg)
	types := schemaTypes(sub)
	if contains(types, "array") {
		items, _ := sub["items"].(map[string]any)
		itemTypes := schemaTypes(items)
		out := make([]any, 0, len(raw))
		for i, v := range raw {
			c, err := coerceScalar(itemTypes, v, ptr+"/"+strconv.Itoa(i))
			if err != nil {
				return nil, err
			}
			out = append(out, c)
		}
		return out, nil
	}
	if len(raw) == 0 {
		return nil, &ArgError{Pointer: ptr, Problem: ProblemRequired}
	}
	if len(raw) > 1 {
		return nil, &ArgError{Pointer: ptr, Problem: ProblemRepeated, Got: strconv.Itoa(len(raw))}
	}
	return coerceScalar(types, raw[0], ptr)
}

func schemaTypes(sub map[string]any) []string {
	switch t := sub["type"].(type) {
	case string:
		return []string{t}
	case []any:
		var out []string
		for _, e := range t {
			if s, ok := e.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}

// coerceScalar converts text by the first declared type it fits; with no
// declared type, or "string" among them, text stays a string. A number
// beyond the argument bounds (numbers.go) fits no numeric type; when no
// other type takes it, the error says so. The error, when not nil, is an
// *ArgError for the argument at ptr.
func coerceScalar(types []string, v, ptr string) (any, error) {
	if len(types) == 0 {
		return v, nil
	}
	tooBig := false
	for _, t := range types {
		switch t {
		case "integer":
			if isIntegerLiteral(v) {
				if numberInBounds(v) {
					return json.Number(v), nil
				}
				tooBig = true
			}
		case "number":
			if jsontape.IsNumber(v) {
				if numberInBounds(v) {
					return json.Number(v), nil
				}
				tooBig = true
			}
		case "boolean":
			if v == "true" || v == "false" {
				return v == "true", nil
			}
		case "string":
			return v, nil
		case "null":
			if v == "null" || v == "" {
				return nil, nil
			}
		}
	}
	if tooBig {
		return nil, &ArgError{Pointer: ptr, Problem: ProblemNumber, Got: gotLiteral(v)}
	}
	return nil, &ArgError{Pointer: ptr, Problem: ProblemType, Values: types, Got: quoteShort(v)}
}

// isIntegerLiteral accepts an integer written as JSON writes one: digits,
// an optional minus, no leading zero.
func isIntegerLiteral(v string) bool {
	if v == "" {
		return false
	}
	i := 0
	if v[0] == '-' {
		i = 1
	}
	if i == len(v) || (v[i] == '0' && len(v) > i+1) {
		return false
	}
	for ; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return false
		}
	}
	return true
}
