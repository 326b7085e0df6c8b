package contracts

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net/textproto"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// A legacy client sends its body in the encoding it was written for, which
// need not be the one the binding sends: a browser form or curl -F posts
// form fields to a route whose backend takes JSON. ReadArgs reads the body
// by its Content-Type and maps what it finds onto the binding, so the
// backend still gets the binding's own encoding:
//
//	application/json, +json            the members, along the written JSON body
//	application/x-www-form-urlencoded  the fields, by their keys
//	multipart/form-data                the fields, by their keys; text parts only
//	none                               the binding's own encoding
//
// A JSON body's fields are keyed as a form binding keys them: a member of
// a nested object is "parent[member]"; a repeated field is an array when
// the argument's schema says array (Schema.Coerce, as for query
// parameters). A body written as an object takes all three: a JSON body
// posted to a form binding's route is read as the form's fields
// (jsonFormValues). Any other type is ProblemMediaType, with the types the
// route takes.
//
// Bounds: the body is already read within server.max_request_bytes; it
// holds at most MaxFormFields fields or parts, each part's headers at most
// MaxPartHeaderBytes, and a multipart body is read from memory by
// multipart.Reader (no temporary files). A part with a file name, or
// whose media type is not text/plain, is refused naming its field
// (ProblemNotText): files are not arguments.

// MaxFormFields bounds the fields of a form body and the parts of a
// multipart body on a legacy route.
const MaxFormFields = 1000

// MaxPartHeaderBytes bounds the headers of one part of a multipart body.
const MaxPartHeaderBytes = 8 << 10

// legacyEncoding is how a legacy request's body is encoded.
type legacyEncoding int

const (
	legacyJSON legacyEncoding = iota
	legacyForm
	legacyMultipart
)

const (
	mediaJSON      = "application/json"
	mediaForm      = "application/x-www-form-urlencoded"
	mediaMultipart = "multipart/form-data"
)

