package contracts

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// Schema is a tool's compiled argument schema (JSON Schema 2020-12).
//
// It is compiled once when the policy loads. References may only point inside
// the document: every URL loader is refused, so a schema can never make
// toolgate fetch anything. Schema defaults are applied to missing properties of
// objects the schema describes with `properties` (recursively through nested
// `properties`); defaults behind `$ref` or combinators are not applied.
type Schema struct {
	compiled *jsonschema.Schema
	quick    *quickSchema // nil when the schema is not simple enough
	doc      map[string]any
	json     json.RawMessage
	props    []string
}

// CompileSchema compiles a schema document given as decoded JSON
// (map[string]any, []any, string, json.Number, bool, nil). The document must
// describe an object (`type: object`), since tool arguments are one.
func CompileSchema(doc any) (*Schema, error) {
	obj, ok := doc.(map[string]any)
	if !ok {
		return nil, errors.New("the argument schema must be a mapping")
	}
	if t, _ := obj["type"].(string); t != "object" {
		return nil, errors.New(`the argument schema must have "type: object"`)
	}
	if s, ok := obj["$schema"].(string); ok && s != "https://json-schema.org/draft/2020-12/schema" {
		return nil, fmt.Errorf("$schema %q is not supported: only JSON Schema 2020-12 is", s)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(jsonschema.SchemeURLLoader{}) // no scheme is loadable: no network, no files
	const loc = "urn:toolgate:args"
	if err := c.AddResource(loc, obj); err != nil {
		return nil, fmt.Errorf("invalid argument schema: %w", err)
	}
	compiled, err := c.Compile(loc)
	if err != nil {
		return nil, schemaCompileError(err)
	}
	raw, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("argument schema is not representable as JSON: %w", err)
	}
	s := &Schema{compiled: compiled, quick: newQuickSchema(obj, compiled, true), doc: obj, json: raw}
	if props, ok := obj["properties"].(map[string]any); ok {
		for name := range props {
			s.props = append(s.props, name)
		}
		sort.Strings(s.props)
	}
	return s, nil
}

// schemaCompileError turns the library's compile errors into one line.
func schemaCompileError(err error) error {
	var verr *jsonschema.SchemaValidationError
	if errors.As(err, &verr) {
		var leaf *jsonschema.ValidationError
		if errors.As(verr.Err, &leaf) {
			for len(leaf.Causes) > 0 {
				leaf = pickCause(leaf.Causes)
			}
			msg := leaf.ErrorKind.LocalizedString(message.NewPrinter(language.English))
			return &SchemaError{Location: leaf.InstanceLocation, Msg: "invalid argument schema: " + msg}
		}
		return &SchemaError{Msg: "invalid argument schema: " + strings.Join(strings.Fields(verr.Err.Error()), " ")}
	}
	var lerr *jsonschema.LoadURLError
	if errors.As(err, &lerr) {
		return fmt.Errorf("invalid argument schema: $ref %q cannot be resolved inside the schema (network and file references are not allowed)", lerr.URL)
	}
	return fmt.Errorf("invalid argument schema: %s", strings.Join(strings.Fields(err.Error()), " "))
}

// SchemaError is a schema that does not compile; Location is the path of
// the faulty keyword inside the schema document.
type SchemaError struct {
	Location []string
	Msg      string
}

func (e *SchemaError) Error() string { return e.Msg }

// JSON returns the schema document as published to agents (GET /v1/tools,
// MCP tools/list). Callers must not modify it.
func (s *Schema) JSON() json.RawMessage { return s.json }

// Document returns the decoded schema document. Callers must not modify it.
func (s *Schema) Document() map[string]any { return s.doc }

// HasProperty reports whether the schema declares a top-level property.
func (s *Schema) HasProperty(name string) bool {
	i := sort.SearchStrings(s.props, name)
	return i < len(s.props) && s.props[i] == name
}

// PropertySchema returns the subschema of a top-level property, or nil.
func (s *Schema) PropertySchema(name string) map[string]any {
	props, _ := s.doc["properties"].(map[string]any)
	sub, _ := props[name].(map[string]any)
	return sub
}

// Properties returns the declared top-level property names, sorted.
func (s *Schema) Properties() []string { return s.props }

