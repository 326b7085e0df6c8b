package contracts

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/toolgate/toolgate/internal/jsontape"
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
	defaults propertyDefaults
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
	compiled, err := compileDocument("urn:toolgate:args", "argument schema", obj)
	if err != nil {
		return nil, err
	}
	raw, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("argument schema is not representable as JSON: %w", err)
	}
	s := &Schema{compiled: compiled, quick: newQuickSchema(obj, compiled, true), defaults: newPropertyDefaults(obj), doc: obj, json: raw}
	if props, ok := obj["properties"].(map[string]any); ok {
		for name := range props {
			s.props = append(s.props, name)
		}
		sort.Strings(s.props)
	}
	return s, nil
}

// schema compiles an argument schema as CompileSchema does, once per
// policy for every schema written alike: tools of an imported API often
// share one, and a compiled schema holds several KiB. Two documents are
// alike when their JSON is (keys sorted, numbers as written); the
// environment keeps a hash of it, and compares the JSON itself. A nil
// environment shares nothing.
func (re *RuleEnv) schema(doc any) (*Schema, error) {
	if re == nil {
		return CompileSchema(doc)
	}
	raw, err := json.Marshal(doc)
	if _, obj := doc.(map[string]any); !obj || err != nil {
		return CompileSchema(doc) // the same error as without sharing
	}
	key := sha256.Sum256(raw)
	re.mu.Lock()
	s, ok := re.schemas[key]
	re.mu.Unlock()
	if ok && bytes.Equal(s.json, raw) {
		return s, nil
	}
	s, err = CompileSchema(doc)
	if err == nil && !ok {
		re.mu.Lock()
		re.schemas[key] = s
		re.mu.Unlock()
	}
	return s, err
}

