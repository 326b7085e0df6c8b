package contracts

import (
	"github.com/toolgate/toolgate/internal/jsontape"

	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
)

// BindingSpec is how a tool's arguments become the backend request, as
// written in the policy file.
type BindingSpec struct {
	Method string
	Path   string // with {arg} placeholders
	// Encoding is how the body is encoded: EncodingJSON (the default) or
	// EncodingForm.
	Encoding Encoding
	Query    *Shape // query parameters; nil for none
	Headers  *Shape // headers, an object of header name to value; nil for none
	Body     *Shape // the body; nil (or an object with no members) for none
	// Reserved are more headers the binding may not set (the caller
	// identity header), by canonical name, with the reason said in the
	// error ("is the caller identity header").
	Reserved map[string]string
}

// Binding is a compiled BindingSpec.
//
// Every placeholder value is escaped as exactly one path segment: the
// unreserved characters of RFC 3986 stay as they are and every other byte is
// percent-encoded, so a value cannot add a segment ("/"), start a query ("?")
// or fragment ("#"), smuggle an escape ("%"), or put CR/LF into the request
// line. A segment that is empty, or that a server could read as "." or
// ".." in any encoding (dotsegment.go), is refused, so no value can climb
// the path. Query and form values
// are percent-encoded, and a header value that is not one line of text is
// refused, so no argument can add a header or end the request line.
type Binding struct {
	method   string
	segments []pathSegment
	encoding Encoding
	query    *formShape    // nil without query parameters
	headers  []headerField // headers bound per call
	static   map[string][]string
	body     *node      // JSON body; nil without one
	form     *formShape // form body; nil without one
	// bodyFields is a JSON body's members as form fields, for a legacy
	// client that posts a form (legacy_body.go); nil without a JSON body
	// written as an object.
	bodyFields *formShape
	args       []string // every argument the binding reads, sorted
	secrets    []string
	// unreadable is, for each argument that transparent mode cannot read
	// back from a legacy request, where it is read.
	unreadable map[string]string
}

type pathSegment struct {
	parts []pathPart
}

type pathPart struct {
	literal string
	arg     string // placeholder argument name when not empty
}

// BindError is a binding that cannot be compiled; Field names the part of the
// spec at fault ("method", "path", "query.<name>", "body.a.b[0]",
// "headers.<name>#key" for a header's name). Line and Column, when set, are
// 1-based positions inside an expression.
type BindError struct {
	Field  string
	Line   int
	Column int
	Msg    string
}

func (e *BindError) Error() string { return e.Field + ": " + e.Msg }

// CompileBinding checks spec against the argument schema and compiles it;
// expressions compile in env (nil refuses them).
func CompileBinding(env *RuleEnv, spec BindingSpec, schema *Schema) (*Binding, error) {
	b := &Binding{method: strings.ToUpper(spec.Method), encoding: spec.Encoding}
	if b.method == "" {
		b.method = http.MethodGet
	}
	if !validMethod(b.method) {
		return nil, &BindError{Field: "method", Msg: fmt.Sprintf("%q is not an HTTP method", spec.Method)}
	}
	switch b.encoding {
	case "":
		b.encoding = EncodingJSON
	case EncodingJSON, EncodingForm:
	default:
		return nil, &BindError{Field: "encoding", Msg: fmt.Sprintf("%q is not valid (want json or form)", spec.Encoding)}
	}
	if !strings.HasPrefix(spec.Path, "/") {
		return nil, &BindError{Field: "path", Msg: "must start with /"}
	}
	if strings.ContainsAny(spec.Path, "?#") {
		return nil, &BindError{Field: "path", Msg: "must not contain ? or #; bind query parameters with query"}
	}
	sc := &shapeCompiler{env: env, schema: schema, read: map[string]bool{}, readable: map[string]bool{}, firstRead: map[string]string{}}
	for _, raw := range strings.Split(spec.Path[1:], "/") {
		seg, err := parseSegment(raw)
		if err != nil {
			return nil, &BindError{Field: "path", Msg: err.Error()}
		}
		for _, p := range seg.parts {
			if p.arg == "" {
				continue
			}
			if !schema.hasProperty(p.arg) {
				return nil, &BindError{Field: "path", Msg: fmt.Sprintf("placeholder {%s} is not an argument", p.arg)}
			}
			sc.use(p.arg, "path", true)
		}
		b.segments = append(b.segments, seg)
	}
	var err error
	if spec.Query != nil && !emptyObject(spec.Query) {
		if b.query, err = sc.form(spec.Query, "query"); err != nil {
			return nil, err
		}
	}
	if spec.Headers != nil {
		if b.headers, b.static, err = sc.headers(spec.Headers, spec.Reserved); err != nil {
			return nil, err
		}
	}
	hasBody := spec.Body != nil && !emptyObject(spec.Body)
	switch {
	case !hasBody && spec.Encoding != "":
		return nil, &BindError{Field: "encoding", Msg: "applies to the body, and this request has none"}
	case hasBody && b.encoding == EncodingForm:
		if b.form, err = sc.form(spec.Body, "body"); err != nil {
			return nil, err
		}
	case hasBody:
		if b.body, err = sc.jsonNode(spec.Body, "body", 0); err != nil {
			return nil, err
		}
		b.bodyFields = jsonBodyFields(b.body)
	}
	for a := range sc.read {
		b.args = append(b.args, a)
		if !sc.readable[a] {
			if b.unreadable == nil {
				b.unreadable = map[string]string{}
			}
			b.unreadable[a] = sc.firstRead[a]
		}
	}
	sort.Strings(b.args)
	b.secrets = sc.secrets
	return b, nil
}

