package contracts

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"

	"cel.dev/cel-go/cel"
	celast "cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/types"
)

// Request shaping: how arguments become a backend request's query, headers
// and body. A shape is a tree written in the policy whose leaves are an
// argument (the flat form `field: argument` is a tree of one level), a
// constant, or a CEL expression over `args`, and whose inner nodes are
// objects and lists. Every shape is compiled once at load: arguments are
// checked against the schema, expressions are compiled and type-checked in
// the rule environment (the same language and cost limit as the response
// side), and constants are encoded ahead of time.

// ShapeKind is what a shape node is.
type ShapeKind uint8

// The kinds of shape nodes.
const (
	ShapeArg    ShapeKind = iota // the value of an argument
	ShapeConst                   // a constant value
	ShapeExpr                    // a CEL expression over args
	ShapeObject                  // an object of named members
	ShapeList                    // a list of shapes
)

// Shape is one node of a request shaping tree as written in the policy.
type Shape struct {
	Kind    ShapeKind
	Arg     string        // ShapeArg: the argument's name
	Value   any           // ShapeConst: map[string]any, []any, string, json.Number, bool or nil
	Expr    string        // ShapeExpr: CEL over args
	Members []ShapeMember // ShapeObject, in the order written
	Items   []*Shape      // ShapeList
	// Secrets are the values of the ${VAR} references written in this
	// leaf (a constant or an expression), expanded at load. They are
	// never repeated in an error, and Binding.Secrets lists them so a tool
	// that prints requests can mask them.
	Secrets []string
}

// ShapeMember is one member of an object shape.
type ShapeMember struct {
	Name  string
	Shape *Shape
}

// Fields is the flat form of a shape: each field bound to the argument
// named, in the order of the field names.
func Fields(m map[string]string) *Shape {
	names := make([]string, 0, len(m))
	for name := range m {
		names = append(names, name)
	}
	sort.Strings(names)
	s := &Shape{Kind: ShapeObject}
	for _, name := range names {
		s.Members = append(s.Members, ShapeMember{Name: name, Shape: &Shape{Kind: ShapeArg, Arg: m[name]}})
	}
	return s
}

// Encoding is how a request body is encoded.
type Encoding string

// The body encodings.
const (
	EncodingJSON Encoding = "json"
	EncodingForm Encoding = "form" // application/x-www-form-urlencoded
)

// ContentType is the media type of a body in this encoding.
func (e Encoding) ContentType() string {
	if e == EncodingForm {
		return "application/x-www-form-urlencoded"
	}
	return "application/json"
}

// node is a compiled shape.
type node struct {
	kind    ShapeKind
	arg     string
	value   any    // ShapeConst
	raw     []byte // ShapeConst: the value as compact JSON
	expr    *shapeExpr
	members []member
	items   []*node
}

type member struct {
	name string
	key  []byte // the name as a JSON string, then ':'
	node *node
}

// shapeExpr is a compiled expression leaf.
type shapeExpr struct {
	prg cel.Program
	// pointer names the first argument the expression reads, so a call
	// whose arguments make it fail is bad_args about that argument.
	pointer string
	// noMap: the value is sent where an object has no encoding (a header).
	noMap bool
	out   *cel.Type // the type the checker found
}

// formShape is a query or form body: its pairs in the order written.
// Nested objects are flattened at load into bracketed keys
// (`a: {b: x}` is the key "a[b]"); a written list repeats its key.
type formShape struct {
	fields []formField
	// whole, when set, is a leaf whose value (an object) gives every pair:
	// `query: {expr: …}` or `body: argument`.
	whole *node
}

type formField struct {
	key  string // as sent, unescaped
	esc  []byte // the key query-escaped, then '='
	leaf *node  // ShapeArg, ShapeConst or ShapeExpr
	// readable: transparent mode can read the argument back (a leaf of
	// the written objects, not an item of a written list).
	readable bool
}

// headerField is one header the binding sets.
type headerField struct {
	name  string // canonical
	leaf  *node  // ShapeArg or ShapeExpr; constants are in the static header
	items []*node
}

// shapeCompiler compiles the shapes of one binding.
type shapeCompiler struct {
	env    *RuleEnv
	schema *Schema
	// read is every argument the binding reads; readable, those that
	// transparent mode can read back from a legacy request, and
	// firstRead, where each argument is first read otherwise.
	read      map[string]bool
	readable  map[string]bool
	firstRead map[string]string
	secrets   []string
	exprs     bool
}