// Validate applies defaults to args (in place) and validates them. The
// returned error, when not nil, is an *ArgError.
//
// Numbers beyond the argument bounds (see numbers.go) are refused first,
// wherever they are in the arguments and whatever the schema says of them:
// the library would otherwise spend unbounded time reading them.
func (s *Schema) Validate(args map[string]any) error {
	applyDefaults(s.doc, args)
	if err := checkNumbers(args); err != nil {
		return err
	}
	if s.quick != nil && s.quick.accepts(args) {
		return nil
	}
	if err := s.compiled.Validate(args); err != nil {
		var verr *jsonschema.ValidationError
		if errors.As(err, &verr) {
			return newArgError(verr)
		}
		return &ArgError{Pointer: "", Problem: ProblemInvalid}
	}
	return nil
}

// applyDefaults sets missing properties of obj to the defaults declared in
// schema's `properties`, and recurses into nested objects that are present.
func applyDefaults(schema map[string]any, obj map[string]any) {
	props, _ := schema["properties"].(map[string]any)
	for name, sub := range props {
		subSchema, ok := sub.(map[string]any)
		if !ok {
			continue
		}
		v, present := obj[name]
		if !present {
			if def, ok := subSchema["default"]; ok {
				obj[name] = deepCopyJSON(def)
			}
			continue
		}
		if nested, ok := v.(map[string]any); ok {
			applyDefaults(subSchema, nested)
		}
	}
}

func deepCopyJSON(v any) any {
	switch t := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(t))
		for k, e := range t {
			m[k] = deepCopyJSON(e)
		}
		return m
	case []any:
		a := make([]any, len(t))
		for i, e := range t {
			a[i] = deepCopyJSON(e)
		}
		return a
	default:
		return v
	}
}

// Problem names what was wrong with an argument.
type Problem string

// The problems an argument error can report.
const (
	ProblemRequired   Problem = "required"
	ProblemUnexpected Problem = "unexpected"
	ProblemType       Problem = "type"
	ProblemMinimum    Problem = "minimum"
	ProblemMaximum    Problem = "maximum"
	ProblemExclMin    Problem = "exclusive_minimum"
	ProblemExclMax    Problem = "exclusive_maximum"
	ProblemMultipleOf Problem = "multiple_of"
	ProblemMinLength  Problem = "min_length"
	ProblemMaxLength  Problem = "max_length"
	ProblemPattern    Problem = "pattern"
	ProblemEnum       Problem = "enum"
	ProblemFormat     Problem = "format"
	ProblemMinItems   Problem = "min_items"
	ProblemMaxItems   Problem = "max_items"
	ProblemUnique     Problem = "unique"
	ProblemInvalid    Problem = "invalid"
	ProblemNotObject  Problem = "not_object"
	ProblemScalar     Problem = "scalar"
	ProblemSegment    Problem = "segment"
	ProblemNumber     Problem = "number" // a number beyond the argument bounds (numbers.go)
)

// ArgError says which argument failed and what was expected, in terms fit
// for a model: a JSON pointer to the argument and a short description.
type ArgError struct {
	Pointer string  // JSON pointer of the failing argument, e.g. "/limit"
	Problem Problem // what kind of check failed
	Want    string  // the expected value, bound or type, already formatted
	Got     string  // the value or size found, already formatted (may be empty)
}

func (e *ArgError) Error() string { return e.Text("en") }

// Text renders the error as a clause in language lang ("en" or "zh"), e.g.
// "argument /limit must be at most 20 (got 50)".
func (e *ArgError) Text(lang string) string {
	ptr := e.Pointer
	if ptr == "" {
		ptr = "/"
	}
	if lang == "zh" {
		return "参数 " + ptr + " " + e.zh()
	}
	return "argument " + ptr + " " + e.en()
}

