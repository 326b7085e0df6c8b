package contracts

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"
)

// Envelope is the one result of every tool call. Its JSON form is the public
// contract of DESIGN.md section 1; field order follows that table.
type Envelope struct {
	Status         Status          `json:"status"`
	Message        string          `json:"message"`
	Data           json.RawMessage `json:"data,omitempty"`
	Retryable      bool            `json:"retryable"`
	SideEffect     SideEffect      `json:"side_effect"`
	SideEffectDone bool            `json:"side_effect_done"`
	Replayed       bool            `json:"replayed"`
	RetryAfterMS   int64           `json:"retry_after_ms,omitempty"`
	Cost           float64         `json:"cost"`
	Tool           string          `json:"tool"`
	CallID         string          `json:"call_id"`
	Observation    string          `json:"observation"`
}

// AppendJSON appends the envelope's compact JSON to dst. It produces the same
// document encoding/json would (Data is copied as is and must be valid JSON),
// without reflection, because it runs once per call.
func (e *Envelope) AppendJSON(dst []byte) []byte {
	dst = append(dst, `{"status":`...)
	dst = AppendJSONString(dst, string(e.Status))
	dst = append(dst, `,"message":`...)
	dst = AppendJSONString(dst, e.Message)
	if len(e.Data) > 0 {
		dst = append(dst, `,"data":`...)
		dst = append(dst, e.Data...)
	}
	dst = append(dst, `,"retryable":`...)
	dst = strconv.AppendBool(dst, e.Retryable)
	dst = append(dst, `,"side_effect":`...)
	dst = AppendJSONString(dst, string(e.SideEffect))
	dst = append(dst, `,"side_effect_done":`...)
	dst = strconv.AppendBool(dst, e.SideEffectDone)
	dst = append(dst, `,"replayed":`...)
	dst = strconv.AppendBool(dst, e.Replayed)
	if e.RetryAfterMS != 0 {
		dst = append(dst, `,"retry_after_ms":`...)
		dst = strconv.AppendInt(dst, e.RetryAfterMS, 10)
	}
	dst = append(dst, `,"cost":`...)
	dst = appendJSONFloat(dst, e.Cost)
	dst = append(dst, `,"tool":`...)
	dst = AppendJSONString(dst, e.Tool)
	dst = append(dst, `,"call_id":`...)
	dst = AppendJSONString(dst, e.CallID)
	dst = append(dst, `,"observation":`...)
	dst = AppendJSONString(dst, e.Observation)
	return append(dst, '}')
}

// MarshalJSON implements json.Marshaler with AppendJSON.
func (e *Envelope) MarshalJSON() ([]byte, error) {
	if len(e.Data) > 0 && !json.Valid(e.Data) {
		return nil, errors.New("envelope data is not valid JSON")
	}
	return e.AppendJSON(nil), nil
}

// ErrInvalidEnvelope is wrapped by DecodeEnvelope for documents that are not a
// well-formed envelope.
var ErrInvalidEnvelope = errors.New("invalid envelope")

// DecodeEnvelope parses an envelope strictly: unknown fields, a status or
// side effect outside the closed sets, or trailing data are errors. Stored
// idempotency records go through it, so a damaged record is never mistaken
// for a result.
func DecodeEnvelope(b []byte) (*Envelope, error) {
	if !utf8.Valid(b) {
		// encoding/json would pass invalid UTF-8 through in Data.
		return nil, fmt.Errorf("%w: not valid UTF-8", ErrInvalidEnvelope)
	}
	e, err := decodeEnvelopeFields(b)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidEnvelope, err)
	}
	if _, ok := ParseStatus(string(e.Status)); !ok {
		return nil, fmt.Errorf("%w: status %q", ErrInvalidEnvelope, e.Status)
	}
	if _, ok := ParseSideEffect(string(e.SideEffect)); !ok {
		return nil, fmt.Errorf("%w: side_effect %q", ErrInvalidEnvelope, e.SideEffect)
	}
	if e.SideEffectDone != (e.SideEffect == SideEffectDone) {
		return nil, fmt.Errorf("%w: side_effect_done disagrees with side_effect", ErrInvalidEnvelope)
	}
	if len(e.Data) > 0 && string(e.Data) == "null" {
		e.Data = nil
	}
	return e, nil
}

// decodeEnvelopeFields reads an envelope's fields from one JSON object
// through the tape parser: a replay decodes a stored record on every call,
// and encoding/json's reflection was half of its cost. It accepts what
// encoding/json with DisallowUnknownFields accepts for the envelope's
// field types (a null leaves a field as it is; the last of repeated keys
// counts), except that keys must be spelled exactly.
func decodeEnvelopeFields(b []byte) (*Envelope, error) {
	doc, err := parseJSONDoc(b)
	if err != nil {
		return nil, err
	}
	root := &doc.nodes[0]
	if root.kind != jsonObject {
		return nil, errors.New("not a JSON object")
	}
	e := &Envelope{}
	k := int32(1)
	for range root.count {
		v := k + 1
		name := doc.str(k)
		var err error
		switch name {
		case "status":
			err = doc.readString(v, (*string)(&e.Status))
		case "message":
			err = doc.readString(v, &e.Message)
		case "data":
			e.Data = bytes.Clone(doc.raw(v))
		case "retryable":
			err = doc.readBool(v, &e.Retryable)
		case "side_effect":
			err = doc.readString(v, (*string)(&e.SideEffect))
		case "side_effect_done":
			err = doc.readBool(v, &e.SideEffectDone)
		case "replayed":
			err = doc.readBool(v, &e.Replayed)
		case "retry_after_ms":
			err = doc.readInt(v, &e.RetryAfterMS)
		case "cost":
			err = doc.readFloat(v, &e.Cost)
		case "tool":
			err = doc.readString(v, &e.Tool)
		case "call_id":
			err = doc.readString(v, &e.CallID)
		case "observation":
			err = doc.readString(v, &e.Observation)
		default:
			return nil, fmt.Errorf("unknown field %q", name)
		}
		if err != nil {
			return nil, fmt.Errorf("field %q: %v", name, err)
		}
		k = doc.nodes[v].next
	}
	return e, nil
}

// AppendJSONString appends s as a JSON string. Invalid UTF-8 becomes U+FFFD,
// so the output is always valid JSON and valid UTF-8.
func AppendJSONString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		// Runs of bytes that need nothing are copied in one append.
		for i < len(s) && jsonPlain[s[i]] {
			i++
		}
		if i == len(s) {
			break
		}
		c := s[i]
		if c < utf8.RuneSelf {
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			start = i + size
		case r == '\u2028' || r == '\u2029':
			// Valid JSON, but they break JavaScript embedding;
			// encoding/json escapes them too.
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&0xf])
			start = i + size
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// jsonPlain marks the ASCII bytes a JSON string holds as they are.
var jsonPlain = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// appendJSONFloat formats f the way encoding/json does.
func appendJSONFloat(dst []byte, f float64) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return append(dst, '0')
	}
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	dst = strconv.AppendFloat(dst, f, format, -1, 64)
	if format == 'e' {
		// Clean up e-09 to e-9, as encoding/json does.
		n := len(dst)
		if n >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
	}
	return dst
}
