package contracts

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

// stdEnvelope mirrors Envelope without the custom marshaller, so the test
// can compare AppendJSON with encoding/json.
type stdEnvelope struct {
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

func TestAppendJSONMatchesEncodingJSON(t *testing.T) {
	envs := []Envelope{
		{Status: StatusOK, Message: "命中 3 条。", Data: json.RawMessage(`{"items":[1,2],"total":3}`), SideEffect: SideEffectNone, Cost: 0.001, Tool: "search_articles", CallID: "01J", Observation: "[OK] x\n{}"},
		{Status: StatusUpstream, Message: "quote \" backslash \\ tab \t nl \n ctrl \x01 \u2028 <html>", Retryable: true, SideEffect: SideEffectUnknown, RetryAfterMS: 1500, Cost: 1e-7, Tool: "t"},
		{Status: StatusBadArgs, Message: "big cost", Cost: 1e21, SideEffect: SideEffectNone},
		{Status: StatusOK, SideEffect: SideEffectDone, SideEffectDone: true, Replayed: true, Cost: 12.5},
	}
	for i, e := range envs {
		got := e.AppendJSON(nil)
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(stdEnvelope(e)); err != nil {
			t.Fatal(err)
		}
		if string(got) != strings.TrimSuffix(want.String(), "\n") {
			t.Errorf("envelope %d:\n got %s\nwant %s", i, got, want.String())
		}
		back, err := DecodeEnvelope(got)
		if err != nil {
			t.Fatalf("envelope %d does not decode: %v", i, err)
		}
		if back.Message != e.Message || back.Status != e.Status || back.Cost != e.Cost {
			t.Errorf("envelope %d round trip: %+v", i, back)
		}
	}
}

func TestDecodeEnvelopeIsStrict(t *testing.T) {
	valid := `{"status":"ok","message":"m","retryable":false,"side_effect":"done","side_effect_done":true,"replayed":false,"cost":0,"tool":"t","call_id":"c","observation":"[OK] m"}`
	if _, err := DecodeEnvelope([]byte(valid)); err != nil {
		t.Fatalf("valid envelope refused: %v", err)
	}
	for name, doc := range map[string]string{
		"unknown field":       strings.Replace(valid, `"tool"`, `"extra":1,"tool"`, 1),
		"status outside set":  strings.Replace(valid, `"ok"`, `"fine"`, 1),
		"side effect invalid": strings.Replace(valid, `"done"`, `"maybe"`, 1),
		"done flag disagrees": strings.Replace(valid, `"side_effect_done":true`, `"side_effect_done":false`, 1),
		"trailing data":       valid + `{}`,
		"not json":            `garbage`,
		"empty":               ``,
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := DecodeEnvelope([]byte(doc)); err == nil {
				t.Fatal("decoded")
			}
		})
	}
}

// FuzzDecodeEnvelope: stored idempotency records go through DecodeEnvelope;
// whatever is stored, decoding never panics, and what decodes re-encodes to
// a document that decodes the same.
func FuzzDecodeEnvelope(f *testing.F) {
	f.Add([]byte(`{"status":"ok","message":"m","data":{"a":[1,2]},"retryable":false,"side_effect":"done","side_effect_done":true,"replayed":false,"cost":0.5,"tool":"t","call_id":"c","observation":"[OK] m"}`))
	f.Add([]byte(`{"status":"upstream","message":"\u2028","retryable":true,"side_effect":"unknown","side_effect_done":false,"replayed":true,"retry_after_ms":5,"cost":0,"tool":"","call_id":"","observation":""}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := DecodeEnvelope(b)
		if err != nil {
			return
		}
		again, err := DecodeEnvelope(e.AppendJSON(nil))
		if err != nil {
			t.Fatalf("re-encoded envelope does not decode: %v", err)
		}
		if again.Status != e.Status || again.SideEffect != e.SideEffect || again.Replayed != e.Replayed || again.RetryAfterMS != e.RetryAfterMS {
			t.Fatalf("round trip changed the envelope: %+v vs %+v", e, again)
		}
	})
}

// decodeEnvelopeStd is the encoding/json decoding DecodeEnvelope replaced,
// kept as the reference it must agree with.
func decodeEnvelopeStd(b []byte) (*Envelope, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var e Envelope
	if err := dec.Decode(&e); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("trailing data")
	}
	return &e, nil
}

// envelopeFieldNames are the envelope's JSON keys as spelled.
var envelopeFieldNames = map[string]bool{
	"status": true, "message": true, "data": true, "retryable": true, "side_effect": true,
	"side_effect_done": true, "replayed": true, "retry_after_ms": true, "cost": true,
	"tool": true, "call_id": true, "observation": true,
}

// FuzzDecodeEnvelopeMatchesEncodingJSON: the tape decoder reads every field
// as encoding/json does, and refuses only what it refuses, or keys that
// differ from the field names in case (encoding/json folds case).
func FuzzDecodeEnvelopeMatchesEncodingJSON(f *testing.F) {
	f.Add([]byte(`{"status":"ok","message":"m \"q\" \u00e9 \ud83d\ude00 \ud800","data":{"a":[1,2]},"retryable":false,"side_effect":"done","side_effect_done":true,"replayed":false,"cost":0.5,"tool":"t","call_id":"c","observation":"[OK] m\n{\"a\":1}"}`))
	f.Add([]byte(`{"status":"ok","message":null,"data":null,"retry_after_ms":-0,"cost":1e3,"Status":"ok","status":"empty"}`))
	f.Add([]byte(`{"retry_after_ms":1.0}`))
	f.Add([]byte(`{"cost":1e400}`))
	f.Add([]byte(` {"tool":"a"} `))
	f.Fuzz(func(t *testing.T, b []byte) {
		if !utf8.Valid(b) {
			return
		}
		got, err := decodeEnvelopeFields(b)
		want, wantErr := decodeEnvelopeStd(b)
		if err == nil {
			if wantErr != nil {
				t.Fatalf("tape decoder accepted what encoding/json refuses (%v): %s", wantErr, b)
			}
			if !bytes.Equal(got.Data, want.Data) || got.Message != want.Message || got.Observation != want.Observation ||
				got.Status != want.Status || got.SideEffect != want.SideEffect || got.Retryable != want.Retryable ||
				got.SideEffectDone != want.SideEffectDone || got.Replayed != want.Replayed || got.RetryAfterMS != want.RetryAfterMS ||
				got.Cost != want.Cost || got.Tool != want.Tool || got.CallID != want.CallID {
				t.Fatalf("decoders disagree on %s:\n tape %+v\n json %+v", b, got, want)
			}
			return
		}
		if wantErr != nil {
			return
		}
		var keys map[string]json.RawMessage
		if json.Unmarshal(b, &keys) != nil || keys == nil {
			return // not an object: encoding/json takes null as "no change"
		}
		for k := range keys {
			if !envelopeFieldNames[k] {
				return // a case variant encoding/json folds
			}
		}
		t.Fatalf("tape decoder refused (%v) what encoding/json accepts: %s", err, b)
	})
}
