package contracts

import (
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/toolgate/toolgate/internal/jsontape"
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
	dst, _ = e.appendJSON(dst, true)
	return dst
}

// AppendJSONAround appends the envelope's compact JSON to dst as AppendJSON
// does, all but the bytes of Data: those belong at index at of the result.
// A writer that sends out[:at], Data and out[at:] sends AppendJSON's bytes
// without copying a large answer's data once more.
func (e *Envelope) AppendJSONAround(dst []byte) (out []byte, at int) {
	return e.appendJSON(dst, false)
}

// appendJSON is AppendJSON, with Data's bytes left out unless withData;
// at is where they go.
func (e *Envelope) appendJSON(dst []byte, withData bool) ([]byte, int) {
	sep, at := byte('{'), -1
	for i := range envelopeFields {
		if envelopeFields[i].optional && e.omits(i) {
			continue
		}
		dst = append(dst, sep, '"')
		dst = append(dst, envelopeFields[i].name...)
		dst = append(dst, '"', ':')
		if i == fieldData && !withData {
			at = len(dst)
		} else {
			dst = e.appendValue(dst, i)
		}
		sep = ','
	}
	dst = append(dst, '}')
	if at < 0 {
		at = len(dst) // no data: nothing goes anywhere
	}
	return dst, at
}

// MarshalJSON implements json.Marshaler with AppendJSON.
func (e *Envelope) MarshalJSON() ([]byte, error) {
	if len(e.Data) > 0 && !json.Valid(e.Data) {
		return nil, errors.New("envelope data is not valid JSON")
	}
	return e.AppendJSON(nil), nil
}

// errInvalidEnvelope is wrapped by DecodeEnvelope for documents that are not a
// well-formed envelope.
var errInvalidEnvelope = errors.New("invalid envelope")

// DecodeEnvelope parses an envelope strictly: unknown fields, a status or
// side effect outside the closed sets, or trailing data are errors. Stored
// idempotency records go through it, so a damaged record is never mistaken
// for a result.
func DecodeEnvelope(b []byte) (*Envelope, error) {
	if !utf8.Valid(b) {
		// encoding/json would pass invalid UTF-8 through in Data.
		return nil, fmt.Errorf("%w: not valid UTF-8", errInvalidEnvelope)
	}
	e, err := decodeEnvelopeFields(b)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errInvalidEnvelope, err)
	}
	if _, ok := parseStatus(string(e.Status)); !ok {
		return nil, fmt.Errorf("%w: status %q", errInvalidEnvelope, e.Status)
	}
	if _, ok := ParseSideEffect(string(e.SideEffect)); !ok {
		return nil, fmt.Errorf("%w: side_effect %q", errInvalidEnvelope, e.SideEffect)
	}
	if e.SideEffectDone != (e.SideEffect == SideEffectDone) {
		return nil, fmt.Errorf("%w: side_effect_done disagrees with side_effect", errInvalidEnvelope)
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
	tape, root, err := jsontape.ParseObject(b)
	if err != nil {
		return nil, err
	}
	defer tape.Release()
	e := &Envelope{}
	for c := root.Cursor(); c.More(); {
		k, v := c.Member()
		field := envelopeFieldNamed(k)
		if field < 0 {
			return nil, fmt.Errorf("unknown field %q", k.Text())
		}
		if err := e.readValue(field, v); err != nil {
			return nil, fmt.Errorf("field %q: %v", envelopeFields[field].name, err)
		}
	}
	return e, nil
}

// AppendJSONString appends s as a JSON string, as jsontape.AppendString
// does: invalid UTF-8 becomes U+FFFD, so the output is always valid JSON
// and valid UTF-8.
func AppendJSONString(dst []byte, s string) []byte { return jsontape.AppendString(dst, s) }
