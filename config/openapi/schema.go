package openapi

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/toolgate/toolgate/config/policydoc"
)

// omap is a JSON object that keeps its keys in insertion order, so the draft
// reads the same on every run. Values are string, float64, bool, nil, []any,
// *omap, or JSON values as decoded from the document (map[string]any is
// written with sorted keys).
type omap struct {
	keys []string
	vals map[string]any
}

func newOmap() *omap { return &omap{vals: map[string]any{}} }

func (m *omap) set(k string, v any) {
	if _, ok := m.vals[k]; !ok {
		m.keys = append(m.keys, k)
	}
	m.vals[k] = v
}

// Get returns the value of key k; omap is a policydoc.Object.
func (m *omap) Get(k string) (any, bool) {
	v, ok := m.vals[k]
	return v, ok
}

// Keys returns the keys in insertion order; omap is a policydoc.Object.
func (m *omap) Keys() []string { return m.keys }

func (m *omap) len() int { return len(m.keys) }

// schemaConverter turns OpenAPI schemas into JSON Schema 2020-12 for a
// request: OpenAPI 3.0's nullable becomes a type union with "null", a
// boolean exclusiveMinimum/Maximum becomes the numeric form, example becomes
// examples, and the OpenAPI-only keywords (discriminator, xml, externalDocs,
// readOnly, writeOnly, nullable, x-*) are dropped. Properties marked
// readOnly are left out: a client never sends them.
//
// References are inlined, because function-calling clients handle plain
// schemas best. A schema that contains itself cannot be inlined: it goes to
// the argument schema's $defs and is referred to as #/$defs/Name. With
// useDefs set, every named component schema goes to $defs; the importer
// uses it when inlining would make a tool's schema too large.
type schemaConverter struct {
	useDefs bool
	// noDefaults leaves `default` out: toolgate applies schema defaults to
	// the arguments before sending them, which turns a server-side default
	// into a value the call sets.
	noDefaults bool
	dropped    bool // a default was left out
	// response converts the schema of an answer: writeOnly properties are
	// left out instead of readOnly ones, and so are the annotations
	// (title, description, examples, deprecated), which validate nothing.
	response bool
	// optionalNull makes a property of an answer that its object does
	// not require accept null too (a Swagger 2.0 answer: see
	// responseSchema).
	optionalNull bool

	stack    map[*openapi3.Schema]bool
	defNames map[*openapi3.Schema]string
	defOrder []*openapi3.Schema
	names    *policydoc.Namer
	notes    []string
	size     int // values produced, to detect schemas that inlining blows up
	depth    int // current nesting of schemas
	// overflow says inlining went past maxInlineValues or maxInlineDepth
	// and was cut short; the caller converts again with useDefs.
	overflow bool
}

func newSchemaConverter(useDefs bool) *schemaConverter {
	return &schemaConverter{
		useDefs:  useDefs,
		stack:    map[*openapi3.Schema]bool{},
		defNames: map[*openapi3.Schema]string{},
		names:    policydoc.NewNamer(),
	}
}

// convert converts a schema reference; the result is an *omap, or a bool
// for JSON Schema's boolean schemas.
func (c *schemaConverter) convert(ref *openapi3.SchemaRef) any {
	c.size++
	c.depth++
	defer func() { c.depth-- }()
	if !c.useDefs && (c.size > maxInlineValues || c.depth > maxInlineDepth) {
		c.overflow = true
		return newOmap()
	}
	if ref == nil || ref.Value == nil {
		return newOmap()
	}
	s := ref.Value
	if s.Always != nil {
		return *s.Always
	}
	if c.stack[s] || (c.useDefs && componentName(ref.Ref) != "") {
		m := newOmap()
		m.set("$ref", "#/$defs/"+c.defName(s, ref.Ref))
		return m
	}
	c.stack[s] = true
	defer delete(c.stack, s)
	return c.schema(s)
}

