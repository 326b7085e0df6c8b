package openapi

import (
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/toolgate/toolgate/config/policydoc"
	"github.com/toolgate/toolgate/contracts"
)

// builder turns the operations of one document into tool drafts.
type builder struct {
	doc      *openapi3.T
	spec     string
	kind     string // "OpenAPI 3.0.3", "Swagger 2.0"
	upstream string
	auth     upstreamAuth
	// schemaKey says the policy loader knows response.schema, so each tool
	// gets the schema of its answer.
	schemaKey bool
}

// toolDraft is one tool before rendering: the values to write and the
// comments that go with them.
type toolDraft struct {
	op          *operation
	name        string
	description string
	sideEffect  bool
	// sideEffectNote explains side_effect; side_effect is written whenever
	// it is true or differs from what the method suggests.
	sideEffectNote string
	writeSideEff   bool

	args      *omap
	argsNotes []string // TODO comments above args: cost, timeout, idempotency, schema

	method       string
	path         string
	query        *omap  // backend parameter -> argument
	headers      *omap  // header -> argument
	body         *omap  // body shape: field -> argument, *omap or constLeaf
	bodyArg      string // the argument that is the whole body, or ""
	encoding     string // "form", or "" for JSON
	requestNotes []string

	responseNotes []string // after the request: response and errors hints
	// responseSchema is response.schema, or nil; dataNotes, the data
	// suggestion that goes in the response block with it.
	responseSchema any
	dataNotes      []string
	// data is response.data when the answer holds fields whose names
	// look like credentials: the answer without them, written in the
	// draft itself; dataLeft names the fields it leaves out.
	data     string
	dataLeft []string
}

// maxInlineValues and maxInlineDepth bound an inlined argument schema; past
// either, named schemas go to $defs instead. The policy loader refuses
// schemas nested deeper than 64 levels.
const (
	maxInlineValues = 1500
	maxInlineDepth  = 24
)

func (b *builder) tool(op *operation) *toolDraft {
	t := &toolDraft{op: op, name: op.name, method: op.method}
	t.description = describe(op)
	b.sideEffect(t)

	// A PATCH changes only the fields it sends; toolgate fills in schema
	// defaults before sending, so a default would overwrite a field the
	// agent meant to leave alone.
	patch := op.method == http.MethodPatch
	conv := newSchemaConverter(false)
	conv.noDefaults = patch
	bd := b.bind(op, t.sideEffect, conv)
	if bd.conv.overflow {
		conv = newSchemaConverter(true)
		conv.noDefaults = patch
		bd = b.bind(op, t.sideEffect, conv)
		bd.argsNotes = append(bd.argsNotes, "Named schemas are kept in $defs: inlined, this schema would be very large.")
	}
	if conv.dropped {
		bd.argsNotes = append(bd.argsNotes, "The document's default values are left out: toolgate fills defaults in before sending, so in a PATCH they would overwrite fields the agent leaves alone.")
	}
	t.args, t.path, t.query, t.headers, t.body = bd.args, bd.path, bd.query, bd.headers, bd.body
	t.bodyArg, t.encoding = bd.bodyArg, bd.encoding
	t.requestNotes = bd.requestNotes

	t.argsNotes = append(t.argsNotes, "TODO: cost (default 0) and timeout (default: the upstream's).")
	if t.sideEffect {
		if h := bd.idempotencyHeader; h != "" {
			t.argsNotes = append(t.argsNotes,
				fmt.Sprintf("TODO: the operation takes an %s header. If the backend dedupes on it, forward the key, so that a call whose outcome was lost is resent safely:", h),
				policydoc.Code(fmt.Sprintf("idempotency: {forward_header: %s}", h)))
		}
	}
	t.argsNotes = append(t.argsNotes, bd.argsNotes...)
	if b.schemaKey {
		t.responseSchema = responseSchema(op, b.kind == "Swagger 2.0")
	}
	if ref := firstJSONSchema(op); ref != nil {
		t.data, t.dataLeft = policydoc.SecretFreeData(dataNode(ref, 0, map[*openapi3.Schema]bool{}), "body")
	}
	if t.responseSchema != nil || t.data != "" {
		t.dataNotes = b.responseHints(op, t.data != "")
		t.responseNotes = b.errorHints(op, t.sideEffect)
	} else {
		t.responseNotes = append(b.responseHints(op, false), b.errorHints(op, t.sideEffect)...)
	}
	return t
}

// sideEffect applies the conventions of the package comment.
func (b *builder) sideEffect(t *toolDraft) {
	op := t.op
	safe := op.method == http.MethodGet || op.method == http.MethodHead || op.method == http.MethodOptions
	t.sideEffect = !safe
	if t.sideEffect {
		t.writeSideEff = true
		t.sideEffectNote = op.method + ": not safe to repeat unless the operation is marked x-idempotent: true"
	}
	if v, ok := boolExtension(op.op.Extensions, "x-toolgate-side-effect"); ok {
		t.sideEffect, t.writeSideEff = v, true
		t.sideEffectNote = "set by x-toolgate-side-effect in the document"
		return
	}
	if v, ok := boolExtension(op.op.Extensions, "x-idempotent"); ok && v && !safe {
		t.sideEffect, t.writeSideEff = false, true
		t.sideEffectNote = op.method + " marked x-idempotent: true: no idempotency key, retried like a read"
	}
}

