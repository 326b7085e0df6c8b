package contracts

import (
	"encoding/json"
	"errors"
	"strconv"
	"unicode/utf8"

	"github.com/toolgate/toolgate/internal/jsontape"
)

// MaxArgsDepth bounds nesting in arguments, wherever they are read. Tool
// arguments are shallow; a deep document is an attack on the parser, not a
// call.
const MaxArgsDepth = 32

// DecodeArgs decodes a JSON object of call arguments strictly: numbers stay
// json.Number (no precision is lost before the schema sees them; reading
// one costs its length, and Schema.Validate refuses those beyond the
// argument bounds of numbers.go before anything computes with them), duplicate
// keys are refused (two readers could disagree on which one counts), as are
// invalid UTF-8, nesting deeper than maxDepth, and anything after the
// object. The error is an *ArgError naming the problem.
func DecodeArgs(src []byte, maxDepth int) (map[string]any, error) {
	if !utf8.Valid(src) {
		return nil, &ArgError{Problem: ProblemNotUTF8}
	}
	// The tape lives only while the arguments are copied out of it.
	tape, root, err := jsontape.ParseObject(src)
	switch {
	case errors.Is(err, jsontape.ErrNotObject):
		return nil, &ArgError{Problem: ProblemNotObject}
	case err != nil:
		return nil, &ArgError{Problem: ProblemNotJSON}
	}
	defer tape.Release()
	v, err := decodeArg(root, 0, maxDepth)
	if err != nil {
		return nil, err
	}
	return v.(map[string]any), nil
}

// decodeArg copies one value of the arguments out of the tape.
func decodeArg(v jsontape.Value, depth, maxDepth int) (any, error) {
	switch v.Kind() {
	case jsontape.Null:
		return nil, nil
	case jsontape.False:
		return false, nil
	case jsontape.True:
		return true, nil
	case jsontape.Number:
		return json.Number(v.Literal()), nil
	case jsontape.String:
		return v.Text(), nil
	}
	if depth >= maxDepth {
		return nil, &ArgError{Problem: ProblemTooDeep, Max: strconv.Itoa(maxDepth)}
	}
	if v.Kind() == jsontape.Array {
		out := make([]any, 0, v.Len())
		for c := v.Cursor(); c.More(); {
			ev, err := decodeArg(c.Element(), depth+1, maxDepth)
			if err != nil {
				return nil, err
			}
			out = append(out, ev)
		}
		return out, nil
	}
	out := make(map[string]any, v.Len())
	for c := v.Cursor(); c.More(); {
		k, e := c.Member()
		key := k.Text()
		if _, dup := out[key]; dup {
			if len(key) > 40 {
				key = key[:40]
			}
			return nil, &ArgError{Problem: ProblemDuplicateKey, Got: quoteShort(key)}
		}
		ev, err := decodeArg(e, depth+1, maxDepth)
		if err != nil {
			return nil, err
		}
		out[key] = ev
	}
	return out, nil
}
