package contracts

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
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
	dst = append(dst, `{"status":`...)
	dst = jsontape.AppendString(dst, string(e.Status))
	dst = append(dst, `,"message":`...)
	dst = jsontape.AppendString(dst, e.Message)
	if len(e.Data) > 0 {
		dst = append(dst, `,"data":`...)
		dst = append(dst, e.Data...)
	}
	dst = append(dst, `,"retryable":`...)
	dst = strconv.AppendBool(dst, e.Retryable)
	dst = append(dst, `,"side_effect":`...)
	dst = jsontape.AppendString(dst, string(e.SideEffect))
	dst = append(dst, `,"side_effect_done":`...)
	dst = strconv.AppendBool(dst, e.SideEffectDone)
	dst = append(dst, `,"replayed":`...)
	dst = strconv.AppendBool(dst, e.Replayed)
	if e.RetryAfterMS != 0 {
		dst = append(dst, `,"retry_after_ms":`...)
		dst = strconv.AppendInt(dst, e.RetryAfterMS, 10)
	}
	dst = append(dst, `,"cost":`...)
	if math.IsNaN(e.Cost) || math.IsInf(e.Cost, 0) {
		dst = append(dst, '0')
	} else {
		dst = jsontape.AppendFloat(dst, e.Cost, 64)
	}
	dst = append(dst, `,"tool":`...)
	dst = jsontape.AppendString(dst, e.Tool)
	dst = append(dst, `,"call_id":`...)
	dst = jsontape.AppendString(dst, e.CallID)
	dst = append(dst, `,"observation":`...)
	dst = jsontape.AppendString(dst, e.Observation)
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
	tape, err := jsontape.Parse(b)
	if err != nil {
		return nil, err
	}
	defer tape.Release()
	root := tape.Root()
	if root.Kind() != jsontape.Object {
		return nil, errors.New("not a JSON object")
	}
	e := &Envelope{}
	for k, v := range root.Members() {
		name := k.Text()
		var err error
		switch name {
		case "status":
			err = readString(v, (*string)(&e.Status))
		case "message":
			err = readString(v, &e.Message)
		case "data":
			e.Data = v.AppendRaw(nil)
		case "retryable":
			err = readBool(v, &e.Retryable)
		case "side_effect":
			err = readString(v, (*string)(&e.SideEffect))
		case "side_effect_done":
			err = readBool(v, &e.SideEffectDone)
		case "replayed":
			err = readBool(v, &e.Replayed)
		case "retry_after_ms":
			err = readInt(v, &e.RetryAfterMS)
		case "cost":
			err = readFloat(v, &e.Cost)
		case "tool":
			err = readString(v, &e.Tool)
		case "call_id":
			err = readString(v, &e.CallID)
		case "observation":
			err = readString(v, &e.Observation)
		default:
			return nil, fmt.Errorf("unknown field %q", name)
		}
		if err != nil {
			return nil, fmt.Errorf("field %q: %v", name, err)
		}
	}
	return e, nil
}

// readString, readBool, readInt and readFloat set *dst from v as
// encoding/json sets a field of that type: a null leaves it as it is, and
// a value of another type is an error.
func readString(v jsontape.Value, dst *string) error {
	switch v.Kind() {
	case jsontape.Null:
	case jsontape.String:
		*dst = v.Text()
	default:
		return errors.New("not a string")
	}
	return nil
}

func readBool(v jsontape.Value, dst *bool) error {
	switch k := v.Kind(); k {
	case jsontape.Null:
	case jsontape.True, jsontape.False:
		*dst = k == jsontape.True
	default:
		return errors.New("not a boolean")
	}
	return nil
}

func readInt(v jsontape.Value, dst *int64) error {
	switch v.Kind() {
	case jsontape.Null:
		return nil
	case jsontape.Number:
		n, err := strconv.ParseInt(v.Literal(), 10, 64)
		if err == nil {
			*dst = n
		}
		return err
	}
	return errors.New("not a number")
}

func readFloat(v jsontape.Value, dst *float64) error {
	switch v.Kind() {
	case jsontape.Null:
		return nil
	case jsontape.Number:
		f, err := v.Float()
		if err == nil {
			*dst = f
		}
		return err
	}
	return errors.New("not a number")
}

// AppendJSONString appends s as a JSON string, as jsontape.AppendString
// does: invalid UTF-8 becomes U+FFFD, so the output is always valid JSON
// and valid UTF-8.
func AppendJSONString(dst []byte, s string) []byte { return jsontape.AppendString(dst, s) }