func boolExtension(ext map[string]any, name string) (bool, bool) {
	switch v := ext[name].(type) {
	case bool:
		return v, true
	case string:
		b, err := strconv.ParseBool(v)
		return b, err == nil
	}
	return false, false
}

// describe is the tool description: the summary and the first paragraph of
// the description on one line, or "METHOD /path" when the document has
// neither.
func describe(op *operation) string {
	summary := oneLine(op.op.Summary)
	para := op.op.Description
	if i := strings.Index(para, "\n\n"); i >= 0 {
		para = para[:i]
	}
	para = oneLine(para)
	var text string
	switch {
	case summary == "":
		text = para
	case para == "" || strings.HasPrefix(para, strings.TrimRight(summary, ".")):
		text = summary
		if para != "" {
			text = para
		}
	default:
		text = summary
		if !strings.HasSuffix(summary, ".") && !strings.HasSuffix(summary, "!") && !strings.HasSuffix(summary, "?") {
			text += "."
		}
		text += " " + para
	}
	if text == "" {
		text = op.method + " " + op.path
	}
	return truncate(text, 400)
}

// truncate cuts s to at most n runes at a word boundary, marking the cut.
func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	cut := string(r[:n-1])
	if i := strings.LastIndexByte(cut, ' '); i > n/2 {
		cut = cut[:i]
	}
	return strings.TrimRight(cut, " ,;:") + "…"
}

// binding is what the parameters and request body of an operation make:
// the argument schema and the request binding.
type binding struct {
	conv              *schemaConverter
	args              *omap
	path              string
	query             *omap
	headers           *omap
	body              *omap // a shape: field -> argument name, *omap, or constLeaf
	bodyArg           string
	encoding          string
	dependent         *omap // dependentRequired of the argument schema
	argsNotes         []string
	requestNotes      []string
	idempotencyHeader string
}

func (b *builder) bind(op *operation, sideEffect bool, conv *schemaConverter) *binding {
	bd := &binding{conv: conv, query: newOmap(), headers: newOmap(), body: newOmap()}
	var reserved []string
	if sideEffect {
		reserved = append(reserved, contracts.IdempotencyKeyArg)
	}
	names := policydoc.NewNamer(reserved...)
	props := newOmap()
	var required []string
	params := parameters(op)

	// Path: every placeholder of the template is an argument.
	pathParams := map[string]*openapi3.Parameter{}
	for _, p := range params {
		if p.In == openapi3.ParameterInPath {
			pathParams[p.Name] = p
		}
	}
	used := map[string]bool{}
	placeholders := map[string]string{} // placeholder -> argument
	var pathB strings.Builder
	rest := op.path
	for rest != "" {
		open := strings.IndexByte(rest, '{')
		end := -1
		if open >= 0 {
			end = strings.IndexByte(rest[open:], '}')
		}
		if open < 0 || end < 0 {
			pathB.WriteString(escapeLiteral(rest))
			break
		}
		pathB.WriteString(escapeLiteral(rest[:open]))
		name := rest[open+1 : open+end]
		rest = rest[open+end+1:]
		if arg, ok := placeholders[name]; ok {
			// The same placeholder again: the same argument.
			pathB.WriteString("{" + arg + "}")
			continue
		}
		arg := argName(names, name, "path")
		placeholders[name] = arg
		var schema any
		if p := pathParams[name]; p != nil {
			schema = paramSchema(conv, p)
		} else {
			s := newOmap()
			s.set("type", "string")
			schema = s
			bd.argsNotes = append(bd.argsNotes, fmt.Sprintf("TODO: the path placeholder {%s} is not declared as a parameter; its schema is a guess.", name))
		}
		used[name] = true
		props.set(arg, schema)
		required = append(required, arg)
		pathB.WriteString("{" + arg + "}")
	}
	bd.path = pathB.String()
	for _, p := range params {
		if p.In == openapi3.ParameterInPath && !used[p.Name] {
			bd.requestNotes = append(bd.requestNotes, fmt.Sprintf("the path parameter %s is not in the path template; it is not bound.", p.Name))
		}
	}

	// Query.
	for _, p := range params {
		if p.In != openapi3.ParameterInQuery {
			continue
		}
		if b.auth.setsQuery(p.Name) {
			bd.requestNotes = append(bd.requestNotes, fmt.Sprintf("the query parameter %s is not bound: the upstream's credential sets it.", p.Name))
			continue
		}
		arg := argName(names, p.Name, "query")
		props.set(arg, paramSchema(conv, p))
		bd.query.set(p.Name, arg)
		if p.Required {
			required = append(required, arg)
		}
		if note := queryStyleNote(p); note != "" {
			bd.requestNotes = append(bd.requestNotes, note)
		}
	}

	// Headers: each becomes an argument, unless it carries a credential
	// or is a header toolgate sets itself. Cookies cannot be bound.
	for _, p := range params {
		if p.In != openapi3.ParameterInHeader && p.In != openapi3.ParameterInCookie {
			continue
		}
		if p.In == openapi3.ParameterInHeader && sideEffect && isIdempotencyHeader(p.Name) {
			bd.idempotencyHeader = p.Name
			continue
		}
		req := "optional"
		if p.Required {
			req = "required"
		}
		if p.In == openapi3.ParameterInCookie {
			bd.requestNotes = append(bd.requestNotes, fmt.Sprintf("TODO: cookie parameter %s (%s) is not sent: toolgate binds path, query, headers and body; a constant value belongs in upstreams.%s.headers (as a Cookie header).", p.Name, req, b.upstream))
			continue
		}
		if why := b.unbindableHeader(p); why != "" {
			bd.requestNotes = append(bd.requestNotes, fmt.Sprintf("The header parameter %s (%s) is not an argument: %s.", p.Name, req, why))
			continue
		}
		arg := argName(names, p.Name, "header")
		props.set(arg, paramSchema(conv, p))
		bd.headers.set(p.Name, arg)
		if p.Required {
			required = append(required, arg)
		}
	}

	// Body.
	b.bindBody(op, conv, names, props, &required, bd)

	args := newOmap()
	args.set("type", "object")
	if len(required) > 0 {
		args.set("required", stringsToAny(required))
	}
	args.set("additionalProperties", false)
	if props.len() > 0 {
		args.set("properties", props)
	}
	if bd.dependent != nil && bd.dependent.len() > 0 {
		args.set("dependentRequired", bd.dependent)
	}
	if defs := conv.defs(); defs != nil {
		args.set("$defs", defs)
	}
	bd.args = args
	seen := map[string]bool{}
	for _, n := range conv.notes {
		if !seen[n] {
			seen[n] = true
			bd.argsNotes = append(bd.argsNotes, "TODO: "+n+".")
		}
	}
	return bd
}

