package contracts

import (
	"encoding/json"
	"math/big"
	"strconv"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// quickSchema vouches for arguments that a simple schema certainly allows,
// so the common call skips the library's general validator (which formats
// every number through fmt into a big.Rat and allocates per keyword). It
// never rejects: whatever it cannot vouch for goes to the library, which
// gives the verdict and the message. So it only has to be right when it
// says yes.
//
// A schema qualifies when every keyword in it, at every level, is one of
// quickKeywords; its limits are read from the library's compiled schema,
// so both apply the same values (and the same compiled pattern).
type quickSchema struct {
	types    jsonTypes
	props    map[string]*quickSchema
	required []string
	closed   bool // additionalProperties: false

	minLen, maxLen int // -1: none
	pattern        jsonschema.Regexp

	min, max, exMin, exMax *int64

	items              *quickSchema
	minItems, maxItems int // -1: none
}

type jsonTypes uint8

const (
	typeNull jsonTypes = 1 << iota
	typeBoolean
	typeInteger
	typeNumber
	typeString
	typeArray
	typeObject
	typeAny jsonTypes = 1<<7 - 1
)

var jsonTypeNames = map[string]jsonTypes{
	"null": typeNull, "boolean": typeBoolean, "integer": typeInteger, "number": typeNumber,
	"string": typeString, "array": typeArray, "object": typeObject,
}

// quickKeywords are the keywords quickSchema applies, and the annotations
// that assert nothing. format is left out: it may assert.
var quickKeywords = map[string]bool{
	"type": true, "properties": true, "required": true, "additionalProperties": true,
	"minLength": true, "maxLength": true, "pattern": true,
	"minimum": true, "maximum": true, "exclusiveMinimum": true, "exclusiveMaximum": true,
	"items": true, "minItems": true, "maxItems": true,
	"title": true, "description": true, "default": true, "examples": true,
	"$comment": true, "deprecated": true, "readOnly": true, "writeOnly": true,
}

// newQuickSchema returns the quick check of a compiled schema, or nil when
// the schema uses anything it does not apply.
func newQuickSchema(doc map[string]any, c *jsonschema.Schema, top bool) *quickSchema {
	if c == nil {
		return nil
	}
	for k := range doc {
		if !quickKeywords[k] && !(top && k == "$schema") {
			return nil
		}
	}
	q := &quickSchema{types: typeAny, minLen: -1, maxLen: -1, minItems: -1, maxItems: -1}
	if c.Types != nil {
		q.types = 0
		for _, name := range c.Types.ToStrings() {
			t, ok := jsonTypeNames[name]
			if !ok {
				return nil
			}
			q.types |= t
		}
	}
	if props, ok := doc["properties"].(map[string]any); ok {
		q.props = make(map[string]*quickSchema, len(props))
		for name, sub := range props {
			subDoc, ok := sub.(map[string]any)
			if !ok {
				return nil // a boolean schema
			}
			if q.props[name] = newQuickSchema(subDoc, c.Properties[name], false); q.props[name] == nil {
				return nil
			}
		}
	} else if _, present := doc["properties"]; present {
		return nil
	}
	q.required = c.Required
	switch ap := c.AdditionalProperties.(type) {
	case nil:
	case bool:
		q.closed = !ap
	default:
		return nil // a schema for the other properties
	}
	if c.MinLength != nil {
		q.minLen = *c.MinLength
	}
	if c.MaxLength != nil {
		q.maxLen = *c.MaxLength
	}
	q.pattern = c.Pattern
	var ok bool
	if q.min, ok = quickBound(c.Minimum); !ok {
		return nil
	}
	if q.max, ok = quickBound(c.Maximum); !ok {
		return nil
	}
	if q.exMin, ok = quickBound(c.ExclusiveMinimum); !ok {
		return nil
	}
	if q.exMax, ok = quickBound(c.ExclusiveMaximum); !ok {
		return nil
	}
	if items, present := doc["items"]; present {
		itemsDoc, ok := items.(map[string]any)
		if !ok {
			return nil
		}
		if q.items = newQuickSchema(itemsDoc, c.Items2020, false); q.items == nil {
			return nil
		}
	}
	if c.MinItems != nil {
		q.minItems = *c.MinItems
	}
	if c.MaxItems != nil {
		q.maxItems = *c.MaxItems
	}
	return q
}

// quickBound is an integral limit as an int64; ok is false for a limit
// the quick check does not compare (a fraction, or too large).
func quickBound(r *big.Rat) (*int64, bool) {
	if r == nil {
		return nil, true
	}
	if !r.IsInt() || !r.Num().IsInt64() {
		return nil, false
	}
	n := r.Num().Int64()
	return &n, true
}

// accepts says v certainly satisfies the schema; false means "ask the
// library", not "invalid".
func (q *quickSchema) accepts(v any) bool {
	switch v := v.(type) {
	case nil:
		return q.types&typeNull != 0
	case bool:
		return q.types&typeBoolean != 0
	case string:
		if q.types&typeString == 0 {
			return false
		}
		if q.minLen >= 0 || q.maxLen >= 0 {
			n := utf8.RuneCountInString(v)
			if n < q.minLen || q.maxLen >= 0 && n > q.maxLen {
				return false
			}
		}
		return q.pattern == nil || q.pattern.MatchString(v)
	case json.Number:
		n, ok := integerLiteral(string(v))
		if !ok || q.types&(typeInteger|typeNumber) == 0 {
			return false
		}
		return (q.min == nil || n >= *q.min) && (q.max == nil || n <= *q.max) &&
			(q.exMin == nil || n > *q.exMin) && (q.exMax == nil || n < *q.exMax)
	case map[string]any:
		if q.types&typeObject == 0 {
			return false
		}
		for _, name := range q.required {
			if _, ok := v[name]; !ok {
				return false
			}
		}
		for name, e := range v {
			sub := q.props[name]
			if sub == nil {
				if q.closed {
					return false
				}
				continue
			}
			if !sub.accepts(e) {
				return false
			}
		}
		return true
	case []any:
		if q.types&typeArray == 0 || len(v) < q.minItems || q.maxItems >= 0 && len(v) > q.maxItems {
			return false
		}
		if q.items != nil {
			for _, e := range v {
				if !q.items.accepts(e) {
					return false
				}
			}
		}
		return true
	default:
		return false // float64 and the like: the library decides
	}
}

// integerLiteral parses a JSON number written as a plain integer that fits
// an int64 with room to spare; anything else (fractions, exponents) is not
// vouched for.
func integerLiteral(s string) (int64, bool) {
	if len(s) == 0 || len(s) > 18 {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && !(i == 0 && c == '-') {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}