// defs converts the schemas that went to $defs, in the order they were
// first referred to; converting one may add more.
func (c *schemaConverter) defs() *omap {
	if len(c.defOrder) == 0 {
		return nil
	}
	out := newOmap()
	for i := 0; i < len(c.defOrder); i++ {
		s := c.defOrder[i]
		c.stack = map[*openapi3.Schema]bool{s: true}
		out.set(c.defNames[s], c.schema(s))
	}
	c.stack = map[*openapi3.Schema]bool{}
	return out
}

func (c *schemaConverter) defName(s *openapi3.Schema, ref string) string {
	if name, ok := c.defNames[s]; ok {
		return name
	}
	name := c.names.Take(componentName(ref), "Schema")
	c.defNames[s] = name
	c.defOrder = append(c.defOrder, s)
	return name
}

// componentName is the last segment of a reference to a named schema
// ("#/components/schemas/Ticket" -> "Ticket"), or "".
func componentName(ref string) string {
	i := strings.LastIndexByte(ref, '/')
	if ref == "" || i < 0 || i == len(ref)-1 {
		return ""
	}
	name := ref[i+1:]
	name = strings.ReplaceAll(strings.ReplaceAll(name, "~1", "/"), "~0", "~")
	return name
}

func (c *schemaConverter) schema(s *openapi3.Schema) any {
	m := newOmap()
	var types []any
	if s.Type != nil {
		for _, t := range *s.Type {
			types = append(types, t)
		}
	}
	nullable := s.Nullable
	if nullable && len(types) > 0 && !containsString(types, "null") {
		types = append(types, "null")
	}
	switch len(types) {
	case 0:
	case 1:
		m.set("type", types[0])
	default:
		m.set("type", types)
	}
	if s.Format != "" {
		m.set("format", s.Format)
	}
	if len(s.Enum) > 0 {
		enum := append([]any(nil), s.Enum...)
		if nullable && !containsNil(enum) {
			enum = append(enum, nil)
		}
		m.set("enum", enum)
	}
	if s.Const != nil {
		m.set("const", s.Const)
	}
	if s.Default != nil {
		if c.noDefaults {
			c.dropped = true
		} else {
			m.set("default", s.Default)
		}
	}
	c.bounds(m, s)
	if s.MultipleOf != nil {
		m.set("multipleOf", *s.MultipleOf)
	}
	if s.MinLength > 0 {
		m.set("minLength", float64(s.MinLength))
	}
	if s.MaxLength != nil {
		m.set("maxLength", float64(*s.MaxLength))
	}
	if s.Pattern != "" {
		// toolgate's schema compiler uses Go's regexp (RE2); an
		// ECMAScript-only pattern (lookaround, backreferences) would make
		// the whole policy fail to load.
		if _, err := regexp.Compile(s.Pattern); err != nil {
			c.notes = append(c.notes, fmt.Sprintf("pattern %q was dropped: Go's RE2 syntax cannot express it", s.Pattern))
		} else {
			m.set("pattern", s.Pattern)
		}
	}
	if s.MinItems > 0 {
		m.set("minItems", float64(s.MinItems))
	}
	if s.MaxItems != nil {
		m.set("maxItems", float64(*s.MaxItems))
	}
	if s.UniqueItems {
		m.set("uniqueItems", true)
	}
	if s.Items != nil {
		m.set("items", c.convert(s.Items))
	}
	if len(s.PrefixItems) > 0 {
		m.set("prefixItems", c.list(s.PrefixItems))
	}
	if s.Contains != nil {
		m.set("contains", c.convert(s.Contains))
	}
	if s.MinContains != nil {
		m.set("minContains", float64(*s.MinContains))
	}
	if s.MaxContains != nil {
		m.set("maxContains", float64(*s.MaxContains))
	}
	if s.MinProps > 0 {
		m.set("minProperties", float64(s.MinProps))
	}
	if s.MaxProps != nil {
		m.set("maxProperties", float64(*s.MaxProps))
	}
	if req := c.required(s); len(req) > 0 {
		m.set("required", stringsToAny(req))
	}
	if len(s.Properties) > 0 {
		props := newOmap()
		for _, name := range slices.Sorted(maps.Keys(s.Properties)) {
			p := s.Properties[name]
			if c.leftOut(p) {
				continue
			}
			v := c.convert(p)
			if c.response && c.optionalNull && !slices.Contains(s.Required, name) {
				v = orNull(v)
			}
			props.set(name, v)
		}
		m.set("properties", props)
	}
	if v, ok := c.boolSchema(s.AdditionalProperties); ok {
		m.set("additionalProperties", v)
	}
	if len(s.PatternProperties) > 0 {
		pp := newOmap()
		for _, name := range slices.Sorted(maps.Keys(s.PatternProperties)) {
			if _, err := regexp.Compile(name); err != nil {
				c.notes = append(c.notes, fmt.Sprintf("patternProperties %q was dropped: Go's RE2 syntax cannot express it", name))
				continue
			}
			pp.set(name, c.convert(s.PatternProperties[name]))
		}
		if pp.len() > 0 {
			m.set("patternProperties", pp)
		}
	}
	if s.PropertyNames != nil {
		m.set("propertyNames", c.convert(s.PropertyNames))
	}
	if len(s.DependentRequired) > 0 {
		dr := newOmap()
		for _, k := range slices.Sorted(maps.Keys(s.DependentRequired)) {
			dr.set(k, stringsToAny(s.DependentRequired[k]))
		}
		m.set("dependentRequired", dr)
	}
	if len(s.DependentSchemas) > 0 {
		ds := newOmap()
		for _, name := range slices.Sorted(maps.Keys(s.DependentSchemas)) {
			ds.set(name, c.convert(s.DependentSchemas[name]))
		}
		m.set("dependentSchemas", ds)
	}
	if v, ok := c.boolSchema(s.UnevaluatedItems); ok {
		m.set("unevaluatedItems", v)
	}
	if v, ok := c.boolSchema(s.UnevaluatedProperties); ok {
		m.set("unevaluatedProperties", v)
	}
	if len(s.AllOf) > 0 {
		m.set("allOf", c.list(s.AllOf))
	}
	if len(s.AnyOf) > 0 {
		m.set("anyOf", c.list(s.AnyOf))
	}
	if len(s.OneOf) > 0 {
		m.set("oneOf", c.list(s.OneOf))
	}
	if s.Not != nil {
		m.set("not", c.convert(s.Not))
	}
	if s.If != nil {
		m.set("if", c.convert(s.If))
	}
	if s.Then != nil {
		m.set("then", c.convert(s.Then))
	}
	if s.Else != nil {
		m.set("else", c.convert(s.Else))
	}
	if s.ContentMediaType != "" {
		m.set("contentMediaType", s.ContentMediaType)
	}
	if s.ContentEncoding != "" {
		m.set("contentEncoding", s.ContentEncoding)
	}
	if c.response {
		c.size += m.len()
		return c.nullable(m, nullable, types)
	}
	if s.Title != "" {
		m.set("title", oneLine(s.Title))
	}
	if d := oneLine(s.Description); d != "" {
		m.set("description", d)
	}
	switch {
	case len(s.Examples) > 0:
		m.set("examples", append([]any(nil), s.Examples...))
	case s.Example != nil:
		m.set("examples", []any{s.Example})
	}
	if s.Deprecated {
		m.set("deprecated", true)
	}
	c.size += m.len()
	return c.nullable(m, nullable, types)
}