func (b *builder) bindBody(op *operation, conv *schemaConverter, names *policydoc.Namer, props *omap, required *[]string, bd *binding) {
	if op.op.RequestBody == nil || op.op.RequestBody.Value == nil {
		return
	}
	rb := op.op.RequestBody.Value
	media, mt := jsonMedia(rb.Content)
	if mt == nil {
		if k, form := formMedia(rb.Content); form != nil {
			media, mt, bd.encoding = k, form, "form"
		}
	}
	if mt == nil {
		if len(rb.Content) > 0 {
			bd.requestNotes = append(bd.requestNotes, fmt.Sprintf("TODO: the request body is %s; toolgate sends JSON and form bodies only, so it is not bound.", strings.Join(slices.Sorted(maps.Keys(rb.Content)), ", ")))
		}
		return
	}
	if mt.Schema == nil {
		bd.requestNotes = append(bd.requestNotes, fmt.Sprintf("TODO: the %s request body has no schema, so it is not bound.", media))
		return
	}
	fields, req, why := objectShape(mt.Schema, 0)
	if why != "" {
		if bd.encoding == "form" {
			bd.requestNotes = append(bd.requestNotes,
				fmt.Sprintf("TODO: the form body is %s; a form body is built from named fields, so it is not bound.", why))
			return
		}
		// The whole body is one argument.
		arg := names.Take("body", "request_body")
		props.set(arg, conv.convert(mt.Schema))
		bd.bodyArg = arg
		if rb.Required {
			*required = append(*required, arg)
		}
		bd.requestNotes = append(bd.requestNotes, fmt.Sprintf("The request body is %s: the argument %s is the whole body.", why, arg))
		return
	}
	if base := mediaBase(media); bd.encoding == "" && base != "application/json" && base != "*/*" {
		bd.requestNotes = append(bd.requestNotes, fmt.Sprintf("TODO: the document gives the body as %s; toolgate sends it as application/json. Check the backend accepts that.", media))
	}
	nb := &nester{b: b, conv: conv, names: names, props: props, bd: bd, stack: map[*openapi3.Schema]bool{mt.Schema.Value: true}}
	all := nb.object(bd.body, fields, req, true, "", 0)
	*required = append(*required, all.required...)
}

// maxNesting is how deep objects of the body are written out as nested
// shapes whose leaves are arguments (body.a.b); a deeper object is one
// argument.
const maxNesting = 2

// nester binds the fields of an object body, nesting its objects.
type nester struct {
	b     *builder
	conv  *schemaConverter
	names *policydoc.Namer
	props *omap
	bd    *binding
	stack map[*openapi3.Schema]bool
}

// boundArgs are the arguments an object's fields became: all of them, and
// those required whenever the object is sent.
type boundArgs struct {
	all, required []string
}

// object binds fields into shape. sent says the object is always sent (it
// and its ancestors are required); prefix names its arguments.
func (n *nester) object(shape *omap, fields map[string]*openapi3.SchemaRef, req []string, sent bool, prefix string, depth int) boundArgs {
	var out boundArgs
	for _, field := range slices.Sorted(maps.Keys(fields)) {
		ref := fields[field]
		isReq := slices.Contains(req, field)
		if v, ok := constValue(ref); ok && isReq {
			// A required field with one allowed value is no choice for
			// the model: send it.
			shape.set(field, constLeaf{v})
			continue
		}
		if sub, subReq, ok := n.nestable(ref, depth); ok {
			inner := newOmap()
			n.stack[ref.Value] = true
			got := n.object(inner, sub, subReq, sent && isReq, prefix+field+"_", depth+1)
			delete(n.stack, ref.Value)
			if inner.len() == 0 {
				continue
			}
			shape.set(field, inner)
			out.all = append(out.all, got.all...)
			if isReq {
				out.required = append(out.required, got.required...)
			}
			if !(sent && isReq) && len(got.required) > 0 {
				// Whichever of the object's arguments is given, its
				// required fields must be too.
				if n.bd.dependent == nil {
					n.bd.dependent = newOmap()
				}
				for _, a := range got.all {
					var others []string
					for _, r := range got.required {
						if r != a {
							others = append(others, r)
						}
					}
					if len(others) > 0 {
						n.bd.dependent.set(a, stringsToAny(others))
					}
				}
			}
			continue
		}
		cands := []string{prefix + field, "body_" + prefix + field}
		if policydoc.Sanitize(prefix+field) == "" {
			cands = []string{"body"}
		}
		arg := n.names.Take(cands...)
		n.props.set(arg, n.conv.convert(ref))
		shape.set(field, arg)
		out.all = append(out.all, arg)
		if isReq {
			out.required = append(out.required, arg)
		}
		if n.bd.encoding == "form" && ref.Value != nil && ref.Value.Type != nil {
			if t := ref.Value.Type; t.Includes("object") || (t.Includes("array") && ref.Value.Items != nil && ref.Value.Items.Value != nil && ref.Value.Items.Value.Type != nil && ref.Value.Items.Value.Type.Includes("object")) {
				n.bd.requestNotes = append(n.bd.requestNotes, fmt.Sprintf("TODO: the form field %s holds objects; toolgate sends such a value as one field of compact JSON. Check the backend reads that.", prefix+field))
			}
		}
	}
	if n.bd.encoding == "form" && depth == 1 && prefix != "" {
		n.bd.requestNotes = append(n.bd.requestNotes, fmt.Sprintf("TODO: the form field %s is an object; toolgate sends its fields as bracketed keys (%s[key]=value). Check the backend reads that.", strings.TrimSuffix(prefix, "_"), strings.TrimSuffix(prefix, "_")))
	}
	return out
}