// compileDocument compiles a JSON Schema 2020-12 document (what names it in
// errors: "argument schema") at the URN loc. References may only point
// inside the document: no network, no files.
func compileDocument(loc, what string, obj map[string]any) (*jsonschema.Schema, error) {
	if s, ok := obj["$schema"].(string); ok && s != "https://json-schema.org/draft/2020-12/schema" {
		return nil, fmt.Errorf("$schema %q is not supported: only JSON Schema 2020-12 is", s)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(jsonschema.SchemeURLLoader{}) // no scheme is loadable: no network, no files
	if err := c.AddResource(loc, obj); err != nil {
		return nil, fmt.Errorf("invalid %s: %w", what, err)
	}
	compiled, err := c.Compile(loc)
	if err != nil {
		return nil, schemaCompileError(what, err)
	}
	return compiled, nil
}

// schemaCompileError turns the library's compile errors into one line.
func schemaCompileError(what string, err error) error {
	var verr *jsonschema.SchemaValidationError
	if errors.As(err, &verr) {
		var leaf *jsonschema.ValidationError
		if errors.As(verr.Err, &leaf) {
			for len(leaf.Causes) > 0 {
				leaf = pickCause(leaf.Causes)
			}
			msg := leaf.ErrorKind.LocalizedString(message.NewPrinter(language.English))
			return &schemaError{Location: leaf.InstanceLocation, Msg: "invalid " + what + ": " + msg}
		}
		return &schemaError{Msg: "invalid " + what + ": " + strings.Join(strings.Fields(verr.Err.Error()), " ")}
	}
	var lerr *jsonschema.LoadURLError
	if errors.As(err, &lerr) {
		return fmt.Errorf("invalid %s: $ref %q cannot be resolved inside the schema (network and file references are not allowed)", what, lerr.URL)
	}
	return fmt.Errorf("invalid %s: %s", what, strings.Join(strings.Fields(err.Error()), " "))
}

// schemaError is a schema that does not compile; Location is the path of
// the faulty keyword inside the schema document.
type schemaError struct {
	Location []string
	Msg      string
}

func (e *schemaError) Error() string { return e.Msg }

// rawJSON returns the schema document as published to agents (GET /v1/tools,
// MCP tools/list). Callers must not modify it.
func (s *Schema) rawJSON() json.RawMessage { return s.json }

// document returns the decoded schema document. Callers must not modify it.
func (s *Schema) document() map[string]any { return s.doc }

// hasProperty reports whether the schema declares a top-level property.
func (s *Schema) hasProperty(name string) bool {
	i := sort.SearchStrings(s.props, name)
	return i < len(s.props) && s.props[i] == name
}

// closedProperties reports whether the arguments may hold only the
// properties the schema declares at its top level
// (additionalProperties: false and no patternProperties), and names them.
func (s *Schema) closedProperties() (bool, []string) {
	if s == nil {
		return false, nil
	}
	if extra, ok := s.doc["additionalProperties"].(bool); !ok || extra {
		return false, nil
	}
	if _, ok := s.doc["patternProperties"]; ok {
		return false, nil
	}
	return true, s.props
}

// propertySchema returns the subschema of a top-level property, or nil.
func (s *Schema) propertySchema(name string) map[string]any {
	props, _ := s.doc["properties"].(map[string]any)
	sub, _ := props[name].(map[string]any)
	return sub
}

// Validate applies defaults to args (in place) and validates them. The
// returned error, when not nil, is an *ArgErrors listing every violation in
// a fixed order, so the same arguments always get the same answer.
//
// Numbers beyond the argument bounds (see numbers.go) are refused first,
// wherever they are in the arguments and whatever the schema says of them:
// the library would otherwise spend unbounded time reading them.
func (s *Schema) Validate(args map[string]any) error {
	s.defaults.apply(args)
	if err := checkNumbers(args); err != nil {
		return newArgErrors(err)
	}
	if s.quick != nil && s.quick.accepts(args) {
		return nil
	}
	if err := s.compiled.Validate(args); err != nil {
		var verr *jsonschema.ValidationError
		if errors.As(err, &verr) {
			if leaves := s.collect(verr, args, nil); len(leaves) > 0 {
				return newArgErrors(leaves...)
			}
		}
		return newArgErrors(&ArgError{Problem: ProblemInvalid})
	}
	return nil
}

// propertyDefaults are the defaults an object schema declares in its
// `properties`, and those of its properties that are objects in turn: what
// Validate applies to missing properties, read from the document once
// rather than by walking it on every call. TestPropertyDefaultsApplyAsTheDocument
// and FuzzPropertyDefaults hold them to a walk of the document.
type propertyDefaults []propertyDefault

type propertyDefault struct {
	name       string
	value      any  // the default, when hasDefault
	hasDefault bool // a default of null is one
	// nested are the defaults of the property's own properties, applied
	// when the property is present and an object.
	nested propertyDefaults
}

// newPropertyDefaults reads the defaults of an object schema, in the
// order of the property names; nil when there are none, at any depth.
func newPropertyDefaults(schema map[string]any) propertyDefaults {
	props, _ := schema["properties"].(map[string]any)
	var out propertyDefaults
	for name, sub := range props {
		subSchema, ok := sub.(map[string]any)
		if !ok {
			continue
		}
		value, has := subSchema["default"]
		nested := newPropertyDefaults(subSchema)
		if has || nested != nil {
			out = append(out, propertyDefault{name: name, value: value, hasDefault: has, nested: nested})
		}
	}
	slices.SortFunc(out, func(a, b propertyDefault) int { return strings.Compare(a.name, b.name) })
	return out
}

// apply sets the missing properties of obj to their defaults (a copy of
// each, since obj is the call's to change), and applies the nested
// defaults to the properties present that are objects.
func (d propertyDefaults) apply(obj map[string]any) {
	for i := range d {
		p := &d[i]
		v, present := obj[p.name]
		if !present {
			if p.hasDefault {
				obj[p.name] = deepCopyJSON(p.value)
			}
			continue
		}
		if nested, ok := v.(map[string]any); ok && p.nested != nil {
			p.nested.apply(nested)
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

// collect gathers the leaves of a validation error tree: every failed
// keyword that names a concrete problem with a concrete argument. A group
// (the root, allOf, $ref, several failures at one place) gives all its
// causes; anyOf and oneOf, where one alternative is enough, give the causes
// of the alternative that came closest (closest). The library visits an
// object's properties in map order, so the caller sorts what this returns.
func (s *Schema) collect(v *jsonschema.ValidationError, args map[string]any, out []*ArgError) []*ArgError {
	switch v.ErrorKind.(type) {
	case *kind.Schema, *kind.Group, *kind.AllOf, *kind.Reference:
		for _, c := range v.Causes {
			out = s.collect(c, args, out)
		}
		return out
	case *kind.AnyOf, *kind.OneOf:
		if len(v.Causes) > 0 {
			return append(out, s.closest(v.Causes, args)...)
		}
	}
	return append(out, s.leaf(v, args)...)
}

// closest returns the violations of the alternative that got furthest into
// the arguments before failing (the deepest argument it names), then the
// one with the fewest violations, then the first: telling a model to fix
// the alternative it nearly matched is better than listing every
// alternative's demands, which contradict each other.
func (s *Schema) closest(alternatives []*jsonschema.ValidationError, args map[string]any) []*ArgError {
	var best []*ArgError
	bestDepth := -1
	for _, alt := range alternatives {
		leaves := s.collect(alt, args, nil)
		depth := 0
		for _, l := range leaves {
			depth = max(depth, strings.Count(l.Pointer, "/"))
		}
		if depth > bestDepth || depth == bestDepth && len(leaves) < len(best) {
			best, bestDepth = leaves, depth
		}
	}
	return best
}

// leaf turns one failed keyword into the violations it names, with what is
// allowed there read from the schema document itself (both bounds of a
// range, the accepted property names).
func (s *Schema) leaf(v *jsonschema.ValidationError, args map[string]any) []*ArgError {
	ptr := pointer(v.InstanceLocation)
	sub := s.subschema(v.SchemaURL)
	e := &ArgError{Pointer: ptr, Problem: ProblemInvalid}
	switch k := v.ErrorKind.(type) {
	case *kind.Required:
		return missing(ptr, k.Missing)
	case *kind.DependentRequired:
		return missing(ptr, k.Missing)
	case *kind.Dependency:
		return missing(ptr, k.Missing)
	case *kind.AdditionalProperties:
		accepted := propertyNames(sub)
		out := make([]*ArgError, 0, len(k.Properties))
		for _, name := range k.Properties {
			out = append(out, &ArgError{Pointer: ptr + "/" + escapePointer(name), Problem: ProblemUnexpected, Accepted: accepted})
		}
		return out
	case *kind.Type:
		e.Problem, e.Values = ProblemType, slices.Clone(k.Want)
		e.Got = gotValue(valueAt(args, v.InstanceLocation))
	case *kind.Minimum:
		e.Problem, e.Got = ProblemMinimum, ratString(k.Got)
		e.Min = ratString(k.Want)
		rangeOf(e, sub)
	case *kind.Maximum:
		e.Problem, e.Got = ProblemMaximum, ratString(k.Got)
		e.Max = ratString(k.Want)
		rangeOf(e, sub)
	case *kind.ExclusiveMinimum:
		e.Problem, e.Got = ProblemExclMin, ratString(k.Got)
		e.Min, e.MinExclusive = ratString(k.Want), true
		rangeOf(e, sub)
	case *kind.ExclusiveMaximum:
		e.Problem, e.Got = ProblemExclMax, ratString(k.Got)
		e.Max, e.MaxExclusive = ratString(k.Want), true
		rangeOf(e, sub)
	case *kind.MultipleOf:
		e.Problem, e.Want, e.Got = ProblemMultipleOf, ratString(k.Want), ratString(k.Got)
	case *kind.MinLength:
		e.Problem, e.Min, e.Got = ProblemMinLength, strconv.Itoa(k.Want), strconv.Itoa(k.Got)
		e.Max = numberText(sub["maxLength"])
	case *kind.MaxLength:
		e.Problem, e.Max, e.Got = ProblemMaxLength, strconv.Itoa(k.Want), strconv.Itoa(k.Got)
		e.Min = positive(numberText(sub["minLength"]))
	case *kind.MinItems:
		e.Problem, e.Min, e.Got = ProblemMinItems, strconv.Itoa(k.Want), strconv.Itoa(k.Got)
		e.Max = numberText(sub["maxItems"])
	case *kind.MaxItems:
		e.Problem, e.Max, e.Got = ProblemMaxItems, strconv.Itoa(k.Want), strconv.Itoa(k.Got)
		e.Min = positive(numberText(sub["minItems"]))
	case *kind.Pattern:
		e.Problem, e.Want, e.Got = ProblemPattern, shorten(k.Want, 80), quoteShort(k.Got)
	case *kind.Enum:
		e.Problem, e.Got = ProblemEnum, gotValue(k.Got)
		for _, w := range k.Want[:min(len(k.Want), maxArgErrors)] {
			e.Values = append(e.Values, gotValue(w))
		}
	case *kind.Const:
		e.Problem, e.Values, e.Got = ProblemEnum, []string{gotValue(k.Want)}, gotValue(k.Got)
	case *kind.Format:
		e.Problem, e.Want, e.Got = ProblemFormat, k.Want, gotValue(k.Got)
	case *kind.UniqueItems:
		e.Problem = ProblemUnique
	case *kind.Contains:
		e.Problem = ProblemContains
	default:
		if v.ErrorKind != nil {
			e.Detail = shorten(v.ErrorKind.LocalizedString(message.NewPrinter(language.English)), 160)
		}
	}
	return []*ArgError{e}
}

// missing is one required violation per missing property, in the
// library's order (the caller sorts).
func missing(ptr string, names []string) []*ArgError {
	out := make([]*ArgError, 0, len(names))
	for _, name := range names {
		out = append(out, &ArgError{Pointer: ptr + "/" + escapePointer(name), Problem: ProblemRequired})
	}
	return out
}

// rangeOf completes a numeric bound violation with the other bound the
// schema sets at the same place, so the message can say "between 1 and 20".
func rangeOf(e *ArgError, sub map[string]any) {
	if e.Min == "" {
		if n := numberText(sub["exclusiveMinimum"]); n != "" {
			e.Min, e.MinExclusive = n, true
		} else {
			e.Min = numberText(sub["minimum"])
		}
	}
	if e.Max == "" {
		if n := numberText(sub["exclusiveMaximum"]); n != "" {
			e.Max, e.MaxExclusive = n, true
		} else {
			e.Max = numberText(sub["maximum"])
		}
	}
}

// positive drops a lower bound of zero, which says nothing of a length.
func positive(n string) string {
	if n == "0" {
		return ""
	}
	return n
}

// subschema returns the part of the schema document a location of the
// compiled schema points at ("urn:toolgate:args#/properties/limit"), or nil.
func (s *Schema) subschema(url string) map[string]any {
	i := strings.IndexByte(url, '#')
	if i < 0 {
		return nil
	}
	frag := url[i+1:]
	if frag == "" {
		return s.doc
	}
	if frag[0] != '/' {
		return nil // an anchor
	}
	toks := strings.Split(frag[1:], "/")
	for i, tok := range toks {
		toks[i] = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
	}
	m, _ := valueAt(s.doc, toks).(map[string]any)
	return m
}

// propertyNames are the names a schema's `properties` accepts, sorted.
func propertyNames(sub map[string]any) []string {
	props, _ := sub["properties"].(map[string]any)
	if len(props) == 0 {
		return nil
	}
	names := make([]string, 0, len(props))
	for name := range props {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// valueAt returns the value at a location (JSON pointer tokens, unescaped)
// in decoded JSON, or nil: an argument, or a part of the schema document.
func valueAt(doc map[string]any, loc []string) any {
	var cur any = doc
	for _, tok := range loc {
		switch c := cur.(type) {
		case map[string]any:
			cur = c[tok]
		case []any:
			n, err := strconv.Atoi(tok)
			if err != nil || n < 0 || n >= len(c) {
				return nil
			}
			cur = c[n]
		default:
			return nil
		}
	}
	return cur
}

// gotValue is a value as bad_args data shows it: valid JSON, strings cut to
// 40 characters, containers written out only when short ("" otherwise).
func gotValue(v any) string {
	switch t := v.(type) {
	case string:
		return quoteShort(t)
	case json.Number:
		return gotLiteral(string(t))
	case nil:
		return "null"
	case bool:
		return strconv.FormatBool(t)
	}
	if n := numberText(v); n != "" {
		return n
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return ""
	}
	if out := bytes.TrimSpace(buf.Bytes()); utf8.RuneCount(out) <= 80 {
		return string(out)
	}
	return ""
}

// numberText writes a number of a decoded schema document (JSON or YAML)
// as a JSON number; "" for anything else.
func numberText(v any) string {
	switch n := v.(type) {
	case json.Number:
		if jsontape.IsNumber(string(n)) {
			return string(n)
		}
	case int:
		return strconv.Itoa(n)
	case int64:
		return strconv.FormatInt(n, 10)
	case uint64:
		return strconv.FormatUint(n, 10)
	case float64:
		if !math.IsInf(n, 0) && !math.IsNaN(n) {
			return strconv.FormatFloat(n, 'g', -1, 64)
		}
	}
	return ""
}

// pickCause prefers a cause about a concrete value over a group (allOf,
// anyOf, $ref) so the leaf names a real argument.
func pickCause(causes []*jsonschema.ValidationError) *jsonschema.ValidationError {
	best := causes[0]
	for _, c := range causes[1:] {
		if deeperCause(c, best) {
			best = c
		}
	}
	return best
}

// deeperCause reports whether a is the cause to name rather than b: the
// one about a more deeply nested value, and between two as deep the first
// by location and then by keyword. The library gathers causes from maps,
// so their order differs from one compile to the next; the tie-break
// keeps the message of one policy the same on every load.
func deeperCause(a, b *jsonschema.ValidationError) bool {
	if len(a.InstanceLocation) != len(b.InstanceLocation) {
		return len(a.InstanceLocation) > len(b.InstanceLocation)
	}
	if c := slices.Compare(a.InstanceLocation, b.InstanceLocation); c != 0 {
		return c < 0
	}
	return a.SchemaURL < b.SchemaURL
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