func emptyObject(s *Shape) bool { return s.Kind == ShapeObject && len(s.Members) == 0 }

func validMethod(m string) bool {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions:
		return true
	}
	return false
}

func parseSegment(raw string) (pathSegment, error) {
	var seg pathSegment
	for raw != "" {
		open := strings.IndexByte(raw, '{')
		if open < 0 {
			if strings.ContainsRune(raw, '}') {
				return seg, errors.New("unbalanced } in path")
			}
			seg.parts = append(seg.parts, pathPart{literal: raw})
			break
		}
		if open > 0 {
			if strings.ContainsRune(raw[:open], '}') {
				return seg, errors.New("unbalanced } in path")
			}
			seg.parts = append(seg.parts, pathPart{literal: raw[:open]})
		}
		end := strings.IndexByte(raw[open:], '}')
		if end < 0 {
			return seg, errors.New("unbalanced { in path")
		}
		name := raw[open+1 : open+end]
		if name == "" || strings.ContainsAny(name, "{ ") {
			return seg, fmt.Errorf("invalid placeholder {%s}", name)
		}
		if n := len(seg.parts); n > 0 && seg.parts[n-1].arg != "" {
			return seg, errors.New("two placeholders must be separated by a literal")
		}
		seg.parts = append(seg.parts, pathPart{arg: name})
		raw = raw[open+end+1:]
	}
	for _, p := range seg.parts {
		if p.arg == "" && escapeSegment(p.literal) != p.literal && !validEscapes(p.literal) {
			return seg, fmt.Errorf("literal %q must be written percent-encoded", p.literal)
		}
	}
	return seg, nil
}

// validEscapes accepts literals that are already a valid percent-encoded
// segment (operators may write %20 in a path).
func validEscapes(s string) bool {
	if strings.ContainsAny(s, " \r\n\t?#") {
		return false
	}
	_, err := url.PathUnescape(s)
	return err == nil
}

// Method is the backend request's HTTP method.
func (b *Binding) Method() string { return b.method }

// Args returns every argument name the binding reads, sorted.
func (b *Binding) Args() []string { return b.args }

// pathArgs returns the arguments whose values go into the path, in order.
func (b *Binding) pathArgs() []string {
	var out []string
	for _, seg := range b.segments {
		for _, p := range seg.parts {
			if p.arg != "" {
				out = append(out, p.arg)
			}
		}
	}
	return out
}

// HasBody reports whether the binding sends a body.
func (b *Binding) HasBody() bool { return b.body != nil || b.form != nil }

// ContentType is the media type of the body the binding sends.
func (b *Binding) ContentType() string { return b.encoding.ContentType() }

// Encoding is how the body is encoded.
func (b *Binding) Encoding() Encoding { return b.encoding }

// StaticHeader returns the headers the binding sets to constants, by
// canonical name. Callers must not modify it.
func (b *Binding) StaticHeader() map[string][]string { return b.static }