// nestable says whether a field is an object written out as a nested
// shape: declared properties, no free-form keys, no alternatives, not
// nullable, not one of its own ancestors, and not too deep.
func (n *nester) nestable(ref *openapi3.SchemaRef, depth int) (map[string]*openapi3.SchemaRef, []string, bool) {
	if depth >= maxNesting || ref == nil || ref.Value == nil || n.stack[ref.Value] {
		return nil, nil, false
	}
	if !plainObject(ref, 0) {
		return nil, nil, false
	}
	fields, req, why := objectShape(ref, 0)
	if why != "" {
		return nil, nil, false
	}
	return fields, req, true
}

// plainObject says a schema is an object (or a type-less allOf of
// objects, as a described $ref is written) that a set of optional members
// describes fully: no free-form keys, no bounds on the number of members
// (QueryContainer's "exactly one"), not nullable.
func plainObject(ref *openapi3.SchemaRef, depth int) bool {
	if ref == nil || ref.Value == nil || depth > 16 {
		return false
	}
	s := ref.Value
	if s.Nullable || s.AdditionalProperties.Schema != nil || (s.AdditionalProperties.Has != nil && *s.AdditionalProperties.Has) || s.MinProps > 0 || s.MaxProps != nil || s.Not != nil {
		return false
	}
	switch {
	case s.Type != nil && s.Type.Is("object"):
	case (s.Type == nil || len(*s.Type) == 0) && len(s.AllOf) > 0 && len(s.Properties) == 0:
	default:
		return false
	}
	for _, m := range s.AllOf {
		if !plainObject(m, depth+1) {
			return false
		}
	}
	return true
}

// constValue is the one value a schema allows (const, or an enum of one).
func constValue(ref *openapi3.SchemaRef) (any, bool) {
	if ref == nil || ref.Value == nil {
		return nil, false
	}
	if ref.Value.Const != nil {
		return ref.Value.Const, true
	}
	if len(ref.Value.Enum) == 1 && !ref.Value.Nullable {
		return ref.Value.Enum[0], true
	}
	return nil, false
}

// constLeaf is a constant in a request shape: {const: V}.
type constLeaf struct{ v any }

// mediaBase is a media type without parameters, in lower case.
func mediaBase(media string) string {
	return strings.ToLower(strings.TrimSpace(strings.SplitN(media, ";", 2)[0]))
}

// formMedia picks the application/x-www-form-urlencoded media type of a
// content map.
func formMedia(content openapi3.Content) (string, *openapi3.MediaType) {
	for _, k := range slices.Sorted(maps.Keys(content)) {
		if mediaBase(k) == "application/x-www-form-urlencoded" {
			return k, content[k]
		}
	}
	return "", nil
}

// unbindableHeader says why a header parameter is not an argument, or "".
func (b *builder) unbindableHeader(p *openapi3.Parameter) string {
	name := http.CanonicalHeaderKey(p.Name)
	switch name {
	case "Accept", "Content-Type", "Authorization":
		// OpenAPI says these header parameters are ignored: they are
		// described elsewhere (content, security).
		return "OpenAPI describes it elsewhere, and toolgate sets it"
	case "Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade", "Host", "Content-Length", "X-Request-Id", "Traceparent", "Tracestate", "X-Forwarded-Client-Cert":
		return "toolgate sets it"
	}
	if b.auth.setsHeader(name) {
		return "the upstream's credential sets it"
	}
	if policydoc.SecretName(p.Name) {
		return "it carries a credential, which the model must never hold; set it in the upstream's auth or headers"
	}
	if p.Schema != nil && p.Schema.Value != nil && p.Schema.Value.Type != nil && p.Schema.Value.Type.Includes("object") {
		return "it is an object, which a header cannot carry; set it in the upstream's headers"
	}
	return ""
}

// argName names an argument after a parameter or field; on a collision it
// tries the place as a prefix (query_limit, body_id), then a suffix.
func argName(names *policydoc.Namer, name, place string) string {
	if policydoc.Sanitize(name) == "" {
		return names.Take(place)
	}
	return names.Take(name, place+"_"+name)
}