func joinField(base, name string) string { return base + "." + name }

func (sc *shapeCompiler) use(arg, field string, readable bool) {
	sc.read[arg] = true
	if readable {
		sc.readable[arg] = true
	} else if _, ok := sc.firstRead[arg]; !ok {
		sc.firstRead[arg] = field
	}
}

func (sc *shapeCompiler) argLeaf(s *Shape, field string, readable bool) (*node, error) {
	if s.Arg == "" {
		return nil, &BindError{Field: field, Msg: "empty argument name"}
	}
	if !sc.schema.hasProperty(s.Arg) {
		return nil, &BindError{Field: field, Msg: fmt.Sprintf("%q is not an argument (write a constant as {const: …})", s.Arg)}
	}
	sc.use(s.Arg, field, readable)
	return &node{kind: ShapeArg, arg: s.Arg}, nil
}

func (sc *shapeCompiler) constLeaf(s *Shape, field string) (*node, error) {
	raw, err := appendJSONValue(nil, s.Value)
	if err != nil || !json.Valid(raw) {
		return nil, &BindError{Field: field + ".const", Msg: "is not a JSON value"}
	}
	sc.secrets = append(sc.secrets, s.Secrets...)
	return &node{kind: ShapeConst, value: s.Value, raw: raw}, nil
}

// jsonNode compiles a JSON body shape. Every argument leaf of a JSON body
// can be read back, by its path of members and list positions.
func (sc *shapeCompiler) jsonNode(s *Shape, field string, depth int) (*node, error) {
	if s == nil {
		return nil, &BindError{Field: field, Msg: "must not be empty"}
	}
	if depth > maxShapeDepth {
		return nil, &BindError{Field: field, Msg: "nested too deep"}
	}
	switch s.Kind {
	case ShapeArg, ShapeConst, ShapeExpr:
		return sc.formLeaf(s, field, true)
	case ShapeObject:
		n := &node{kind: ShapeObject, members: make([]member, 0, len(s.Members))}
		seen := make(map[string]bool, len(s.Members))
		for _, m := range s.Members {
			mf := joinField(field, m.Name)
			if seen[m.Name] {
				return nil, &BindError{Field: mf, Msg: "duplicate member"}
			}
			seen[m.Name] = true
			child, err := sc.jsonNode(m.Shape, mf, depth+1)
			if err != nil {
				return nil, err
			}
			key := append(AppendJSONString(nil, m.Name), ':')
			n.members = append(n.members, member{name: m.Name, key: key, node: child})
		}
		return n, nil
	case ShapeList:
		n := &node{kind: ShapeList, items: make([]*node, 0, len(s.Items))}
		for i, item := range s.Items {
			child, err := sc.jsonNode(item, fmt.Sprintf("%s[%d]", field, i), depth+1)
			if err != nil {
				return nil, err
			}
			n.items = append(n.items, child)
		}
		return n, nil
	}
	return nil, &BindError{Field: field, Msg: "unknown shape"}
}

// maxShapeDepth bounds the nesting of a written shape.
const maxShapeDepth = 64

// form compiles a query or form body shape.
func (sc *shapeCompiler) form(s *Shape, field string) (*formShape, error) {
	f := &formShape{}
	switch s.Kind {
	case ShapeObject:
		if err := sc.formFields(f, s, field, "", 0); err != nil {
			return nil, err
		}
	case ShapeArg:
		leaf, err := sc.argLeaf(s, field, false)
		if err != nil {
			return nil, err
		}
		if types := schemaTypes(sc.schema.propertySchema(s.Arg)); len(types) > 0 && !contains(types, "object") {
			return nil, &BindError{Field: field, Msg: fmt.Sprintf("argument %s is not an object, so it cannot give every pair", s.Arg)}
		}
		f.whole = leaf
	case ShapeExpr:
		x, err := sc.expr(s, field+".expr", false)
		if err != nil {
			return nil, err
		}
		if x.out != nil && x.out.Kind() != types.MapKind && x.out.Kind() != types.DynKind {
			return nil, &BindError{Field: field + ".expr", Line: 1, Column: 1, Msg: fmt.Sprintf("must evaluate to a map of name to value, not %s", x.out)}
		}
		f.whole = &node{kind: ShapeExpr, expr: x}
	case ShapeConst:
		if _, ok := s.Value.(map[string]any); !ok {
			return nil, &BindError{Field: field + ".const", Msg: "must be a mapping of name to value"}
		}
		leaf, err := sc.constLeaf(s, field)
		if err != nil {
			return nil, err
		}
		f.whole = leaf
	default:
		return nil, &BindError{Field: field, Msg: "must be a mapping of name to value"}
	}
	return f, nil
}

