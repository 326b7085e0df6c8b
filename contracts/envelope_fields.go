package contracts

import (
	"encoding/json"
	"errors"
	"math"
	"strconv"

	"github.com/toolgate/toolgate/internal/jsontape"
)

// The envelope's fields are listed once, here: the encoder (AppendJSON),
// the decoder (DecodeEnvelope) and the published JSON Schema
// (EnvelopeSchema) walk envelopeFields, and a test pins the Envelope
// struct's json tags to it. A field added to the envelope is added here,
// with its case in appendValue and readValue.

// envelopeField is one field of the envelope's JSON form.
type envelopeField struct {
	name        string   // the JSON key, plain ASCII
	typ         string   // JSON Schema type; "" for data, which may be any JSON value
	enum        []string // the closed set of a string field, when it has one
	nonNegative bool     // a number never below zero
	optional    bool     // left out when empty (omitempty); every other field is always present
	description string   // for the model, as the schema publishes it
}

// The fields, in the order of DESIGN.md section 1 (indices of envelopeFields).
const (
	fieldStatus = iota
	fieldMessage
	fieldData
	fieldRetryable
	fieldSideEffect
	fieldSideEffectDone
	fieldReplayed
	fieldRetryAfterMS
	fieldCost
	fieldTool
	fieldCallID
	fieldObservation
	fieldCount
)

var envelopeFields = [fieldCount]envelopeField{
	fieldStatus: {name: "status", typ: "string", enum: statusNames(),
		description: "What happened; ok and empty are successes."},
	fieldMessage: {name: "message", typ: "string",
		description: "One sentence for the model: what happened and what to do next."},
	fieldData: {name: "data", optional: true,
		description: "The useful payload, shaped by the tool's contract; absent when there is none."},
	fieldRetryable: {name: "retryable", typ: "boolean",
		description: "Re-sending the identical call (same arguments, same idempotency key) later may succeed."},
	fieldSideEffect: {name: "side_effect", typ: "string", enum: []string{string(SideEffectNone), string(SideEffectDone), string(SideEffectUnknown)},
		description: "Whether the call changed anything: none, done, or unknown when the outcome was lost."},
	fieldSideEffectDone: {name: "side_effect_done", typ: "boolean",
		description: "side_effect is done."},
	fieldReplayed: {name: "replayed", typ: "boolean",
		description: "A stored result for a repeated idempotency key; the backend was not called again."},
	fieldRetryAfterMS: {name: "retry_after_ms", typ: "integer", nonNegative: true, optional: true,
		description: "When a retry makes sense, in milliseconds."},
	fieldCost: {name: "cost", typ: "number", nonNegative: true,
		description: "Cost units this call consumed."},
	fieldTool: {name: "tool", typ: "string",
		description: "The tool's name as called."},
	fieldCallID: {name: "call_id", typ: "string",
		description: "The call's id, for support and logs."},
	fieldObservation: {name: "observation", typ: "string",
		description: "The text to feed back to the model."},
}

func statusNames() []string {
	var out []string
	for _, s := range Statuses() {
		out = append(out, string(s))
	}
	return out
}

// envelopeFieldNamed returns the index of the field whose key is k, or -1.
func envelopeFieldNamed(k jsontape.Value) int {
	for i := range envelopeFields {
		if k.Equals(envelopeFields[i].name) {
			return i
		}
	}
	return -1
}

// omits reports whether AppendJSON leaves an optional field out.
func (e *Envelope) omits(field int) bool {
	switch field {
	case fieldData:
		return len(e.Data) == 0
	case fieldRetryAfterMS:
		return e.RetryAfterMS == 0
	}
	return false
}

// appendValue appends a field's value as JSON.
func (e *Envelope) appendValue(dst []byte, field int) []byte {
	switch field {
	case fieldStatus:
		return jsontape.AppendString(dst, string(e.Status))
	case fieldMessage:
		return jsontape.AppendString(dst, e.Message)
	case fieldData:
		return append(dst, e.Data...)
	case fieldRetryable:
		return strconv.AppendBool(dst, e.Retryable)
	case fieldSideEffect:
		return jsontape.AppendString(dst, string(e.SideEffect))
	case fieldSideEffectDone:
		return strconv.AppendBool(dst, e.SideEffectDone)
	case fieldReplayed:
		return strconv.AppendBool(dst, e.Replayed)
	case fieldRetryAfterMS:
		return strconv.AppendInt(dst, e.RetryAfterMS, 10)
	case fieldCost:
		if math.IsNaN(e.Cost) || math.IsInf(e.Cost, 0) {
			return append(dst, '0')
		}
		return jsontape.AppendFloat(dst, e.Cost, 64)
	case fieldTool:
		return jsontape.AppendString(dst, e.Tool)
	case fieldCallID:
		return jsontape.AppendString(dst, e.CallID)
	default:
		return jsontape.AppendString(dst, e.Observation)
	}
}

// readValue sets a field from v as encoding/json sets a struct field of
// its type: a null leaves it as it is, and a value of another type is an
// error.
func (e *Envelope) readValue(field int, v jsontape.Value) error {
	switch field {
	case fieldStatus:
		return readString(v, (*string)(&e.Status))
	case fieldMessage:
		return readString(v, &e.Message)
	case fieldData:
		e.Data = v.AppendRaw(nil)
		return nil
	case fieldRetryable:
		return readBool(v, &e.Retryable)
	case fieldSideEffect:
		return readString(v, (*string)(&e.SideEffect))
	case fieldSideEffectDone:
		return readBool(v, &e.SideEffectDone)
	case fieldReplayed:
		return readBool(v, &e.Replayed)
	case fieldRetryAfterMS:
		return readInt(v, &e.RetryAfterMS)
	case fieldCost:
		return readFloat(v, &e.Cost)
	case fieldTool:
		return readString(v, &e.Tool)
	case fieldCallID:
		return readString(v, &e.CallID)
	default:
		return readString(v, &e.Observation)
	}
}

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

// EnvelopeSchema returns the JSON Schema of the envelope's JSON form, made
// from the same field list as the encoder: every field, required exactly
// when it is never left out, no other fields, and the closed sets of status
// and side_effect. MCP publishes it as every tool's outputSchema. It names
// no $schema: MCP schemas default to 2020-12, and the keywords used mean
// the same in draft-07, which some clients' validators assume.
func EnvelopeSchema() json.RawMessage {
	b := []byte(`{"title":"toolgate result envelope","type":"object","required":[`)
	n := 0
	for _, f := range envelopeFields {
		if f.optional {
			continue
		}
		if n > 0 {
			b = append(b, ',')
		}
		n++
		b = jsontape.AppendString(b, f.name)
	}
	b = append(b, `],"additionalProperties":false,"properties":{`...)
	for i, f := range envelopeFields {
		if i > 0 {
			b = append(b, ',')
		}
		b = jsontape.AppendString(b, f.name)
		b = append(b, ":{"...)
		if f.typ != "" {
			b = append(b, `"type":`...)
			b = jsontape.AppendString(b, f.typ)
			b = append(b, ',')
		}
		if f.enum != nil {
			b = append(b, `"enum":[`...)
			for j, v := range f.enum {
				if j > 0 {
					b = append(b, ',')
				}
				b = jsontape.AppendString(b, v)
			}
			b = append(b, "],"...)
		}
		if f.nonNegative {
			b = append(b, `"minimum":0,`...)
		}
		b = append(b, `"description":`...)
		b = jsontape.AppendString(b, f.description)
		b = append(b, '}')
	}
	return append(b, "}}"...)
}