// parameters merges the path item's parameters with the operation's; the
// operation's win for the same name and location.
func parameters(op *operation) []*openapi3.Parameter {
	var out []*openapi3.Parameter
	idx := map[string]int{}
	add := func(ps openapi3.Parameters) {
		for _, pr := range ps {
			if pr == nil || pr.Value == nil {
				continue
			}
			p := pr.Value
			k := p.In + "\x00" + p.Name
			if i, ok := idx[k]; ok {
				out[i] = p
				continue
			}
			idx[k] = len(out)
			out = append(out, p)
		}
	}
	add(op.item.Parameters)
	add(op.op.Parameters)
	return out
}

// paramSchema is a parameter's argument schema; the parameter's own
// description, example and deprecation win over its schema's.
func paramSchema(conv *schemaConverter, p *openapi3.Parameter) any {
	ref := p.Schema
	if ref == nil && len(p.Content) > 0 {
		keys := slices.Sorted(maps.Keys(p.Content))
		if mt := p.Content[keys[0]]; mt != nil {
			ref = mt.Schema
		}
	}
	v := conv.convert(ref)
	m, ok := v.(*omap)
	if !ok {
		m = newOmap()
		if v == false {
			m.set("not", newOmap())
		}
	}
	if d := oneLine(p.Description); d != "" {
		m.set("description", d)
	}
	if p.Example != nil {
		if _, has := m.Get("examples"); !has {
			m.set("examples", []any{p.Example})
		}
	}
	if p.Deprecated {
		m.set("deprecated", true)
	}
	return m
}

// queryStyleNote warns about query serializations toolgate does not
// produce: it sends an array as repeated parameters (form, explode) and an
// object as JSON text.
func queryStyleNote(p *openapi3.Parameter) string {
	if p.Schema == nil || p.Schema.Value == nil {
		return ""
	}
	s := p.Schema.Value
	isArray := s.Type != nil && s.Type.Includes("array")
	isObject := s.Type != nil && s.Type.Includes("object")
	style := p.Style
	if style == "" {
		style = "form"
	}
	explode := p.Explode == nil || *p.Explode
	switch {
	case isArray && style == "form" && !explode:
		return fmt.Sprintf("TODO: the query parameter %s is a comma-separated list (explode: false); toolgate sends arrays as repeated parameters (%s=a&%s=b). Check the backend accepts that.", p.Name, p.Name, p.Name)
	case isArray && (style == "spaceDelimited" || style == "pipeDelimited"):
		return fmt.Sprintf("TODO: the query parameter %s is %s; toolgate sends arrays as repeated parameters. Check the backend accepts that.", p.Name, style)
	case isObject && style == "deepObject":
		return fmt.Sprintf("TODO: the query parameter %s is a deepObject (%s[key]=value); toolgate sends an object as one JSON-encoded parameter. Bind its keys as separate arguments by hand.", p.Name, p.Name)
	case isObject:
		return fmt.Sprintf("TODO: the query parameter %s is an object; toolgate sends it as one JSON-encoded parameter, not as separate keys. Bind its keys as separate arguments by hand if the backend expects that.", p.Name)
	}
	return ""
}

func isIdempotencyHeader(name string) bool {
	switch strings.ToLower(name) {
	case "idempotency-key", "x-idempotency-key":
		return true
	}
	return false
}

// jsonMedia picks the JSON media type of a content map: application/json,
// then any +json or json type, then */*.
func jsonMedia(content openapi3.Content) (string, *openapi3.MediaType) {
	if mt := content["application/json"]; mt != nil {
		return "application/json", mt
	}
	for _, k := range slices.Sorted(maps.Keys(content)) {
		base := strings.ToLower(strings.TrimSpace(strings.SplitN(k, ";", 2)[0]))
		if base == "application/json" || strings.HasSuffix(base, "+json") || strings.HasSuffix(base, "/json") {
			return k, content[k]
		}
	}
	if mt := content["*/*"]; mt != nil {
		return "*/*", mt
	}
	return "", nil
}

// objectShape returns the top-level fields of a request body schema and
// those required, merging allOf members; why says, when not empty, why the
// body is not an object of named fields.
func objectShape(ref *openapi3.SchemaRef, depth int) (fields map[string]*openapi3.SchemaRef, required []string, why string) {
	if ref == nil || ref.Value == nil {
		return nil, nil, "without a schema"
	}
	if depth > 16 {
		return nil, nil, "nested in allOf too deeply"
	}
	s := ref.Value
	switch {
	case len(s.OneOf) > 0:
		return nil, nil, fmt.Sprintf("a oneOf of %s", describeAlternatives(s.OneOf))
	case len(s.AnyOf) > 0:
		return nil, nil, fmt.Sprintf("an anyOf of %s", describeAlternatives(s.AnyOf))
	case s.Type != nil && !s.Type.Includes("object") && len(*s.Type) > 0:
		return nil, nil, describeType(ref)
	}
	fields = map[string]*openapi3.SchemaRef{}
	for name, p := range s.Properties {
		if !readOnly(p) {
			fields[name] = p
		}
	}
	required = requestRequired(s)
	for _, member := range s.AllOf {
		f2, r2, why := objectShape(member, depth+1)
		if why != "" {
			return nil, nil, "an allOf with a member that is " + why
		}
		for k, v := range f2 {
			if _, ok := fields[k]; !ok {
				fields[k] = v
			}
		}
		required = append(required, r2...)
	}
	if len(fields) == 0 {
		if s.AdditionalProperties.Schema != nil || (s.AdditionalProperties.Has != nil && *s.AdditionalProperties.Has) {
			return nil, nil, "a map with free-form keys"
		}
		return nil, nil, "an object without declared properties"
	}
	return fields, required, ""
}