// formFields flattens a written object into pairs: a member of a nested
// object is keyed "parent[member]", and each item of a written list
// repeats the list's key.
func (sc *shapeCompiler) formFields(f *formShape, s *Shape, field, prefix string, depth int) error {
	if depth > maxShapeDepth {
		return &BindError{Field: field, Msg: "nested too deep"}
	}
	seen := make(map[string]bool, len(s.Members))
	for _, m := range s.Members {
		mf := joinField(field, m.Name)
		if m.Name == "" {
			return &BindError{Field: field, Msg: "empty parameter name"}
		}
		if seen[m.Name] {
			return &BindError{Field: mf, Msg: "duplicate member"}
		}
		seen[m.Name] = true
		key := m.Name
		if prefix != "" {
			key = prefix + "[" + m.Name + "]"
		}
		if m.Shape == nil {
			return &BindError{Field: mf, Msg: "must not be empty"}
		}
		switch m.Shape.Kind {
		case ShapeObject:
			if err := sc.formFields(f, m.Shape, mf, key, depth+1); err != nil {
				return err
			}
		case ShapeList:
			for i, item := range m.Shape.Items {
				itf := fmt.Sprintf("%s[%d]", mf, i)
				if item == nil || item.Kind == ShapeObject || item.Kind == ShapeList {
					return &BindError{Field: itf, Msg: `a list here holds values, not objects or lists; spell nested keys out ("items[0][name]": argument)`}
				}
				leaf, err := sc.formLeaf(item, itf, false)
				if err != nil {
					return err
				}
				f.fields = append(f.fields, newFormField(key, leaf, false))
			}
		default:
			leaf, err := sc.formLeaf(m.Shape, mf, true)
			if err != nil {
				return err
			}
			f.fields = append(f.fields, newFormField(key, leaf, true))
		}
	}
	return nil
}

func newFormField(key string, leaf *node, readable bool) formField {
	esc := append(appendQueryEscaped(nil, key), '=')
	return formField{key: key, esc: esc, leaf: leaf, readable: readable && leaf.kind == ShapeArg}
}

// formLeaf compiles a leaf of any body: an argument, a constant or an
// expression.
func (sc *shapeCompiler) formLeaf(s *Shape, field string, readable bool) (*node, error) {
	switch s.Kind {
	case ShapeArg:
		return sc.argLeaf(s, field, readable)
	case ShapeConst:
		return sc.constLeaf(s, field)
	case ShapeExpr:
		x, err := sc.expr(s, field+".expr", false)
		if err != nil {
			return nil, err
		}
		return &node{kind: ShapeExpr, expr: x}, nil
	}
	return nil, &BindError{Field: field, Msg: "unknown shape"}
}

// Headers a binding may not set. Hop-by-hop headers belong to one
// connection, and the framing headers to the HTTP client; the rest
// toolgate sets itself: the call id, the trace context, and the caller's
// identity, which never reaches a backend.
var reservedHeaders = map[string]string{
	"Connection":              "is a hop-by-hop header",
	"Keep-Alive":              "is a hop-by-hop header",
	"Proxy-Connection":        "is a hop-by-hop header",
	"Proxy-Authenticate":      "is a hop-by-hop header",
	"Proxy-Authorization":     "is a hop-by-hop header",
	"Te":                      "is a hop-by-hop header",
	"Trailer":                 "is a hop-by-hop header",
	"Transfer-Encoding":       "is a hop-by-hop header",
	"Upgrade":                 "is a hop-by-hop header",
	"Host":                    "is set from the upstream's url",
	"Content-Length":          "is set from the body",
	"X-Request-Id":            "carries the call id; toolgate sets it",
	"Traceparent":             "carries the trace context; toolgate sets it",
	"Tracestate":              "carries the trace context; toolgate sets it",
	"X-Forwarded-Client-Cert": "carries the caller's identity, which never reaches a backend",
}

