package jsontape

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
)

// AppendCanonical appends v in one canonical form, so equal documents give
// equal bytes whatever order their keys arrived in: object keys sorted by
// their UTF-8 bytes, arrays in order, no insignificant white space, no HTML
// escaping, json.Number kept verbatim (so 1 and 1.0 differ, as they do on
// the wire), strings as AppendString writes them. The idempotency
// fingerprint hashes it.
//
// v is meant to be decoded with json.Decoder.UseNumber, which yields
// map[string]any, []any, string, json.Number, bool and nil. Go integers and
// floats are accepted too (floats as AppendFloat writes them; NaN and the
// infinities are errors), json.RawMessage is decoded as arguments are, and
// any other value goes through json.Marshal first. It is not RFC 8785
// (JCS): numbers are not normalised.
func AppendCanonical(dst []byte, v any) ([]byte, error) {
	return appendCanonical(dst, v, nil)
}

// NumberFunc spells a number of a document AppendCanonicalNumbers writes: a
// json.Number or a Go integer or float. ok false leaves it to
// AppendCanonical's spelling.
type NumberFunc func(dst []byte, n any) (out []byte, ok bool, err error)

// AppendCanonicalNumbers is AppendCanonical with the numbers spelled by num
// (for example integral values as plain digits, as a backend reading an
// integer parameter wants them).
func AppendCanonicalNumbers(dst []byte, v any, num NumberFunc) ([]byte, error) {
	return appendCanonical(dst, v, num)
}

func appendCanonical(dst []byte, v any, num NumberFunc) ([]byte, error) {
	if num != nil {
		switch v.(type) {
		case json.Number, int, int64, int32, uint64, uint, float64, float32:
			if out, ok, err := num(dst, v); ok || err != nil {
				return out, err
			}
		}
	}
	switch v := v.(type) {
	case nil:
		return append(dst, "null"...), nil
	case bool:
		return strconv.AppendBool(dst, v), nil
	case string:
		return AppendString(dst, v), nil
	case json.Number:
		if !IsNumber(string(v)) {
			return dst, fmt.Errorf("canonical json: invalid number %q", string(v))
		}
		return append(dst, v...), nil
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		dst = append(dst, '{')
		for i, k := range keys {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = AppendString(dst, k)
			dst = append(dst, ':')
			var err error
			if dst, err = appendCanonical(dst, v[k], num); err != nil {
				return dst, err
			}
		}
		return append(dst, '}'), nil
	case []any:
		dst = append(dst, '[')
		for i, e := range v {
			if i > 0 {
				dst = append(dst, ',')
			}
			var err error
			if dst, err = appendCanonical(dst, e, num); err != nil {
				return dst, err
			}
		}
		return append(dst, ']'), nil
	case int:
		return strconv.AppendInt(dst, int64(v), 10), nil
	case int64:
		return strconv.AppendInt(dst, v, 10), nil
	case int32:
		return strconv.AppendInt(dst, int64(v), 10), nil
	case uint64:
		return strconv.AppendUint(dst, v, 10), nil
	case uint:
		return strconv.AppendUint(dst, uint64(v), 10), nil
	case float64:
		return appendFiniteFloat(dst, v, 64)
	case float32:
		return appendFiniteFloat(dst, float64(v), 32)
	case json.RawMessage:
		return appendCanonicalRaw(dst, v)
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return dst, fmt.Errorf("canonical json: %w", err)
	}
	return appendCanonicalRaw(dst, raw)
}

// appendFiniteFloat writes f as encoding/json does, so a float argument
// and the same value decoded from JSON text by encoding/json agree.
func appendFiniteFloat(dst []byte, f float64, bits int) ([]byte, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return dst, fmt.Errorf("canonical json: unsupported number %v", f)
	}
	return AppendFloat(dst, f, bits), nil
}

// appendCanonicalRaw decodes JSON text the way arguments are decoded and
// appends its canonical form.
func appendCanonicalRaw(dst, raw []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return dst, fmt.Errorf("canonical json: %w", err)
	}
	if dec.More() {
		return dst, errors.New("canonical json: trailing data after value")
	}
	return AppendCanonical(dst, v)
}