func describeAlternatives(refs openapi3.SchemaRefs) string {
	var names []string
	for _, r := range refs {
		names = append(names, describeType(r))
	}
	return strings.Join(names, " | ")
}

// describeType names a schema for a comment: its component name, or its
// type ("an array of Ticket", "a string").
func describeType(ref *openapi3.SchemaRef) string {
	if ref == nil || ref.Value == nil {
		return "any value"
	}
	if n := componentName(ref.Ref); n != "" {
		return n
	}
	s := ref.Value
	if s.Type == nil || len(*s.Type) == 0 {
		return "a schema without a type"
	}
	t := (*s.Type)[0]
	if t == "array" {
		return "an array of " + describeItems(s.Items)
	}
	if t == "object" || t == "integer" {
		return "an " + t
	}
	return "a " + t
}

// describeItems names the items of an array: "Ticket", "strings".
func describeItems(ref *openapi3.SchemaRef) string {
	if ref == nil || ref.Value == nil {
		return "any values"
	}
	if n := componentName(ref.Ref); n != "" {
		return n
	}
	if t := ref.Value.Type; t != nil && len(*t) > 0 && (*t)[0] != "array" {
		return (*t)[0] + "s"
	}
	return "items of " + describeType(ref)
}

var literalOK = regexp.MustCompile(`^[A-Za-z0-9._~!$&'()*+,;=:@%/-]*$`)

// escapeLiteral percent-encodes the parts of a path literal that toolgate
// would refuse in a path template (spaces, non-ASCII, stray %).
func escapeLiteral(s string) string {
	if literalOK.MatchString(s) {
		if _, err := url.PathUnescape(s); err == nil {
			return s
		}
	}
	segs := strings.Split(s, "/")
	for i, seg := range segs {
		segs[i] = url.PathEscape(seg)
	}
	return strings.Join(segs, "/")
}

// responseHints suggests response.data and response.empty from the first
// documented 2xx answer.
//
// With dataWritten, the draft writes response.data itself (the answer
// without its credentials), and only empty is suggested.
func (b *builder) responseHints(op *operation, dataWritten bool) []string {
	lines := b.dataHints(op, dataWritten)
	if (b.schemaKey || dataWritten) && firstJSONSchema(op) != nil {
		// The tool has a response block (its schema): the suggestion
		// goes in it, after the comment that says what it is.
		out := []string{}
		for _, l := range lines {
			if c, ok := policydoc.CodeLine(l); ok {
				if c == "response:" {
					continue
				}
				l = policydoc.Code(strings.TrimPrefix(c, "  "))
			}
			out = append(out, l)
		}
		return out
	}
	return lines
}

// firstJSONSchema is the schema of the first documented 2xx answer, when
// that answer is JSON; nil otherwise.
func firstJSONSchema(op *operation) *openapi3.SchemaRef {
	if op.op.Responses == nil {
		return nil
	}
	responses := op.op.Responses.Map()
	for _, c := range slices.Sorted(maps.Keys(responses)) {
		if !strings.HasPrefix(c, "2") || responses[c] == nil || responses[c].Value == nil {
			continue
		}
		if _, mt := jsonMedia(responses[c].Value.Content); mt != nil && mt.Schema != nil && mt.Schema.Value != nil {
			return mt.Schema
		}
		return nil
	}
	return nil
}

// responseSchema is response.schema: the JSON Schema of the first 2xx
// answer, as the document gives it (writeOnly fields left out); nil when
// that answer is not JSON or has no schema. Recursive schemas, and all
// named ones of a schema too large to inline, go to $defs.
//
// A Swagger 2.0 document cannot say that a value may be null (only the
// x-nullable extension can), and servers described by one commonly answer
// null for an optional value they do not have (a Go nil slice or pointer).
// So in a Swagger 2.0 answer, a property the schema does not require
// accepts null as well as its type; a required one only with x-nullable.
func responseSchema(op *operation, swagger2 bool) any {
	ref := firstJSONSchema(op)
	if ref == nil {
		return nil
	}
	for _, useDefs := range []bool{false, true} {
		c := newSchemaConverter(useDefs)
		c.response = true
		c.optionalNull = swagger2
		v := c.convert(ref)
		if c.overflow {
			continue
		}
		if m, ok := v.(*omap); ok {
			if defs := c.defs(); defs != nil {
				m.set("$defs", defs)
			}
		}
		return v
	}
	return nil
}