// legacyBodyEncoding reads the body's encoding from its Content-Type, and
// for multipart the boundary. The error is an *ArgError.
func (b *Binding) legacyBodyEncoding(header map[string][]string, body []byte) (legacyEncoding, string, error) {
	var ct string
	if vs := header["Content-Type"]; len(vs) > 0 {
		ct = vs[0]
	}
	if strings.TrimSpace(ct) == "" {
		if b.form != nil {
			return legacyForm, "", nil
		}
		return legacyJSON, "", nil
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil && !errors.Is(err, mime.ErrInvalidMediaParameter) {
		mt, _, _ = strings.Cut(ct, ";")
		mt = strings.ToLower(strings.TrimSpace(mt))
		return 0, "", b.mediaTypeError(mt)
	}
	var enc legacyEncoding
	switch {
	case mt == mediaJSON || strings.HasSuffix(mt, "+json"):
		enc = legacyJSON
	case mt == mediaForm && bytes.HasPrefix(bytes.TrimSpace(body), []byte("{")) && slices.Contains(b.legacyMediaTypes(), mediaJSON):
		// curl -d '{…}' labels JSON as a form; a form encoder escapes
		// "{", so such a body is JSON (the tool endpoint reads it so too).
		enc = legacyJSON
	case mt == mediaForm:
		enc = legacyForm
	case mt == mediaMultipart:
		enc = legacyMultipart
	default:
		return 0, "", b.mediaTypeError(mt)
	}
	if !slices.Contains(b.legacyMediaTypes(), encodingMedia(enc)) {
		return 0, "", b.mediaTypeError(mt)
	}
	if enc == legacyMultipart && params["boundary"] == "" {
		return 0, "", &ArgError{Problem: ProblemFormBoundary}
	}
	return enc, params["boundary"], nil
}

func encodingMedia(enc legacyEncoding) string {
	switch enc {
	case legacyForm:
		return mediaForm
	case legacyMultipart:
		return mediaMultipart
	}
	return mediaJSON
}

// legacyMediaTypes are the body media types a legacy request on the
// binding's route may use: a body written as an object (JSON or form)
// takes JSON, form and multipart bodies; a JSON body that is one leaf (an
// argument, an expression) takes JSON only, and a form body that is one
// leaf forms only (it is read back from neither).
func (b *Binding) legacyMediaTypes() []string {
	switch {
	case b.form != nil && b.form.whole != nil:
		return []string{mediaForm, mediaMultipart}
	case b.form != nil, b.bodyFields != nil:
		return []string{mediaJSON, mediaForm, mediaMultipart}
	}
	return []string{mediaJSON}
}

func (b *Binding) mediaTypeError(mt string) error {
	accepted := b.legacyMediaTypes()
	values := make([]string, len(accepted))
	for i, a := range accepted {
		values[i] = string(AppendJSONString(nil, a))
	}
	return &ArgError{Problem: ProblemMediaType, Got: quoteShort(mt), Values: values}
}

// readFormBody parses an application/x-www-form-urlencoded body into its
// fields.
func readFormBody(body []byte) (url.Values, error) {
	if bytes.Count(body, []byte("&")) >= MaxFormFields {
		return nil, &ArgError{Problem: ProblemFormFields, Max: strconv.Itoa(MaxFormFields)}
	}
	vals, err := url.ParseQuery(string(body))
	if err != nil {
		return nil, &ArgError{Problem: ProblemFormSyntax, Got: quoteShort(mediaForm)}
	}
	for k, vs := range vals {
		if !utf8.ValidString(k) {
			return nil, &ArgError{Problem: ProblemNotUTF8}
		}
		for _, v := range vs {
			if !utf8.ValidString(v) {
				return nil, &ArgError{Problem: ProblemNotUTF8}
			}
		}
	}
	return vals, nil
}

// readMultipartBody parses a multipart/form-data body, held in memory,
// into its text fields.
func readMultipartBody(body []byte, boundary string) (url.Values, error) {
	mr := multipart.NewReader(bytes.NewReader(body), boundary)
	vals := url.Values{}
	syntax := &ArgError{Problem: ProblemFormSyntax, Got: quoteShort(mediaMultipart)}
	for n := 0; ; n++ {
		part, err := mr.NextRawPart()
		if err == io.EOF {
			// multipart.Reader also ends cleanly on a body cut off inside
			// a part's headers: only the close delimiter ends it.
			if !closedMultipart(body, boundary) {
				return nil, syntax
			}
			break
		}
		if err != nil {
			return nil, syntax
		}
		if n >= MaxFormFields {
			return nil, &ArgError{Problem: ProblemFormFields, Max: strconv.Itoa(MaxFormFields)}
		}
		if headerBytes(part.Header) > MaxPartHeaderBytes {
			return nil, &ArgError{Problem: ProblemPartHeader, Max: strconv.Itoa(MaxPartHeaderBytes)}
		}
		disposition, params, err := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
		name := params["name"]
		if err != nil || disposition != "form-data" || name == "" {
			return nil, syntax
		}
		if !utf8.ValidString(name) {
			return nil, &ArgError{Problem: ProblemNotUTF8}
		}
		if err := textPart(part.Header, params, name); err != nil {
			return nil, err
		}
		value, err := io.ReadAll(part)
		if err != nil {
			return nil, syntax
		}
		if !utf8.Valid(value) {
			return nil, &ArgError{Problem: ProblemNotUTF8}
		}
		vals[name] = append(vals[name], string(value))
	}
	return vals, nil
}

// closedMultipart reports whether body's last delimiter is the close
// delimiter, "--boundary--".
func closedMultipart(body []byte, boundary string) bool {
	delim := "--" + boundary
	i := bytes.LastIndex(body, []byte(delim))
	return i >= 0 && bytes.HasPrefix(body[i+len(delim):], []byte("--"))
}

// textPart refuses a part that is a file (it has a file name) or not
// plain text in UTF-8, naming its field.
func textPart(h textproto.MIMEHeader, disposition map[string]string, name string) error {
	ptr := "/" + escapePointer(name)
	if _, ok := disposition["filename"]; ok {
		return &ArgError{Pointer: ptr, Problem: ProblemNotText, Got: quoteShort(disposition["filename"])}
	}
	if cte := strings.ToLower(h.Get("Content-Transfer-Encoding")); cte != "" && cte != "7bit" && cte != "8bit" && cte != "binary" {
		return &ArgError{Pointer: ptr, Problem: ProblemNotText, Got: quoteShort("Content-Transfer-Encoding: " + cte)}
	}
	ct := h.Get("Content-Type")
	if ct == "" {
		return nil
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil || mt != "text/plain" {
		return &ArgError{Pointer: ptr, Problem: ProblemNotText, Got: quoteShort(mt)}
	}
	if cs := strings.ToLower(params["charset"]); cs != "" && cs != "utf-8" && cs != "us-ascii" {
		return &ArgError{Pointer: ptr, Problem: ProblemNotText, Got: quoteShort(ct)}
	}
	return nil
}

// headerBytes is the size of a part's headers as sent, near enough: each
// name, value and separator.
func headerBytes(h textproto.MIMEHeader) int {
	n := 0
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return n
}

// jsonFormValues is a JSON body posted to a route whose backend takes a
// form, as the form's fields: a member is the field of its key, and a
// nested object's members are "parent[member]" unless the binding takes
// the object whole under its own key. A value is its text (a string as
// it is, a number as written, true or false), a list repeats the key,
// and an object or list kept whole is its compact JSON; null is no
// value. Schema.Coerce types the text back, as for a form. It holds at
// most MaxFormFields values, as a form does.
func jsonFormValues(f *formShape, obj map[string]any) (url.Values, error) {
	known := make(map[string]bool, len(f.fields))
	for i := range f.fields {
		known[f.fields[i].key] = true
	}
	vals := url.Values{}
	var walk func(prefix string, obj map[string]any)
	walk = func(prefix string, obj map[string]any) {
		for k, v := range obj {
			key := k
			if prefix != "" {
				key = prefix + "[" + k + "]"
			}
			if m, ok := v.(map[string]any); ok && !known[key] {
				walk(key, m)
				continue
			}
			items, ok := v.([]any)
			if !ok {
				items = []any{v}
			}
			for _, item := range items {
				switch item := item.(type) {
				case nil:
				case string:
					vals.Add(key, item)
				case json.Number:
					vals.Add(key, item.String())
				case bool:
					vals.Add(key, strconv.FormatBool(item))
				default:
					text, _ := json.Marshal(item)
					vals.Add(key, string(text))
				}
			}
		}
	}
	walk("", obj)
	n := 0
	for _, vs := range vals {
		n += len(vs)
	}
	if n > MaxFormFields {
		return nil, &ArgError{Problem: ProblemFormFields, Max: strconv.Itoa(MaxFormFields)}
	}
	return vals, nil
}

// jsonBodyFields is the form view of a JSON body written as an object:
// each argument leaf keyed as a form binding keys it ("parent[member]"),
// constants and expressions known but not read back. The items of a
// written list are not fields (a JSON body carries them). Nil when the
// body is not an object.
func jsonBodyFields(n *node) *formShape {
	if n == nil || n.kind != ShapeObject {
		return nil
	}
	f := &formShape{}
	var walk func(n *node, prefix string)
	walk = func(n *node, prefix string) {
		for _, m := range n.members {
			key := m.name
			if prefix != "" {
				key = prefix + "[" + m.name + "]"
			}
			switch m.node.kind {
			case ShapeObject:
				walk(m.node, key)
			case ShapeList:
			default:
				f.fields = append(f.fields, formField{key: key, leaf: m.node, readable: m.node.kind == ShapeArg})
			}
		}
	}
	walk(n, "")
	return f
}