// HeaderNames returns the canonical names of every header the binding
// sets, constant or bound per call.
func (b *Binding) HeaderNames() []string {
	names := make([]string, 0, len(b.static)+len(b.headers))
	for name := range b.static {
		names = append(names, name)
	}
	for _, hf := range b.headers {
		names = append(names, hf.name)
	}
	sort.Strings(names)
	return names
}

// Secrets returns the values of the ${VAR} references written in the
// binding's constants and expressions, so a tool that prints a request
// can mask them. Callers must not modify it.
func (b *Binding) Secrets() []string { return b.secrets }

// Unreadable returns an argument that transparent mode cannot read back
// from a request on the tool's own route, with the field of the binding
// that reads it (an expression, an item of a query or form list), or
// ok=false when every argument the binding reads can be read back. The
// first such argument in name order is returned.
func (b *Binding) Unreadable() (arg, field string, ok bool) {
	for _, a := range b.args {
		if f, bad := b.unreadable[a]; bad {
			return a, f, true
		}
	}
	return "", "", false
}

// PathTemplate returns the path with its placeholders, as written.
func (b *Binding) PathTemplate() string {
	var sb strings.Builder
	for _, seg := range b.segments {
		sb.WriteByte('/')
		for _, p := range seg.parts {
			if p.arg != "" {
				sb.WriteString("{" + p.arg + "}")
			} else {
				sb.WriteString(p.literal)
			}
		}
	}
	return sb.String()
}

// Bound is a backend request built from arguments.
type Bound struct {
	Path  string // escaped path, starting with "/"
	Query string // encoded query, without "?"
	Body  []byte // the encoded body, or nil
	// Header holds the headers bound per call, by canonical name; nil
	// when none is. Constant headers are in Binding.StaticHeader.
	Header map[string][]string
}

// Bind builds the backend request from validated arguments. Arguments the
// binding does not name are not sent, and an argument that is absent is
// left out (see the policy reference). The error, when not nil, is an
// *ArgError.
func (b *Binding) Bind(args map[string]any) (Bound, error) {
	var out Bound
	path, err := b.bindPath(make([]byte, 0, 64), args)
	if err != nil {
		return out, err
	}
	out.Path = string(path)
	sh := shaper{args: args}
	if b.query != nil {
		q, err := sh.appendForm(nil, b.query)
		if err != nil {
			return out, err
		}
		out.Query = string(q)
	}
	for i := range b.headers {
		hf := &b.headers[i]
		vals, err := sh.headerValues(hf)
		if err != nil {
			return out, err
		}
		if len(vals) == 0 {
			continue
		}
		if out.Header == nil {
			out.Header = make(map[string][]string, len(b.headers))
		}
		out.Header[hf.name] = vals
	}
	switch {
	case b.form != nil:
		body, err := sh.appendForm(make([]byte, 0, 128), b.form)
		if err != nil {
			return out, err
		}
		out.Body = body
	case b.body != nil:
		body, ok, err := sh.appendJSON(make([]byte, 0, 128), b.body)
		if err != nil {
			return out, err
		}
		switch {
		case ok:
			out.Body = body
		case b.body.kind == ShapeObject:
			out.Body = append(body[:0], "{}"...) // every member was left out
		}
	}
	return out, nil
}

// bindPath appends the escaped path.
func (b *Binding) bindPath(path []byte, args map[string]any) ([]byte, error) {
	for _, seg := range b.segments {
		path = append(path, '/')
		start := len(path)
		for _, p := range seg.parts {
			if p.arg == "" {
				path = append(path, p.literal...)
				continue
			}
			v, ok := args[p.arg]
			if !ok {
				return nil, &ArgError{Pointer: "/" + escapePointer(p.arg), Problem: ProblemRequired}
			}
			s, ok := scalarString(v)
			if !ok {
				return nil, &ArgError{Pointer: "/" + escapePointer(p.arg), Problem: ProblemScalar}
			}
			path = appendSegmentEscaped(path, s)
		}
		arg := firstArg(seg)
		if arg == "" {
			continue // literals only, as the operator wrote them
		}
		if start == len(path) || readsAsDotSegment(path[start:]) {
			return nil, &ArgError{Pointer: "/" + escapePointer(arg), Problem: ProblemSegment}
		}
	}
	return path, nil
}