// dataHints suggests response.data and response.empty from the first
// documented 2xx answer.
func (b *builder) dataHints(op *operation, dataWritten bool) []string {
	responses := map[string]*openapi3.ResponseRef{}
	if op.op.Responses != nil {
		responses = op.op.Responses.Map()
	}
	status := ""
	for _, c := range slices.Sorted(maps.Keys(responses)) {
		if strings.HasPrefix(c, "2") && responses[c] != nil && responses[c].Value != nil {
			status = c
			break
		}
	}
	if status == "" {
		return []string{"TODO: response: the document gives no 2xx answer; by default data is the JSON body as it comes."}
	}
	r := responses[status].Value
	if len(r.Content) == 0 {
		return []string{fmt.Sprintf("The %s answer has no body, so there is no data: a read-only tool reports empty, a side-effecting one ok.", status)}
	}
	media, mt := jsonMedia(r.Content)
	if mt == nil {
		return []string{fmt.Sprintf("TODO: response: the %s answer is %s, not JSON; toolgate reports a 2xx answer it cannot parse as upstream.", status, strings.Join(slices.Sorted(maps.Keys(r.Content)), ", "))}
	}
	if mt.Schema == nil || mt.Schema.Value == nil {
		return []string{fmt.Sprintf("TODO: response: the %s answer (%s) has no schema; by default data is the body as it comes.", status, media)}
	}
	h := suggestResponse(mt.Schema)
	text := fmt.Sprintf("TODO: response: decide what the agent sees. The %s answer is %s.", status, h.shape)
	if dataWritten {
		h.data = ""
		text = fmt.Sprintf("TODO: response: keep what the agent needs of data. The %s answer is %s.", status, h.shape)
		if h.empty == "" {
			return []string{text}
		}
	}
	if h.data == "" && h.empty == "" {
		return []string{text + " By default data is the body as it comes, and null, \"\", [] or {} is empty."}
	}
	lines := []string{text + " For example:", policydoc.Code("response:")}
	if h.data != "" {
		lines = append(lines, policydoc.Code("  data: "+singleQuoted(h.data)))
	}
	if h.empty != "" {
		lines = append(lines, policydoc.Code("  empty: "+singleQuoted(h.empty)))
	}
	return lines
}

// responseHint is a suggestion for a tool's response rules; data and empty
// are CEL expressions (either may be empty).
type responseHint struct {
	shape string
	data  string
	empty string
}

// listNames are the property names that hold the items of a page.
var listNames = []string{"items", "data", "results", "records", "entries", "values", "list"}

// suggestResponse proposes rules for an answer: a page object keeps its
// list and scalar fields and is empty when the list is; an array keeps a few
// required fields of each item; another object keeps its scalar fields.
// Optional fields are read with has(), since reading a missing field fails.
func suggestResponse(ref *openapi3.SchemaRef) responseHint {
	s := ref.Value
	h := responseHint{shape: describeType(ref)}
	props, required := mergedProperties(ref, 0)
	switch {
	case s.Type != nil && s.Type.Includes("array"):
		h.shape = "an array of " + describeItems(s.Items)
		if s.Items != nil {
			ip, ir := mergedProperties(s.Items, 0)
			if fields := scalarFields(ip, ir, true, 4); len(fields) > 0 {
				h.data = "body.map(item, " + celObject(fields, "item") + ")"
			}
		}
		h.empty = "size(body) == 0"
	case len(props) > 0:
		names := slices.Sorted(maps.Keys(props))
		h.shape = fmt.Sprintf("an object {%s}", strings.Join(limitList(names, 8), ", "))
		if n := componentName(ref.Ref); n != "" {
			h.shape = fmt.Sprintf("%s {%s}", n, strings.Join(limitList(names, 8), ", "))
		}
		req := map[string]bool{}
		for _, r := range required {
			req[r] = true
		}
		for _, list := range listNames {
			p := props[list]
			if p == nil || p.Value == nil || p.Value.Type == nil || !p.Value.Type.Includes("array") {
				continue
			}
			fields := append([]field{{name: list, required: req[list]}}, scalarFields(props, required, false, 3)...)
			h.data = celObject(fields, "body")
			if hasSecret(p.Value.Items, 0, map[*openapi3.Schema]bool{}) {
				// The items hold a credential somewhere: copy only their
				// plain fields.
				ip, ir := mergedProperties(p.Value.Items, 0)
				itemFields := scalarFields(ip, ir, false, 4)
				if len(itemFields) == 0 {
					continue
				}
				get := policydoc.CELGet("body", list) + ".map(item, " + celObject(itemFields, "item") + ")"
				if !req[list] {
					get = policydoc.CELHas("body", list) + " ? " + get + " : null"
				}
				h.data = "{" + strconv.Quote(list) + ": " + get
				if rest := celObject(fields[1:], "body"); rest != "{}" {
					h.data += ", " + rest[1:]
				} else {
					h.data += "}"
				}
			}
			h.empty = "size(" + policydoc.CELGet("body", list) + ") == 0"
			if !req[list] {
				not := "!" + policydoc.CELHas("body", list)
				if strings.Contains(not, " in ") {
					not = "!(" + not[1:] + ")"
				}
				h.empty = not + " || " + h.empty
			}
			return h
		}
		if fields := scalarFields(props, required, false, 6); len(fields) > 0 {
			h.data = celObject(fields, "body")
		}
	}
	return h
}

// mergedProperties lists the properties of an object schema and of its
// allOf members, with their required names.
func mergedProperties(ref *openapi3.SchemaRef, depth int) (map[string]*openapi3.SchemaRef, []string) {
	if ref == nil || ref.Value == nil || depth > 16 {
		return nil, nil
	}
	s := ref.Value
	props := map[string]*openapi3.SchemaRef{}
	for k, v := range s.Properties {
		props[k] = v
	}
	required := append([]string(nil), s.Required...)
	for _, m := range s.AllOf {
		p2, r2 := mergedProperties(m, depth+1)
		for k, v := range p2 {
			if _, ok := props[k]; !ok {
				props[k] = v
			}
		}
		required = append(required, r2...)
	}
	return props, required
}