// nullable finishes a converted schema. OpenAPI 3.0 writes a nullable
// reference as {nullable: true, allOf: [$ref]}, with no type to add "null"
// to.
func (c *schemaConverter) nullable(m *omap, nullable bool, types []any) any {
	if nullable && len(types) == 0 {
		null := newOmap()
		null.set("type", "null")
		wrapped := newOmap()
		wrapped.set("anyOf", []any{m, null})
		return wrapped
	}
	return m
}

// orNull makes a converted schema accept null as well: "null" joins its
// type (and enum), or, where it has no type to join (a $ref, a
// composition), the schema becomes anyOf itself or null.
func orNull(v any) any {
	m, ok := v.(*omap)
	if !ok {
		return v // a boolean schema: true takes null already
	}
	t, typed := m.vals["type"]
	_, ref := m.vals["$ref"]
	if !typed || ref {
		if _, union := m.vals["anyOf"]; len(m.keys) == 1 && union {
			if list, ok := m.vals["anyOf"].([]any); ok && len(list) == 2 {
				if o, ok := list[1].(*omap); ok && o.len() == 1 && o.vals["type"] == "null" {
					return m // already nullable
				}
			}
		}
		null := newOmap()
		null.set("type", "null")
		wrapped := newOmap()
		wrapped.set("anyOf", []any{m, null})
		return wrapped
	}
	switch tt := t.(type) {
	case string:
		if tt != "null" {
			m.set("type", []any{tt, "null"})
		}
	case []any:
		if !containsString(tt, "null") {
			m.set("type", append(append([]any(nil), tt...), "null"))
		}
	}
	if enum, ok := m.vals["enum"].([]any); ok && !containsNil(enum) {
		m.set("enum", append(append([]any(nil), enum...), nil))
	}
	return m
}

