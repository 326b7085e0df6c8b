package contracts

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/toolgate/toolgate/internal/jsontape"
)

// stdEnvelope is Envelope without its methods, so encoding/json writes it
// from the struct tags: the reference AppendJSON must agree with.
type stdEnvelope Envelope

// TestEnvelopeFieldsMatchTheStruct pins the one field list the encoder,
// the decoder and the schema walk to the Envelope struct: the same keys in
// the same order, optional exactly when the tag says omitempty.
func TestEnvelopeFieldsMatchTheStruct(t *testing.T) {
	typ := reflect.TypeFor[Envelope]()
	if typ.NumField() != len(envelopeFields) {
		t.Fatalf("Envelope has %d fields, the list %d", typ.NumField(), len(envelopeFields))
	}
	for i, f := range envelopeFields {
		name, opts, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
		if name != f.name || (opts == "omitempty") != f.optional {
			t.Errorf("field %d: struct %s %q, list %s optional=%v", i, typ.Field(i).Name, typ.Field(i).Tag.Get("json"), f.name, f.optional)
		}
		if string(jsontape.AppendString(nil, f.name)) != `"`+f.name+`"` {
			t.Errorf("field %q needs escaping; AppendJSON writes names as they are", f.name)
		}
	}
}

// TestEnvelopeSchemaDescribesTheEnvelope: the published schema compiles,
// requires exactly the fields never left out, allows no others, closes the
// status and side_effect sets, and accepts what AppendJSON writes.
func TestEnvelopeSchemaDescribesTheEnvelope(t *testing.T) {
	var doc struct {
		Type                 string                    `json:"type"`
		Required             []string                  `json:"required"`
		AdditionalProperties bool                      `json:"additionalProperties"`
		Properties           map[string]map[string]any `json:"properties"`
	}
	if err := json.Unmarshal(EnvelopeSchema(), &doc); err != nil {
		t.Fatalf("schema is not JSON: %v\n%s", err, EnvelopeSchema())
	}
	var required, all []string
	for _, f := range envelopeFields {
		all = append(all, f.name)
		if !f.optional {
			required = append(required, f.name)
		}
	}
	if !slices.Equal(doc.Required, required) || len(doc.Properties) != len(all) || doc.AdditionalProperties || doc.Type != "object" {
		t.Errorf("schema requires %v of %d properties (additional %v), want %v of %v", doc.Required, len(doc.Properties), doc.AdditionalProperties, required, all)
	}
	var statuses []any
	for _, s := range Statuses() {
		statuses = append(statuses, string(s))
	}
	if got := doc.Properties["status"]["enum"]; !reflect.DeepEqual(got, statuses) {
		t.Errorf("status enum %v, want %v", got, statuses)
	}
	if got := doc.Properties["side_effect"]["enum"]; !reflect.DeepEqual(got, []any{"none", "done", "unknown"}) {
		t.Errorf("side_effect enum %v", got)
	}
	var schemaDoc map[string]any
	dec := json.NewDecoder(bytes.NewReader(EnvelopeSchema()))
	dec.UseNumber()
	if err := dec.Decode(&schemaDoc); err != nil {
		t.Fatal(err)
	}
	schema, err := CompileSchema(schemaDoc)
	if err != nil {
		t.Fatalf("schema does not compile: %v", err)
	}
	for name, e := range map[string]Envelope{
		"every field":     {Status: StatusUpstream, Message: "m", Data: json.RawMessage(`{"a":[1]}`), Retryable: true, SideEffect: SideEffectUnknown, RetryAfterMS: 1000, Cost: 0.5, Tool: "t", CallID: "c", Observation: "o"},
		"optional absent": {Status: StatusOK, SideEffect: SideEffectDone, SideEffectDone: true},
	} {
		args, err := DecodeArgs(e.AppendJSON(nil), 32)
		if err != nil {
			t.Fatal(err)
		}
		if err := schema.Validate(args); err != nil {
			t.Errorf("%s: the schema refuses what AppendJSON writes: %v", name, err)
		}
	}
	args, _ := DecodeArgs([]byte(`{"status":"fine","message":"m","retryable":false,"side_effect":"none","side_effect_done":false,"replayed":false,"cost":0,"tool":"t","call_id":"c","observation":"o"}`), 32)
	if schema.Validate(args) == nil {
		t.Error("the schema accepts a status outside the set")
	}
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

// TestAppendJSONAroundLeavesOutOnlyTheData: the envelope written around its
// data, with the data put back where AppendJSONAround says, is AppendJSON's
// document, byte for byte, with data and without.
func TestAppendJSONAroundLeavesOutOnlyTheData(t *testing.T) {
	tests := []struct {
		name string
		env  Envelope
	}{
		{"data and every optional field", Envelope{Status: StatusOK, Message: "命中 3 条。", Data: json.RawMessage(`{"items":[1,2],"total":3}`), RetryAfterMS: 20, SideEffect: SideEffectNone, Cost: 0.001, Tool: "search_articles", CallID: "01J", Observation: "[OK] x\n{}"}},
		{"data without retry_after_ms", Envelope{Status: StatusOK, Data: json.RawMessage(`"text"`), SideEffect: SideEffectNone, Tool: "t"}},
		{"no data", Envelope{Status: StatusUpstream, Message: "m", Retryable: true, SideEffect: SideEffectUnknown, RetryAfterMS: 1500}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prefix := []byte("prefix:")
			out, at := tt.env.AppendJSONAround(prefix)
			if at < len(prefix) || at > len(out) {
				t.Fatalf("data at %d of %d bytes", at, len(out))
			}
			got := string(out[:at]) + string(tt.env.Data) + string(out[at:])
			if want := string(tt.env.AppendJSON(prefix)); got != want {
				t.Errorf("around the data:\n got %s\nwant %s", got, want)
			}
		})
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
			if !slices.ContainsFunc(envelopeFields[:], func(f envelopeField) bool { return f.name == k }) {
				return // a case variant encoding/json folds
			}
		}
		t.Fatalf("tape decoder refused (%v) what encoding/json accepts: %s", err, b)
	})
}