func firstArg(seg pathSegment) string {
	for _, p := range seg.parts {
		if p.arg != "" {
			return p.arg
		}
	}
	return ""
}

// appendQueryEscaped appends s escaped as url.QueryEscape does, without
// an intermediate string.
func appendQueryEscaped(dst []byte, s string) []byte {
	const hex = "0123456789ABCDEF"
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case isUnreserved(c):
			dst = append(dst, c)
		case c == ' ':
			dst = append(dst, '+')
		default:
			dst = append(dst, '%', hex[c>>4], hex[c&0xf])
		}
	}
	return dst
}

// scalarString formats a JSON scalar for a path segment or query value.
func scalarString(v any) (string, bool) {
	switch t := v.(type) {
	case string:
		return t, true
	case json.Number:
		return canonicalNumber(t), true
	case bool:
		return strconv.FormatBool(t), true
	case float64:
		return formatFloat(t)
	case int64:
		return strconv.FormatInt(t, 10), true
	case int:
		return strconv.Itoa(t), true
	}
	return "", false
}

// appendSegmentEscaped percent-encodes every byte of s outside RFC 3986's
// unreserved set.
func appendSegmentEscaped(dst []byte, s string) []byte {
	const hex = "0123456789ABCDEF"
	for i := 0; i < len(s); i++ {
		c := s[i]
		if isUnreserved(c) {
			dst = append(dst, c)
			continue
		}
		dst = append(dst, '%', hex[c>>4], hex[c&0xf])
	}
	return dst
}

func escapeSegment(s string) string { return string(appendSegmentEscaped(nil, s)) }

func isUnreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '-' || c == '.' || c == '_' || c == '~'
}

// appendJSONValue encodes a decoded JSON value, keeping object keys sorted
// (arguments have no meaningful key order) and integral numbers as plain
// digits (canonicalNumber).
func appendJSONValue(dst []byte, v any) ([]byte, error) {
	return jsontape.AppendCanonicalNumbers(dst, v, appendArgNumber)
}

// appendArgNumber spells the numbers of argument values: a json.Number as
// canonicalNumber does, a float64 as formatFloat does.
func appendArgNumber(dst []byte, n any) ([]byte, bool, error) {
	switch t := n.(type) {
	case json.Number:
		if !jsontape.IsNumber(string(t)) {
			return dst, false, fmt.Errorf("invalid number %q", string(t))
		}
		return append(dst, canonicalNumber(t)...), true, nil
	case float64:
		f, ok := formatFloat(t)
		switch {
		case !ok:
			return dst, false, fmt.Errorf("%v is not a JSON number", t)
		case t != math.Trunc(t):
			return jsontape.AppendFloat(dst, t, 64), true, nil
		}
		return append(dst, f...), true, nil
	}
	return dst, false, nil
}

// canonicalNumber spells an integral number as plain digits ("1e1" and
// "10.0" become "10", "1e20" becomes "100000000000000000000"): JSON Schema
// calls them integers, and a legacy backend parsing an integer parameter
// would choke on the exponent or read a float. Other numbers keep their
// spelling. Validation has refused numbers beyond the argument bounds, so
// an integer here has at most MaxNumberExponent digits; one beyond them
// (never validated) is returned as written.
func canonicalNumber(n json.Number) string {
	s := string(n)
	if !strings.ContainsAny(s, ".eE") {
		return s
	}
	shape, ok := parseNumber(s)
	if !ok || !shape.inBounds() {
		return s
	}
	if b, ok := shape.appendInteger(make([]byte, 0, 24)); ok {
		return string(b)
	}
	return s
}

// formatFloat spells a float64 argument (handed over by an embedder) as
// canonicalNumber spells a JSON number: integral values as plain digits,
// never with an exponent; ok is false for NaN and the infinities, which
// no backend reads as a number.
func formatFloat(f float64) (string, bool) {
	switch {
	case math.IsNaN(f) || math.IsInf(f, 0):
		return "", false
	case f == math.Trunc(f):
		return strconv.FormatFloat(f, 'f', -1, 64), true
	}
	return strconv.FormatFloat(f, 'g', -1, 64), true
}