// bounds writes minimum/maximum. OpenAPI 3.0's boolean exclusiveMinimum
// modifies minimum; 2020-12's exclusiveMinimum is the bound itself.
func (c *schemaConverter) bounds(m *omap, s *openapi3.Schema) {
	bound(m, "minimum", "exclusiveMinimum", s.Min, s.ExclusiveMin)
	bound(m, "maximum", "exclusiveMaximum", s.Max, s.ExclusiveMax)
}

// bound writes one side of a range: the inclusive bound v under name, or
// the exclusive one under exclusiveName, as bounds says.
func bound(m *omap, name, exclusiveName string, v *float64, exclusive openapi3.ExclusiveBound) {
	switch {
	case exclusive.Value != nil:
		if v != nil {
			m.set(name, *v)
		}
		m.set(exclusiveName, *exclusive.Value)
	case exclusive.IsTrue() && v != nil:
		m.set(exclusiveName, *v)
	case v != nil:
		m.set(name, *v)
	}
}

func (c *schemaConverter) boolSchema(b openapi3.BoolSchema) (any, bool) {
	if b.Has != nil {
		return *b.Has, true
	}
	if b.Schema != nil {
		return c.convert(b.Schema), true
	}
	return nil, false
}

func (c *schemaConverter) list(refs openapi3.SchemaRefs) []any {
	out := make([]any, 0, len(refs))
	for _, r := range refs {
		out = append(out, c.convert(r))
	}
	return out
}

// leftOut says a property is not part of the schema being converted: a
// readOnly one in a request, a writeOnly one in an answer.
func (c *schemaConverter) leftOut(p *openapi3.SchemaRef) bool {
	if c.response {
		return p != nil && p.Value != nil && p.Value.WriteOnly
	}
	return readOnly(p)
}

// required is s.required without the properties left out.
func (c *schemaConverter) required(s *openapi3.Schema) []string {
	if !c.response {
		return requestRequired(s)
	}
	var out []string
	for _, name := range s.Required {
		if p, ok := s.Properties[name]; ok && c.leftOut(p) {
			continue
		}
		out = append(out, name)
	}
	return out
}

// requestRequired is s.required without the readOnly properties, which a
// request never carries.
func requestRequired(s *openapi3.Schema) []string {
	var out []string
	for _, name := range s.Required {
		if p, ok := s.Properties[name]; ok && readOnly(p) {
			continue
		}
		out = append(out, name)
	}
	return out
}

func readOnly(ref *openapi3.SchemaRef) bool {
	return ref != nil && ref.Value != nil && ref.Value.ReadOnly
}

func stringsToAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

func containsString(list []any, v string) bool {
	for _, e := range list {
		if s, ok := e.(string); ok && s == v {
			return true
		}
	}
	return false
}

func containsNil(list []any) bool {
	for _, e := range list {
		if e == nil {
			return true
		}
	}
	return false
}

// oneLine trims s and collapses every run of white space to one space.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