func (e *ArgError) en() string {
	got := ""
	if e.Got != "" {
		got = " (got " + e.Got + ")"
	}
	switch e.Problem {
	case ProblemRequired:
		return "is required but missing"
	case ProblemUnexpected:
		return "is not an accepted argument" + e.wantList(" (accepted: %s)")
	case ProblemType:
		return "must be " + e.Want + got
	case ProblemMinimum:
		return "must be at least " + e.Want + got
	case ProblemMaximum:
		return "must be at most " + e.Want + got
	case ProblemExclMin:
		return "must be greater than " + e.Want + got
	case ProblemExclMax:
		return "must be less than " + e.Want + got
	case ProblemMultipleOf:
		return "must be a multiple of " + e.Want + got
	case ProblemMinLength:
		return "must have at least " + e.Want + " characters" + got
	case ProblemMaxLength:
		return "must have at most " + e.Want + " characters" + got
	case ProblemPattern:
		return "must match the pattern " + e.Want + got
	case ProblemEnum:
		return "must be " + e.Want + got
	case ProblemFormat:
		return "must be a valid " + e.Want + got
	case ProblemMinItems:
		return "must have at least " + e.Want + " items" + got
	case ProblemMaxItems:
		return "must have at most " + e.Want + " items" + got
	case ProblemUnique:
		return "must not contain duplicate items"
	case ProblemNotObject:
		return "must be a JSON object of arguments" + got
	case ProblemScalar:
		return "must be a string, number or boolean to be sent in the request" + got
	case ProblemSegment:
		return "must be a non-empty value that is not \".\" or \"..\""
	case ProblemNumber:
		return "must be a number with at most " + strconv.Itoa(MaxNumberDigits) + " significant digits, zero or between 1e-" +
			strconv.Itoa(MaxNumberExponent) + " and 1e" + strconv.Itoa(MaxNumberExponent) + " in magnitude" + got
	default:
		if e.Want != "" {
			return "does not match the schema: " + e.Want
		}
		return "does not match the schema"
	}
}

func (e *ArgError) zh() string {
	got := ""
	if e.Got != "" {
		got = "（当前为 " + e.Got + "）"
	}
	switch e.Problem {
	case ProblemRequired:
		return "是必填项，但缺失"
	case ProblemUnexpected:
		return "不是可接受的参数" + e.wantList("（可用参数：%s）")
	case ProblemType:
		return "必须是 " + e.Want + got
	case ProblemMinimum:
		return "必须不小于 " + e.Want + got
	case ProblemMaximum:
		return "必须不大于 " + e.Want + got
	case ProblemExclMin:
		return "必须大于 " + e.Want + got
	case ProblemExclMax:
		return "必须小于 " + e.Want + got
	case ProblemMultipleOf:
		return "必须是 " + e.Want + " 的倍数" + got
	case ProblemMinLength:
		return "长度必须至少为 " + e.Want + " 个字符" + got
	case ProblemMaxLength:
		return "长度必须至多为 " + e.Want + " 个字符" + got
	case ProblemPattern:
		return "必须匹配模式 " + e.Want + got
	case ProblemEnum:
		return "必须是 " + e.Want + got
	case ProblemFormat:
		return "必须是有效的 " + e.Want + got
	case ProblemMinItems:
		return "必须至少包含 " + e.Want + " 项" + got
	case ProblemMaxItems:
		return "必须至多包含 " + e.Want + " 项" + got
	case ProblemUnique:
		return "不能包含重复项"
	case ProblemNotObject:
		return "必须是一个 JSON 对象" + got
	case ProblemScalar:
		return "必须是字符串、数字或布尔值" + got
	case ProblemSegment:
		return "必须是非空值，且不能是 \".\" 或 \"..\""
	case ProblemNumber:
		return "必须是有效数字不超过 " + strconv.Itoa(MaxNumberDigits) + " 位、为零或绝对值在 1e-" +
			strconv.Itoa(MaxNumberExponent) + " 与 1e" + strconv.Itoa(MaxNumberExponent) + " 之间的数" + got
	default:
		return "不符合参数约定"
	}
}

func (e *ArgError) wantList(format string) string {
	if e.Want == "" {
		return ""
	}
	return fmt.Sprintf(format, e.Want)
}