// hasSecret reports whether a schema has a property with a secret-like
// name, at any depth (bounded, and each schema looked at once).
func hasSecret(ref *openapi3.SchemaRef, depth int, seen map[*openapi3.Schema]bool) bool {
	if ref == nil || ref.Value == nil || depth > 16 || seen[ref.Value] {
		return false
	}
	s := ref.Value
	seen[s] = true
	for name, p := range s.Properties {
		if policydoc.SecretName(name) || hasSecret(p, depth+1, seen) {
			return true
		}
	}
	for _, list := range []openapi3.SchemaRefs{s.AllOf, s.AnyOf, s.OneOf} {
		for _, m := range list {
			if hasSecret(m, depth+1, seen) {
				return true
			}
		}
	}
	return hasSecret(s.Items, depth+1, seen) || hasSecret(s.AdditionalProperties.Schema, depth+1, seen)
}

// dataNode describes an answer's schema for policydoc.SecretFreeData:
// its properties (allOf merged; writeOnly ones are never in an answer),
// its items, whether it may be null. A schema met again inside itself is
// opaque when a secret-named property lies within it.
func dataNode(ref *openapi3.SchemaRef, depth int, stack map[*openapi3.Schema]bool) *policydoc.DataNode {
	if ref == nil || ref.Value == nil {
		return nil
	}
	s := ref.Value
	if stack[s] || depth > 16 {
		if hasSecret(ref, 0, map[*openapi3.Schema]bool{}) {
			return &policydoc.DataNode{Opaque: true}
		}
		return nil
	}
	stack[s] = true
	defer delete(stack, s)
	n := &policydoc.DataNode{Nullable: s.Nullable || (s.Type != nil && s.Type.Includes("null"))}
	if s.Type != nil && s.Type.Includes("array") {
		n.Items = dataNode(s.Items, depth+1, stack)
		return n
	}
	props, required := mergedProperties(ref, 0)
	for _, name := range slices.Sorted(maps.Keys(props)) {
		p := props[name]
		if p != nil && p.Value != nil && p.Value.WriteOnly {
			continue
		}
		n.Fields = append(n.Fields, policydoc.DataField{Name: name, Always: slices.Contains(required, name), Node: dataNode(p, depth+1, stack)})
	}
	if s.AdditionalProperties.Schema != nil && hasSecret(s.AdditionalProperties.Schema, 0, map[*openapi3.Schema]bool{}) {
		// A map whose values hold credentials: its keys are not known,
		// so it cannot be copied in part.
		n.Fields, n.Opaque = nil, true
	}
	return n
}

// field is a property a suggested expression reads.
type field struct {
	name     string
	required bool
}

// scalarFields lists up to n properties with scalar types, required ones
// first; with onlyRequired, optional ones are left out.
func scalarFields(props map[string]*openapi3.SchemaRef, required []string, onlyRequired bool, n int) []field {
	req := map[string]bool{}
	for _, r := range required {
		req[r] = true
	}
	var reqd, opt []field
	for _, name := range slices.Sorted(maps.Keys(props)) {
		p := props[name]
		if p == nil || p.Value == nil || p.Value.Type == nil {
			continue
		}
		t := p.Value.Type
		if t.Includes("array") || t.Includes("object") || policydoc.SecretName(name) {
			continue
		}
		if req[name] {
			reqd = append(reqd, field{name: name, required: true})
		} else if !onlyRequired {
			opt = append(opt, field{name: name})
		}
	}
	all := append(reqd, opt...)
	if len(all) > n {
		all = all[:n]
	}
	return all
}

// celObject writes a CEL map literal that copies fields from v; optional
// fields read as null when missing.
func celObject(fields []field, v string) string {
	parts := make([]string, 0, len(fields))
	for _, f := range fields {
		get := policydoc.CELGet(v, f.name)
		if !f.required {
			get = policydoc.CELHas(v, f.name) + " ? " + get + " : null"
		}
		parts = append(parts, strconv.Quote(f.name)+": "+get)
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

func singleQuoted(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

func limitList(ss []string, n int) []string {
	if len(ss) <= n {
		return ss
	}
	return append(append([]string(nil), ss[:n]...), "…")
}

// errorHints lists the documented error answers with the status the
// default table gives them, and shows the shape of a rule.
func (b *builder) errorHints(op *operation, sideEffect bool) []string {
	responses := map[string]*openapi3.ResponseRef{}
	if op.op.Responses != nil {
		responses = op.op.Responses.Map()
	}
	var codes []string
	for _, c := range slices.Sorted(maps.Keys(responses)) {
		if !strings.HasPrefix(c, "2") {
			codes = append(codes, c)
		}
	}
	// "default" sorts after the numbers, which is where it reads best.
	sort.SliceStable(codes, func(i, j int) bool { return codes[i] != "default" && codes[j] == "default" })
	if len(codes) == 0 {
		return []string{"TODO: errors: the document lists no error answers; add rules only where the backend departs from the default table."}
	}
	lines := []string{"TODO: errors: add rules only where the backend departs from the default table, which gives the documented error answers:"}
	for _, c := range codes {
		desc := ""
		if r := responses[c]; r != nil && r.Value != nil && r.Value.Description != nil {
			desc = truncate(oneLine(*r.Value.Description), 60)
		}
		line := "  " + c
		if desc != "" {
			line += " " + desc
		}
		lines = append(lines, policydoc.Code(line+" -> "+policydoc.DefaultStatus(c, sideEffect)))
	}
	return lines
}