// validHeaderName reports whether s is an RFC 9110 token.
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' {
			continue
		}
		if !strings.ContainsRune("!#$%&'*+-.^_`|~", rune(c)) {
			return false
		}
	}
	return true
}

// validHeaderValue reports whether s can be sent as a header value as it
// is: no control character but a tab, so no CR or LF can end the line.
func validHeaderValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// headers compiles request.headers: constants go into static, once; the
// rest become fields evaluated per call.
func (sc *shapeCompiler) headers(s *Shape, reserved map[string]string) ([]headerField, http.Header, error) {
	if s.Kind != ShapeObject {
		return nil, nil, &BindError{Field: "headers", Msg: "must be a mapping of header name to value"}
	}
	var fields []headerField
	static := http.Header{}
	seen := map[string]bool{}
	for _, m := range s.Members {
		field := joinField("headers", m.Name)
		if !validHeaderName(m.Name) {
			return nil, nil, &BindError{Field: field + "#key", Msg: fmt.Sprintf("%q is not a valid header name", m.Name)}
		}
		name := http.CanonicalHeaderKey(m.Name)
		why, ok := reservedHeaders[name]
		if !ok {
			why, ok = reserved[name]
		}
		if ok {
			return nil, nil, &BindError{Field: field + "#key", Msg: "cannot be bound: " + m.Name + " " + why}
		}
		if seen[name] {
			return nil, nil, &BindError{Field: field + "#key", Msg: "is bound twice (header names are case-insensitive)"}
		}
		seen[name] = true
		if m.Shape == nil {
			return nil, nil, &BindError{Field: field, Msg: "must not be empty"}
		}
		items := []*Shape{m.Shape}
		list := m.Shape.Kind == ShapeList
		if list {
			items = m.Shape.Items
		}
		hf := headerField{name: name}
		for i, item := range items {
			itf := field
			if list {
				itf = fmt.Sprintf("%s[%d]", field, i)
			}
			if item == nil || item.Kind == ShapeObject || item.Kind == ShapeList {
				return nil, nil, &BindError{Field: itf, Msg: "a header value is a string, number or boolean, or a list of them"}
			}
			switch item.Kind {
			case ShapeConst:
				vals, ok := headerValues(item.Value)
				if !ok {
					return nil, nil, &BindError{Field: itf + ".const", Msg: "a header value is a string, number or boolean, or a list of them"}
				}
				for _, v := range vals {
					if !validHeaderValue(v) {
						// The value is not repeated: it may be a secret.
						return nil, nil, &BindError{Field: itf + ".const", Msg: "a header value must be one line without control characters"}
					}
				}
				sc.secrets = append(sc.secrets, item.Secrets...)
				static[name] = append(static[name], vals...)
				continue
			case ShapeArg:
				leaf, err := sc.argLeaf(item, itf, !list)
				if err != nil {
					return nil, nil, err
				}
				if types := schemaTypes(sc.schema.propertySchema(item.Arg)); len(types) > 0 && !slices.ContainsFunc(types, headerType) {
					return nil, nil, &BindError{Field: itf, Msg: fmt.Sprintf("argument %s is %s, which a header cannot carry", item.Arg, typeList(types))}
				}
				hf.items = append(hf.items, leaf)
			case ShapeExpr:
				x, err := sc.expr(item, itf+".expr", true)
				if err != nil {
					return nil, nil, err
				}
				hf.items = append(hf.items, &node{kind: ShapeExpr, expr: x})
			}
		}
		if len(hf.items) > 0 {
			if _, mixed := static[name]; mixed {
				return nil, nil, &BindError{Field: field, Msg: "a header is either constant or bound per call, not both"}
			}
			if !list {
				hf.leaf, hf.items = hf.items[0], nil
			}
			fields = append(fields, hf)
		}
	}
	return fields, static, nil
}

// headerType reports whether a header can carry a value of a JSON Schema
// type (a list as one line per item).
func headerType(t string) bool { return t != "object" && t != "null" }

// typeList spells JSON Schema types for a message: "an object or null".
func typeList(types []string) string {
	out := make([]string, len(types))
	for i, t := range types {
		out[i] = typeEN(t)
	}
	return strings.Join(out, " or ")
}

