package console

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"

	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/proxy"
)

// form is the playground's form: one field per argument, generated from
// the tool's published schema, or the arguments as raw JSON; the caller;
// and a pasted backend answer for the dry run.
type form struct {
	Fields []field
	// Raw is the arguments as JSON; when set, it wins over the fields.
	Raw    string
	Caller string
	// The pasted answer: status, header lines and body. NoBody says an
	// empty body is the answer (a 204), not "no answer".
	AnswerStatus  string
	AnswerHeaders string
	AnswerBody    string
	NoBody        bool
	// schema is the tool's argument schema, which types the fields as
	// it types a legacy route's query and form values (Schema.Coerce).
	schema *contracts.Schema
}

// field is one argument's input.
type field struct {
	Name, Description string
	// Kind is how it is entered: text, integer, number, boolean (a choice
	// of true, false or absent), enum (a choice of the schema's values),
	// json (objects, arrays, and anything else, as JSON).
	Kind     string
	Required bool
	Options  []string // for enum, the values as JSON
	Value    string
	// Hint says what the schema allows (bounds, pattern, default).
	Hint string
}

// newForm is the empty form of a tool.
func newForm(ct *contracts.Contract) form {
	return form{schema: ct.Schema, Fields: fields(ct), AnswerStatus: "200", AnswerHeaders: "Content-Type: application/json"}
}

// fields are the inputs of the top-level properties of the tool's
// published schema: the required ones first, in the schema's order of
// required, then the others by name.
func fields(ct *contracts.Contract) []field {
	var s struct {
		Properties map[string]map[string]any `json:"properties"`
		Required   []string                  `json:"required"`
	}
	if json.Unmarshal(ct.PublishedSchema(), &s) != nil {
		return nil
	}
	var names []string
	for _, n := range slices.Sorted(maps.Keys(s.Properties)) {
		if !slices.Contains(s.Required, n) {
			names = append(names, n)
		}
	}
	var required []string
	for _, n := range s.Required {
		if _, ok := s.Properties[n]; ok && !slices.Contains(required, n) {
			required = append(required, n)
		}
	}
	out := make([]field, 0, len(s.Properties))
	for _, n := range append(required, names...) {
		out = append(out, newField(n, s.Properties[n], slices.Contains(s.Required, n)))
	}
	return out
}

func newField(name string, p map[string]any, required bool) field {
	f := field{Name: name, Required: required, Kind: "json"}
	f.Description, _ = p["description"].(string)
	if enum, ok := p["enum"].([]any); ok {
		f.Kind = "enum"
		for _, e := range enum {
			b, _ := json.Marshal(e)
			f.Options = append(f.Options, string(b))
		}
	} else {
		switch p["type"] {
		case "string":
			f.Kind = "text"
		case "integer":
			f.Kind = "integer"
		case "number":
			f.Kind = "number"
		case "boolean":
			f.Kind = "boolean"
		}
	}
	var hints []string
	for _, k := range []string{"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength", "minItems", "maxItems", "pattern", "format", "default"} {
		if v, ok := p[k]; ok {
			b, _ := json.Marshal(v)
			hints = append(hints, k+" "+string(b))
		}
	}
	if f.Kind == "json" {
		t, _ := json.Marshal(p["type"])
		hints = append([]string{"JSON, type " + string(t)}, hints...)
	}
	f.Hint = strings.Join(hints, ", ")
	return f
}

// readForm reads a posted form of the tool.
func readForm(ct *contracts.Contract, v url.Values) form {
	f := form{
		schema: ct.Schema,
		Fields: fields(ct), Raw: strings.TrimSpace(v.Get("args_json")), Caller: v.Get("caller"),
		AnswerStatus: strings.TrimSpace(v.Get("answer_status")), AnswerHeaders: v.Get("answer_headers"),
		AnswerBody: v.Get("answer_body"), NoBody: v.Get("answer_no_body") != "",
	}
	for i := range f.Fields {
		f.Fields[i].Value = v.Get("arg." + f.Fields[i].Name)
	}
	return f
}

// hide passes every value the page shows again through hide: the form
// is read (args, answer) before it is hidden.
func (f *form) hide(hide func(string) string) {
	for i := range f.Fields {
		f.Fields[i].Value = hide(f.Fields[i].Value)
	}
	f.Raw, f.AnswerHeaders, f.AnswerBody = hide(f.Raw), hide(f.AnswerHeaders), hide(f.AnswerBody)
}

// args are the call's arguments as a JSON object: the raw JSON if given,
// otherwise the fields that have a value, typed by the schema as a legacy
// route's query and form values are (Schema.Coerce). The pipeline checks
// them against the whole schema.
func (f *form) args() ([]byte, error) {
	if f.Raw != "" {
		if !json.Valid([]byte(f.Raw)) {
			return nil, errors.New("the arguments are not JSON")
		}
		return []byte(f.Raw), nil
	}
	var b bytes.Buffer
	b.WriteByte('{')
	n := 0
	for _, fd := range f.Fields {
		val := strings.TrimSpace(fd.Value)
		if val == "" {
			continue
		}
		var enc []byte
		switch fd.Kind {
		case "enum", "json": // a JSON value from the schema, or JSON typed in
			if !json.Valid([]byte(val)) {
				return nil, fmt.Errorf("argument %s is not JSON", fd.Name)
			}
			enc = []byte(val)
		default: // text, integer, number, boolean: typed by the schema
			if fd.Kind == "text" {
				val = fd.Value // a text argument keeps its spaces
			}
			v, err := f.schema.Coerce(fd.Name, []string{val})
			if err != nil {
				return nil, err
			}
			enc, _ = json.Marshal(v)
		}
		if n > 0 {
			b.WriteByte(',')
		}
		name, _ := json.Marshal(fd.Name)
		b.Write(name)
		b.WriteByte(':')
		b.Write(enc)
		n++
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// answer is the pasted answer, or nil when none was pasted.
func (f *form) answer() (*proxy.Answer, error) {
	if f.AnswerBody == "" && !f.NoBody {
		return nil, nil
	}
	code, err := strconv.Atoi(f.AnswerStatus)
	if err != nil || code < 100 || code > 599 {
		return nil, fmt.Errorf("the answer's status %q is not an HTTP status", f.AnswerStatus)
	}
	h := http.Header{}
	for line := range strings.Lines(f.AnswerHeaders) {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		name, value, ok := strings.Cut(line, ":")
		if !ok || !httpguts.ValidHeaderFieldName(name) || !httpguts.ValidHeaderFieldValue(strings.TrimSpace(value)) {
			return nil, fmt.Errorf("the answer's header line %q is not 'Name: value'", line)
		}
		h.Add(name, strings.TrimSpace(value))
	}
	body := f.AnswerBody
	if f.NoBody {
		body = ""
	}
	// A browser sends a textarea's line ends as CRLF; the pasted body is
	// the text as it reads.
	return &proxy.Answer{Code: code, Header: h, Body: []byte(strings.ReplaceAll(body, "\r\n", "\n"))}, nil
}

// hasKeyArg reports whether the arguments carry an idempotency key.
func hasKeyArg(args []byte) bool {
	var m map[string]json.RawMessage
	if json.Unmarshal(args, &m) != nil {
		return false
	}
	_, ok := m[contracts.IdempotencyKeyArg]
	return ok
}

// randomHex is n random bytes in hex.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