// newArgError picks the most specific failure of a validation error tree:
// the first leaf, following the first cause at each level, so the model gets
// one concrete thing to fix.
func newArgError(verr *jsonschema.ValidationError) *ArgError {
	leaf := verr
	for len(leaf.Causes) > 0 {
		leaf = pickCause(leaf.Causes)
	}
	ptr := pointer(leaf.InstanceLocation)
	e := &ArgError{Pointer: ptr, Problem: ProblemInvalid}
	switch k := leaf.ErrorKind.(type) {
	case *kind.Required:
		e.Problem = ProblemRequired
		if len(k.Missing) > 0 {
			e.Pointer = ptr + "/" + escapePointer(k.Missing[0])
		}
	case *kind.AdditionalProperties:
		e.Problem = ProblemUnexpected
		if len(k.Properties) > 0 {
			e.Pointer = ptr + "/" + escapePointer(k.Properties[0])
		}
	case *kind.Type:
		e.Problem = ProblemType
		want := make([]string, len(k.Want))
		for i, w := range k.Want {
			want[i] = article(w)
		}
		e.Want = strings.Join(want, " or ")
		e.Got = article(k.Got)
	case *kind.Minimum:
		e.Problem, e.Want, e.Got = ProblemMinimum, ratString(k.Want), ratString(k.Got)
	case *kind.Maximum:
		e.Problem, e.Want, e.Got = ProblemMaximum, ratString(k.Want), ratString(k.Got)
	case *kind.ExclusiveMinimum:
		e.Problem, e.Want, e.Got = ProblemExclMin, ratString(k.Want), ratString(k.Got)
	case *kind.ExclusiveMaximum:
		e.Problem, e.Want, e.Got = ProblemExclMax, ratString(k.Want), ratString(k.Got)
	case *kind.MultipleOf:
		e.Problem, e.Want, e.Got = ProblemMultipleOf, ratString(k.Want), ratString(k.Got)
	case *kind.MinLength:
		e.Problem, e.Want, e.Got = ProblemMinLength, fmt.Sprint(k.Want), fmt.Sprint(k.Got)
	case *kind.MaxLength:
		e.Problem, e.Want, e.Got = ProblemMaxLength, fmt.Sprint(k.Want), fmt.Sprint(k.Got)
	case *kind.Pattern:
		e.Problem, e.Want, e.Got = ProblemPattern, shorten(k.Want, 80), quoteShort(k.Got)
	case *kind.Enum:
		e.Problem = ProblemEnum
		want := make([]string, 0, len(k.Want))
		for _, w := range k.Want {
			want = append(want, displayJSON(w))
		}
		e.Want = "one of " + shorten(strings.Join(want, ", "), 160)
		e.Got = displayJSON(k.Got)
	case *kind.Const:
		e.Problem, e.Want, e.Got = ProblemEnum, displayJSON(k.Want), displayJSON(k.Got)
	case *kind.Format:
		e.Problem, e.Want, e.Got = ProblemFormat, k.Want, displayJSON(k.Got)
	case *kind.MinItems:
		e.Problem, e.Want, e.Got = ProblemMinItems, fmt.Sprint(k.Want), fmt.Sprint(k.Got)
	case *kind.MaxItems:
		e.Problem, e.Want, e.Got = ProblemMaxItems, fmt.Sprint(k.Want), fmt.Sprint(k.Got)
	case *kind.UniqueItems:
		e.Problem = ProblemUnique
	default:
		if leaf.ErrorKind != nil {
			e.Want = shorten(leaf.ErrorKind.LocalizedString(nil), 160)
		}
	}
	return e
}

// pickCause prefers a cause about a concrete value over a group (allOf,
// anyOf, $ref) so the leaf names a real argument.
func pickCause(causes []*jsonschema.ValidationError) *jsonschema.ValidationError {
	best := causes[0]
	for _, c := range causes {
		if len(c.InstanceLocation) > len(best.InstanceLocation) {
			best = c
		}
	}
	return best
}

func pointer(loc []string) string {
	var b strings.Builder
	for _, tok := range loc {
		b.WriteByte('/')
		b.WriteString(escapePointer(tok))
	}
	return b.String()
}

func escapePointer(tok string) string {
	tok = strings.ReplaceAll(tok, "~", "~0")
	return strings.ReplaceAll(tok, "/", "~1")
}

func article(t string) string {
	switch t {
	case "integer", "array", "object":
		return "an " + t
	case "null":
		return "null"
	default:
		return "a " + t
	}
}

func ratString(r *big.Rat) string {
	if r == nil {
		return ""
	}
	if r.IsInt() {
		return shorten(r.Num().String(), 40)
	}
	f, _ := r.Float64()
	return fmt.Sprint(f)
}

func displayJSON(v any) string {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return "a value"
	}
	return shorten(strings.TrimSpace(buf.String()), 60)
}

func quoteShort(s string) string {
	return displayJSON(shorten(s, 40))
}

// shorten cuts s to at most n runes, marking the cut with an ellipsis.
func shorten(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	i, count := 0, 0
	for i < len(s) && count < n-1 {
		_, size := utf8.DecodeRuneInString(s[i:])
		i += size
		count++
	}
	return s[:i] + "…"
}