// headerValues spells a header value: a scalar, or each scalar of a list.
// ok is false for objects, nested lists and null.
func headerValues(v any) ([]string, bool) {
	if list, ok := v.([]any); ok {
		out := make([]string, 0, len(list))
		for _, e := range list {
			s, ok := scalarString(e)
			if !ok {
				return nil, false
			}
			out = append(out, s)
		}
		return out, true
	}
	s, ok := scalarString(v)
	if !ok {
		return nil, false
	}
	return []string{s}, true
}

// answerVariables are the rule environment's variables a request shaping
// expression cannot read: they describe the backend's answer, which does
// not exist yet.
var answerVariables = map[string]bool{"status": true, "headers": true, "body": true, "text": true}

// expr compiles an expression leaf in the rule environment and checks
// every argument it names against the schema.
func (sc *shapeCompiler) expr(s *Shape, field string, noMap bool) (*shapeExpr, error) {
	if sc.env == nil {
		return nil, &BindError{Field: field, Msg: "expressions need a rule environment"}
	}
	if strings.TrimSpace(s.Expr) == "" {
		return nil, &BindError{Field: field, Msg: "must not be empty"}
	}
	ast, iss := sc.env.env.Compile(s.Expr)
	if iss != nil && iss.Err() != nil {
		first := iss.Errors()[0]
		e := &BindError{Field: field, Msg: maskSecrets(strings.TrimPrefix(first.Message, "ERROR: "), s.Secrets)}
		if first.Location != nil {
			e.Line, e.Column = first.Location.Line(), first.Location.Column()+1
		}
		return nil, e
	}
	native := ast.NativeRep()
	info := native.SourceInfo()
	at := func(id int64) (int, int) {
		loc := info.GetStartLocation(id)
		return loc.Line(), loc.Column() + 1
	}
	ids := make([]int64, 0, len(native.ReferenceMap()))
	for id := range native.ReferenceMap() {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, id := range ids {
		if name := native.ReferenceMap()[id].Name; answerVariables[name] {
			line, col := at(id)
			return nil, &BindError{Field: field, Line: line, Column: col,
				Msg: fmt.Sprintf("%s is part of the backend's answer; a request is shaped from args only", name)}
		}
	}
	var bad *BindError
	var first string
	check := func(operand celast.Expr, name string) {
		if bad != nil || operand.Kind() != celast.IdentKind || operand.AsIdent() != "args" {
			return
		}
		if !sc.schema.hasProperty(name) {
			line, col := at(operand.ID())
			bad = &BindError{Field: field, Line: line, Column: col, Msg: fmt.Sprintf("args.%s is not an argument", name)}
			return
		}
		if first == "" {
			first = name
		}
		sc.use(name, field, false)
	}
	celast.PreOrderVisit(native.Expr(), celast.NewExprVisitor(func(e celast.Expr) {
		switch e.Kind() {
		case celast.SelectKind:
			sel := e.AsSelect()
			check(sel.Operand(), sel.FieldName())
		case celast.CallKind:
			call := e.AsCall()
			if call.FunctionName() != "_[_]" || len(call.Args()) != 2 || call.Args()[1].Kind() != celast.LiteralKind {
				return
			}
			if key, ok := call.Args()[1].AsLiteral().Value().(string); ok {
				check(call.Args()[0], key)
			}
		}
	}))
	if bad != nil {
		return nil, bad
	}
	out := ast.OutputType()
	if noMap && out.Kind() == types.MapKind {
		return nil, &BindError{Field: field, Line: 1, Column: 1,
			Msg: fmt.Sprintf("must evaluate to a string, number, bool or list, not %s", out)}
	}
	prg, err := sc.env.env.Program(ast, cel.EvalOptions(cel.OptOptimize), cel.CostLimit(sc.env.costLimit))
	if err != nil {
		return nil, &BindError{Field: field, Msg: maskSecrets(err.Error(), s.Secrets)}
	}
	sc.exprs = true
	sc.secrets = append(sc.secrets, s.Secrets...)
	x := &shapeExpr{prg: prg, noMap: noMap, out: out}
	if first != "" {
		x.pointer = "/" + escapePointer(first)
	}
	return x, nil
}

// maskSecrets replaces every secret in msg.
func maskSecrets(msg string, secrets []string) string {
	for _, s := range secrets {
		if s != "" {
			msg = strings.ReplaceAll(msg, s, "***")
		}
	}
	return msg
}
