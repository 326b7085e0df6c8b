package contracts

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// This file holds what a contract reads of a backend's answer besides its
// rules (rules.go): the answer as text, the backend's own words for a
// failure (response.error_detail), and the schema its 2xx JSON answers
// promise (response.schema).

// AnswerText is an answer's body as the rules' `text` sees it: its bytes
// as a string, invalid UTF-8 replaced by U+FFFD, whatever its content type.
func AnswerText(body []byte) string {
	return strings.ToValidUTF8(string(body), "\ufffd")
}

// MaxErrorDetailChars bounds the backend's words a message repeats, in
// code points: enough for an error sentence, little of the message's room.
const MaxErrorDetailChars = 200

// OneLineDetail makes an error detail safe to put in a message: one line
// (control characters, line breaks and other white space runs become one
// space), trimmed, valid UTF-8, at most MaxErrorDetailChars code points
// (a longer one is cut and marked "…").
func OneLineDetail(s string) string {
	b := make([]byte, 0, min(len(s), MaxErrorDetailChars*utf8.UTFMax))
	n, gap := 0, false
	for _, r := range s { // an invalid byte reads as U+FFFD
		if unicode.IsControl(r) || unicode.IsSpace(r) {
			gap = n > 0
			continue
		}
		if gap {
			b, n, gap = append(b, ' '), n+1, false
		}
		b, n = utf8.AppendRune(b, r), n+1
		if n > MaxErrorDetailChars {
			// Past the bound: cut, and mark the cut (shorten).
			cut := strings.TrimSuffix(shorten(string(b), MaxErrorDetailChars), "…")
			return strings.TrimRight(cut, " ") + "…"
		}
	}
	return string(b)
}

// responseSchema is the compiled response.schema.
type responseSchema struct {
	compiled *jsonschema.Schema
}

// compileResponseSchema compiles response.schema: a JSON Schema 2020-12
// mapping. The error is a *ruleError whose Field is "schema", with the
// faulty keyword's path after it.
func compileResponseSchema(doc any) (*responseSchema, error) {
	obj, ok := doc.(map[string]any)
	if !ok {
		return nil, &ruleError{Field: "schema", Msg: "must be a mapping (a JSON Schema of the answer)"}
	}
	compiled, err := compileDocument("urn:toolgate:response", "response schema", obj)
	if err != nil {
		field := "schema"
		var se *schemaError
		if errors.As(err, &se) && len(se.Location) > 0 {
			field += "." + strings.Join(se.Location, ".")
		}
		return nil, &ruleError{Field: field, Msg: err.Error()}
	}
	return &responseSchema{compiled: compiled}, nil
}

// SchemaViolation is a 2xx JSON answer that response.schema does not
// accept: where in the answer (a JSON pointer) and which keyword refused
// it. It names no value of the answer.
type SchemaViolation struct {
	Location string // "/items/0/id"; "" for the whole answer
	Keyword  string // "type", "required", "properties/id/type" where the library says no more
}

func (v *SchemaViolation) Error() string {
	return fmt.Sprintf("response.schema: at %q: keyword %s", v.Location, v.Keyword)
}

// HasSchema reports whether the rules carry a response schema.
func (r *Rules) HasSchema() bool { return r != nil && r.schema != nil }

// CheckSchema validates a 2xx JSON answer against response.schema. It
// returns nil when there is no schema, no body, or the answer conforms.
// The body must not have been released.
func (r *Rules) CheckSchema(b *Body) *SchemaViolation {
	if r == nil || r.schema == nil || b == nil {
		return nil
	}
	err := r.schema.compiled.Validate(b.tape.Root().Native())
	if err == nil {
		return nil
	}
	var verr *jsonschema.ValidationError
	if !errors.As(err, &verr) {
		return &SchemaViolation{Keyword: "unknown"}
	}
	leaf := verr
	for len(leaf.Causes) > 0 {
		leaf = firstCause(leaf.Causes)
	}
	kw := "unknown"
	if leaf.ErrorKind != nil {
		if path := leaf.ErrorKind.KeywordPath(); len(path) > 0 {
			kw = strings.Join(path, "/")
		}
	}
	return &SchemaViolation{Location: pointer(leaf.InstanceLocation), Keyword: kw}
}

// firstCause picks the deepest cause, and of those the first by location,
// so the same answer always names the same violation (the library visits
// an object's members in map order).
func firstCause(causes []*jsonschema.ValidationError) *jsonschema.ValidationError {
	return slices.MinFunc(causes, func(a, b *jsonschema.ValidationError) int {
		if d := len(b.InstanceLocation) - len(a.InstanceLocation); d != 0 {
			return d
		}
		return strings.Compare(pointer(a.InstanceLocation), pointer(b.InstanceLocation))
	})
}
