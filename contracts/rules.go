package contracts

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"cel.dev/cel-go/cel"
	celast "cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
	"cel.dev/cel-go/interpreter"

	"github.com/toolgate/toolgate/internal/jsontape"
)

// RulesSpec holds a tool's response rules as written in the policy: CEL
// expressions over `status` (int), `headers` (map of lower-case header name
// to its first value), `body` (the parsed JSON answer, null when absent or
// not JSON), `text` (the answer as text, whatever its type) and `args` (the
// call's arguments).
type RulesSpec struct {
	Data   string          // shapes envelope data; default: the body as is
	Empty  string          // bool: the 2xx answer found nothing; default: data is null, "", [] or {} (read-only tools)
	Errors []ErrorRuleSpec // first match wins, before the default table
	// ErrorDetail (string) is the backend's own words for a failure, for
	// the message: evaluated when the outcome is not a success.
	ErrorDetail string
	// Schema is a JSON Schema (a decoded document) of the 2xx JSON answer,
	// checked on every such answer and only counted and logged.
	Schema any
}

// ErrorRuleSpec classifies answers the default table would get wrong, such
// as a 200 carrying an error code.
type ErrorRuleSpec struct {
	When       string
	Status     Status
	Retryable  *bool       // default: the status's default for this answer
	SideEffect *SideEffect // default: none for a 2xx answer, else the table's value
}

// Rules are compiled, type-checked response rules.
type Rules struct {
	data       *program
	dataOrder  []string      // key order of a top-level map literal in Data
	dataDirect []directEntry // that literal without the interpreter, when it can be
	empty      *program
	detail     *program
	errors     []errorRule
	schema     *responseSchema
	uses       usage
}

// program is a compiled rule. Every evaluation runs under the cost limit;
// only rules with comprehensions can run long, and those also evaluate
// under the call's context (the rest without the cost of a cancellable
// evaluation context, which only comprehensions check).
type program struct {
	prg    cel.Program
	loops  bool
	direct directExpr // the common shapes without the interpreter; nil for others
}

type errorRule struct {
	prg        program
	status     Status
	retryable  *bool
	sideEffect *SideEffect
}

// usage records which variables any rule reads, so a call only prepares
// what the rules need (no header map when no rule reads headers).
type usage struct {
	headers, body, args bool
}

// ruleError is a rule that does not compile. Field is "data", "empty",
// "error_detail", "errors[i].when" or "schema" (with the faulty keyword's
// path after it); Line and Column are 1-based within the expression.
type ruleError struct {
	Field  string
	Line   int
	Column int
	Msg    string
}

func (e *ruleError) Error() string { return e.Field + ": " + e.Msg }

// RuleEnv is the CEL environment rules are compiled in. Build it once per
// policy load and share it between tools: an expression, a message
// template or an argument schema that several tools spell alike is
// compiled once and shared (compiled programs, templates and schemas are
// read-only), so a policy of many similar tools holds one copy of each.
type RuleEnv struct {
	env       *cel.Env
	costLimit uint64

	mu        sync.Mutex
	programs  map[programKey]compiledProgram
	templates map[templateKey]*messageTemplate
	// schemas are the argument schemas compiled so far, by the SHA-256 of
	// their JSON.
	schemas map[[sha256.Size]byte]*Schema
}

// programKey is an expression and the type it must evaluate to.
type programKey struct {
	expr string
	want *cel.Type
}

type compiledProgram struct {
	prg *program
	ast *cel.Ast
}

// RuleOptions tune the rule environment. Zero values are the defaults.
type RuleOptions struct {
	// CostLimit bounds one evaluation of one rule, in CEL's cost units
	// (about one per step: a comprehension over n elements costs a few n).
	// Zero means DefaultRuleCostLimit.
	CostLimit uint64
}

// DefaultRuleCostLimit is the cost limit of one rule evaluation: a linear
// pass over some 150 000 list elements, or a few tens of milliseconds of
// CPU. An evaluation that goes beyond it fails, and the answer is
// unreadable (see MatchError).
const DefaultRuleCostLimit = 1_000_000

// NewRuleEnv creates the rule environment.
func NewRuleEnv(opts RuleOptions) (*RuleEnv, error) {
	if opts.CostLimit == 0 {
		opts.CostLimit = DefaultRuleCostLimit
	}
	env, err := cel.NewEnv(append([]cel.EnvOption{
		cel.Variable("status", cel.IntType),
		cel.Variable("headers", cel.MapType(cel.StringType, cel.StringType)),
		cel.Variable("body", cel.DynType),
		cel.Variable("text", cel.StringType),
		cel.Variable("args", cel.MapType(cel.StringType, cel.DynType)),
		// Backend numbers are ints or doubles by their spelling; rules
		// compare them with either.
		cel.CrossTypeNumericComparisons(true),
	}, extLibraries(opts.CostLimit)...)...)
	if err == nil {
		env, err = guardExtFunctions(env, opts.CostLimit)
	}
	if err != nil {
		return nil, fmt.Errorf("cel environment: %w", err)
	}
	return &RuleEnv{env: env, costLimit: opts.CostLimit, programs: map[programKey]compiledProgram{}, templates: map[templateKey]*messageTemplate{}, schemas: map[[sha256.Size]byte]*Schema{}}, nil
}

// ruleInterruptEvery is how many comprehension steps run between checks of
// the call's context. Rules are written by the operator but run over
// backend answers, which may be huge: every evaluation through the
// interpreter runs under the cost limit, and one with a comprehension also
// under the call's deadline, so a runaway rule ends in an error (the answer
// is unreadable) instead of burning CPU. Expressions without a
// comprehension have no loop to interrupt: the cost limit bounds them.
const ruleInterruptEvery = 100

// compileRules compiles and type-checks spec. The error, when not nil, is a
// *ruleError.
func compileRules(re *RuleEnv, spec RulesSpec) (*Rules, error) {
	r := &Rules{}
	var err error
	if spec.Data != "" {
		var ast *cel.Ast
		if r.data, ast, err = re.compile("data", spec.Data, nil); err != nil {
			return nil, err
		}
		r.dataOrder = mapLiteralOrder(ast)
		if r.dataOrder != nil {
			r.dataDirect = compileDirectMap(ast)
		}
		r.uses.add(ast)
	}
	if spec.Empty != "" {
		var ast *cel.Ast
		if r.empty, ast, err = re.compile("empty", spec.Empty, cel.BoolType); err != nil {
			return nil, err
		}
		r.uses.add(ast)
	}
	if spec.ErrorDetail != "" {
		var ast *cel.Ast
		if r.detail, ast, err = re.compile("error_detail", spec.ErrorDetail, cel.StringType); err != nil {
			return nil, err
		}
		r.uses.add(ast)
	}
	if spec.Schema != nil {
		if r.schema, err = compileResponseSchema(spec.Schema); err != nil {
			return nil, err
		}
	}
	for i, e := range spec.Errors {
		field := fmt.Sprintf("errors[%d].when", i)
		if e.When == "" {
			return nil, &ruleError{Field: field, Msg: "an error rule needs a when expression"}
		}
		if _, ok := parseStatus(string(e.Status)); !ok {
			return nil, &ruleError{Field: fmt.Sprintf("errors[%d].status", i), Msg: fmt.Sprintf("%q is not a status", e.Status)}
		}
		prg, ast, err := re.compile(field, e.When, cel.BoolType)
		if err != nil {
			return nil, err
		}
		r.uses.add(ast)
		r.errors = append(r.errors, errorRule{prg: *prg, status: e.Status, retryable: e.Retryable, sideEffect: e.SideEffect})
	}
	return r, nil
}

func (re *RuleEnv) compile(field, expr string, want *cel.Type) (*program, *cel.Ast, error) {
	key := programKey{expr, want}
	re.mu.Lock()
	c, ok := re.programs[key]
	re.mu.Unlock()
	if ok {
		return c.prg, c.ast, nil
	}
	prg, ast, err := re.compileNew(field, expr, want)
	if err == nil {
		re.mu.Lock()
		re.programs[key] = compiledProgram{prg, ast}
		re.mu.Unlock()
	}
	return prg, ast, err
}

// compileNew compiles and type-checks an expression; errors name field.
func (re *RuleEnv) compileNew(field, expr string, want *cel.Type) (*program, *cel.Ast, error) {
	ast, iss := re.env.Compile(expr)
	if iss != nil && iss.Err() != nil {
		first := iss.Errors()[0]
		e := &ruleError{Field: field, Msg: strings.TrimPrefix(first.Message, "ERROR: ")}
		if first.Location != nil {
			e.Line, e.Column = first.Location.Line(), first.Location.Column()+1
		}
		return nil, nil, e
	}
	if want != nil && !ast.OutputType().IsExactType(want) && !ast.OutputType().IsExactType(cel.DynType) {
		return nil, nil, &ruleError{Field: field, Line: 1, Column: 1,
			Msg: fmt.Sprintf("must evaluate to %s, not %s", want, ast.OutputType())}
	}
	popts := []cel.ProgramOption{cel.EvalOptions(cel.OptOptimize),
		cel.InterruptCheckFrequency(ruleInterruptEvery), cel.CostLimit(re.costLimit)}
	if want == nil {
		// response.data: its map literals keep the key order written.
		if keep := keepMapLiteralOrder(mapLiteralOrders(ast.NativeRep().Expr())); keep != nil {
			popts = append(popts, keep)
		}
	}
	prg, err := re.env.Program(ast, popts...)
	if err != nil {
		return nil, nil, &ruleError{Field: field, Msg: err.Error()}
	}
	loops := false
	celast.PreOrderVisit(ast.NativeRep().Expr(), celast.NewExprVisitor(func(e celast.Expr) {
		if e.Kind() == celast.ComprehensionKind {
			loops = true
		}
	}))
	p := &program{prg: prg, loops: loops}
	if ast.OutputType().IsExactType(cel.BoolType) {
		// Only a bool is ever taken from the direct path (the data map
		// literal has its own, compileDirectMap).
		p.direct = compileDirect(ast.NativeRep().Expr())
	}
	return p, ast, nil
}

func (u *usage) add(ast *cel.Ast) {
	for _, ref := range ast.NativeRep().ReferenceMap() {
		u.headers = u.headers || ref.Name == "headers"
		u.body = u.body || ref.Name == "body"
		u.args = u.args || ref.Name == "args"
	}
}

// mapLiteralOrder returns the keys of a top-level map literal with constant
// string keys, in the order written, so data keeps the operator's key order.
func mapLiteralOrder(ast *cel.Ast) []string {
	e := ast.NativeRep().Expr()
	if e.Kind() != celast.MapKind {
		return nil
	}
	var keys []string
	for _, entry := range e.AsMap().Entries() {
		k := entry.AsMapEntry().Key()
		if k.Kind() != celast.LiteralKind {
			return nil
		}
		s, ok := k.AsLiteral().(types.String)
		if !ok {
			return nil
		}
		keys = append(keys, string(s))
	}
	return keys
}

// NeedsBody reports whether any rule reads the parsed body.
func (r *Rules) NeedsBody() bool { return r != nil && r.uses.body }

// NeedsHeaders reports whether any rule reads the answer's headers.
func (r *Rules) NeedsHeaders() bool { return r != nil && r.uses.headers }

// RuleInput is what rules see of one backend answer. The rules run on one
// input share what they resolved (the body's view, the lower-cased
// headers), so an input serves one answer: make a new one for another.
type RuleInput struct {
	// Ctx bounds evaluation (the call's deadline); nil means no bound.
	Ctx    context.Context
	Status int
	Header http.Header
	Body   *Body          // the parsed answer; nil when absent or not JSON
	Text   []byte         // the answer's bytes, for `text`; not changed while rules run
	Args   map[string]any // validated arguments

	act activation // shared by every rule run on this input
}

// Body is a backend answer parsed once for the rules and the envelope.
type Body struct {
	tape jsontape.Tape
}

// ParseBody parses a JSON answer. It fails on anything that is not one
// JSON value (surrounding whitespace allowed). The Body reads raw in place:
// raw must not change until the Body is released.
func ParseBody(raw []byte) (*Body, error) {
	t, err := jsontape.Parse(raw)
	if err != nil {
		return nil, err
	}
	return &Body{tape: t}, nil
}

// Release hands the parsed answer's tape back for reuse once every rule
// has run on it: nothing read from it through the rules (their views of
// the body) may be used after, and any use panics. The data, members and
// messages made from it are copies and stay valid. Releasing twice, or a
// nil Body, does nothing.
func (b *Body) Release() {
	if b != nil {
		b.tape.Release()
	}
}

// AppendCompact appends the whole answer as compact, valid-UTF-8 JSON in
// the backend's key order.
func (b *Body) AppendCompact(dst []byte) []byte { return b.tape.Root().AppendCompact(dst) }

// activation resolves rule variables lazily, so an unused header map is
// never built, and once per answer: every rule run on the same input
// shares what was resolved.
type activation struct {
	in      *RuleInput
	headers map[string]string
	body    any   // the view of bodyOf
	bodyOf  *Body // the input's Body when body was resolved
	text    *string
}

// activation returns the input's activation.
func (in *RuleInput) activation() *activation {
	in.act.in = in
	return &in.act
}

func (a *activation) ResolveName(name string) (any, bool) {
	switch name {
	case "status":
		return int64(a.in.Status), true
	case "body":
		if a.in.Body == nil {
			return types.NullValue, true
		}
		if a.body == nil || a.bodyOf != a.in.Body {
			a.body, a.bodyOf = celValue(a.in.Body.tape.Root()), a.in.Body
		}
		return a.body, true
	case "text":
		if a.text == nil {
			t := AnswerText(a.in.Text)
			a.text = &t
		}
		return *a.text, true
	case "args":
		if a.in.Args == nil {
			return map[string]any{}, true
		}
		return normalizeNumbers(a.in.Args), true
	case "headers":
		if a.headers == nil {
			a.headers = make(map[string]string, len(a.in.Header))
			for k, v := range a.in.Header {
				if len(v) > 0 {
					a.headers[strings.ToLower(k)] = v[0]
				}
			}
		}
		return a.headers, true
	}
	return nil, false
}

func (a *activation) Parent() interpreter.Activation { return nil }

func eval(p *program, in *RuleInput, act *activation) (ref.Val, error) {
	if p.direct != nil {
		if v, ok := p.direct(act); ok && v.kind == dBool {
			return types.Bool(v.b), nil
		}
	}
	if p.loops && in.Ctx != nil {
		out, _, err := p.prg.ContextEval(in.Ctx, act)
		return out, err
	}
	out, _, err := p.prg.Eval(act)
	return out, err
}

// MatchedRule is the classification an error rule chose.
type MatchedRule struct {
	Status     Status
	Retryable  *bool
	SideEffect *SideEffect
}

// MatchError runs the error rules in order and returns the first match.
//
// A rule that fails only because what it reads is absent from this answer
// does not match: a missing key (body.code on a body without code, or on
// a body that is not an object, or no body at all), an index past the end
// of a list, a field of a list. Rules describe error shapes, and an answer
// of another shape is not that error; `body.code == "X"` over {} is false,
// as `has(body.code) && body.code == "X"` is.
//
// Any other failure (the cost limit, the call's deadline, a value of the
// wrong type for an operator, a division by zero, a number out of range)
// is returned as an *EvalError, and no later rule is
// tried: whether the failing rule would have matched is unknown, so the
// answer cannot be read (see Unreadable), never "no match".
func (r *Rules) MatchError(in *RuleInput) (MatchedRule, bool, error) {
	if r == nil || len(r.errors) == 0 {
		return MatchedRule{}, false, nil
	}
	act := in.activation()
	for i, rule := range r.errors {
		out, err := eval(&rule.prg, in, act)
		if err != nil {
			if rule.prg.loops && in.Ctx != nil && in.Ctx.Err() != nil {
				// Past the deadline, the error CEL kept of two (a || b)
				// may be an absent field: the interrupt decides.
				return MatchedRule{}, false, &EvalError{Expr: fmt.Sprintf("errors[%d].when", i), Err: fmt.Errorf("interrupted: %w", context.Cause(in.Ctx))}
			}
			if absentPath(err) {
				continue
			}
			return MatchedRule{}, false, &EvalError{Expr: fmt.Sprintf("errors[%d].when", i), Err: err}
		}
		b, ok := out.(types.Bool)
		if !ok {
			return MatchedRule{}, false, &EvalError{Expr: fmt.Sprintf("errors[%d].when", i), Err: errors.New("not a bool")}
		}
		if b {
			return MatchedRule{Status: rule.status, Retryable: rule.retryable, SideEffect: rule.sideEffect}, true, nil
		}
	}
	return MatchedRule{}, false, nil
}

// absentPath reports whether a rule's evaluation error says only that the
// path it reads is not in the answer: a missing key, an index past the end
// of a list, or a key looked up in a list. CEL has no error codes; these
// are its messages and those of the body's views (celjson.go), pinned by
// TestErrorRulesTellAbsentFieldsFromUnreadableAnswers.
func absentPath(err error) bool {
	var e *types.Err
	if !errors.As(err, &e) {
		return false // the cost limit and interrupts are not CEL values
	}
	msg := e.Error()
	for _, prefix := range []string{"no such key: ", "index out of bounds: ", "index out of range: ", "unsupported index type 'string' in list"} {
		if strings.HasPrefix(msg, prefix) {
			return true
		}
	}
	return false
}

// errRuleEval is what every *EvalError is: a response expression that
// failed on an answer.
var errRuleEval = errors.New("response rule failed")

// EvalError is a response expression that failed on one answer. Expr names
// it as the policy spells it ("response.data", "response.empty",
// "response.error_detail", "errors[2].when"); Err is CEL's error, which
// names operators, types and keys but never the answer's values.
type EvalError struct {
	Expr string
	Err  error
}

func (e *EvalError) Error() string { return errRuleEval.Error() + ": " + e.Expr + ": " + e.Err.Error() }

// Unwrap makes every EvalError match errRuleEval.
func (e *EvalError) Unwrap() []error { return []error{errRuleEval, e.Err} }

// Member is where a top-level member of the data lies in its JSON, so a
// message template can read it without parsing the data again, and the
// observation can step over a large array without scanning it.
type Member struct {
	Key        string
	Start, End int // data[Start:End] is the member's value
	// Elements counts the value's elements when it is an array of the
	// parsed answer (its tape knows them); 0 when it is not, or not known.
	Elements int
}

// DataMembers evaluates the data expression and appends its JSON to dst,
// with the top-level members of a data expression that is a map literal.
// Without a data expression it returns shaped=false and the caller uses the
// body as is.
func (r *Rules) DataMembers(dst []byte, in *RuleInput) ([]byte, []Member, bool, error) {
	if r == nil || r.data == nil {
		return dst, nil, false, nil
	}
	act := in.activation()
	if r.dataDirect != nil {
		if out, members, ok := appendDirectMap(dst, r.dataDirect, act); ok {
			return out, members, true, nil
		}
	}
	out, err := eval(r.data, in, act)
	if err != nil {
		return dst, nil, true, &EvalError{Expr: "response.data", Err: err}
	}
	if types.IsError(out) {
		return dst, nil, true, &EvalError{Expr: "response.data", Err: fmt.Errorf("%v", out)}
	}
	var members []Member
	if m, ok := out.(traits.Mapper); ok && r.dataOrder != nil {
		members = make([]Member, 0, len(r.dataOrder))
		dst, err = appendOrderedMap(dst, m, r.dataOrder, &members, 0)
	} else {
		dst, err = appendCEL(dst, out, r.dataOrder, 0)
	}
	if err != nil {
		return dst, nil, true, &EvalError{Expr: "response.data", Err: err}
	}
	return dst, members, true, nil
}

// Empty evaluates the empty expression; ok is false when there is none.
func (r *Rules) Empty(in *RuleInput) (empty bool, ok bool, err error) {
	if r == nil || r.empty == nil {
		return false, false, nil
	}
	out, err := eval(r.empty, in, in.activation())
	if err != nil {
		return false, true, &EvalError{Expr: "response.empty", Err: err}
	}
	b, isBool := out.(types.Bool)
	if !isBool {
		return false, true, &EvalError{Expr: "response.empty", Err: errors.New("not a bool")}
	}
	return bool(b), true, nil
}

// HasErrorDetail reports whether the rules say how to find the backend's
// words for a failure.
func (r *Rules) HasErrorDetail() bool { return r != nil && r.detail != nil }

// ErrorDetail evaluates the error_detail expression and returns its result
// as one line of at most MaxErrorDetailChars code points (see
// OneLineDetail); "" when there is no expression or it says nothing. An
// answer that is markup (markupAnswer) gives no detail: whatever the
// expression picks of an HTML or XML page (its text: tags, a stack trace,
// an internal host) is not words for the model. Only a field of a parsed
// JSON body is. The expression still runs, so a failure is reported.
func (r *Rules) ErrorDetail(in *RuleInput) (string, error) {
	if r == nil || r.detail == nil {
		return "", nil
	}
	out, err := eval(r.detail, in, in.activation())
	if err != nil {
		return "", &EvalError{Expr: "response.error_detail", Err: err}
	}
	s, ok := out.(types.String)
	if !ok {
		return "", &EvalError{Expr: "response.error_detail", Err: errors.New("not a string")}
	}
	if markupAnswer(in) {
		return "", nil
	}
	return OneLineDetail(string(s)), nil
}

// markupAnswer reports whether an answer that did not parse as JSON is
// markup: its Content-Type says HTML or XML (text/html,
// application/xhtml+xml, text/xml, application/xml, any +xml type), or its
// text begins with "<" (an error page sent as text/plain or with no type).
func markupAnswer(in *RuleInput) bool {
	if in.Body != nil {
		return false
	}
	v, _, _ := strings.Cut(in.Header.Get("Content-Type"), ";")
	switch mt := strings.ToLower(strings.TrimSpace(v)); {
	case mt == "text/html", mt == "application/xhtml+xml", mt == "text/xml", mt == "application/xml", strings.HasSuffix(mt, "+xml"):
		return true
	}
	text := bytes.TrimLeft(in.Text, " \t\r\n\ufeff")
	return len(text) > 0 && text[0] == '<'
}

const maxCELDepth = 256

// appendCEL appends a CEL value as JSON. Map keys come out in order when
// given (a top-level literal's order) or when the map is a literal that
// kept its order (orderedMap), otherwise sorted, so output is
// deterministic.
func appendCEL(dst []byte, v ref.Val, order []string, depth int) ([]byte, error) {
	if depth > maxCELDepth {
		return dst, errors.New("value nested too deep")
	}
	switch t := v.(type) {
	case types.Null:
		return append(dst, "null"...), nil
	case types.Bool:
		return strconv.AppendBool(dst, bool(t)), nil
	case types.Int:
		return strconv.AppendInt(dst, int64(t), 10), nil
	case types.Uint:
		return strconv.AppendUint(dst, uint64(t), 10), nil
	case types.Double:
		f := float64(t)
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return append(dst, "null"...), nil
		}
		if f == math.Trunc(f) && math.Abs(f) < 1<<53 {
			return strconv.AppendInt(dst, int64(f), 10), nil
		}
		return jsontape.AppendFloat(dst, f, 64), nil
	case types.String:
		return jsontape.AppendString(dst, string(t)), nil
	case types.Bytes:
		return jsontape.AppendString(dst, base64.StdEncoding.EncodeToString([]byte(t))), nil
	case types.Timestamp:
		return jsontape.AppendString(dst, t.Time.UTC().Format(time.RFC3339Nano)), nil
	case types.Duration:
		return jsontape.AppendString(dst, t.Duration.String()), nil
	}
	if types.IsError(v) || types.IsUnknown(v) {
		return dst, fmt.Errorf("%v", v)
	}
	// Views into the backend's answer are copied as they came.
	switch t := v.(type) {
	case *orderedMap:
		if order == nil {
			return appendOrderedMap(dst, t.Mapper, t.order, nil, depth)
		}
	case *celJSONMap:
		if order == nil {
			return t.v.AppendCompact(dst), nil
		}
	case *celJSONList:
		return t.v.AppendCompact(dst), nil
	}
	if m, ok := v.(traits.Mapper); ok {
		return appendCELMap(dst, m, order, depth)
	}
	if l, ok := v.(traits.Lister); ok {
		dst = append(dst, '[')
		n, _ := l.Size().(types.Int)
		for i := types.Int(0); i < n; i++ {
			if i > 0 {
				dst = append(dst, ',')
			}
			var err error
			if dst, err = appendCEL(dst, l.Get(i), nil, depth+1); err != nil {
				return dst, err
			}
		}
		return append(dst, ']'), nil
	}
	return dst, fmt.Errorf("cannot represent %s as JSON", v.Type().TypeName())
}

// appendOrderedMap writes a top-level map literal's result with its keys
// in the order written, noting where each member's value lies.
func appendOrderedMap(dst []byte, m traits.Mapper, order []string, members *[]Member, depth int) ([]byte, error) {
	if n, ok := m.Size().(types.Int); !ok || int(n) != len(order) {
		return appendCEL(dst, m, nil, depth)
	}
	dst = append(dst, '{')
	for i, k := range order {
		v, found := m.Find(types.String(k))
		if !found {
			return dst, fmt.Errorf("map key %q missing", k)
		}
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = jsontape.AppendString(dst, k)
		dst = append(dst, ':')
		start := len(dst)
		var err error
		if dst, err = appendCEL(dst, v, nil, depth+1); err != nil {
			return dst, err
		}
		if members != nil {
			mb := Member{Key: k, Start: start, End: len(dst)}
			if l, ok := v.(*celJSONList); ok {
				mb.Elements = l.v.Len()
			}
			*members = append(*members, mb)
		}
	}
	return append(dst, '}'), nil
}

func appendCELMap(dst []byte, m traits.Mapper, order []string, depth int) ([]byte, error) {
	if order != nil {
		return appendOrderedMap(dst, m, order, nil, depth)
	}
	var keys []string
	it := m.Iterator()
	for it.HasNext() == types.True {
		k := it.Next()
		s, ok := k.(types.String)
		if !ok {
			return dst, fmt.Errorf("map key %v is not a string", k)
		}
		keys = append(keys, string(s))
	}
	sort.Strings(keys)
	dst = append(dst, '{')
	for i, k := range keys {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = jsontape.AppendString(dst, k)
		dst = append(dst, ':')
		var err error
		if dst, err = appendCEL(dst, m.Get(types.String(k)), nil, depth+1); err != nil {
			return dst, err
		}
	}
	return append(dst, '}'), nil
}

// normalizeNumbers converts json.Number (how arguments are decoded, to keep
// their precision for the schema) into int64 or float64, which CEL compares
// as numbers.
func normalizeNumbers(v map[string]any) map[string]any {
	out := make(map[string]any, len(v))
	for k, e := range v {
		out[k] = normalizeNumber(e)
	}
	return out
}

func normalizeNumber(v any) any {
	switch t := v.(type) {
	case interface{ Int64() (int64, error) }:
		if i, err := t.Int64(); err == nil {
			return i
		}
		if f, ok := t.(interface{ Float64() (float64, error) }); ok {
			if x, err := f.Float64(); err == nil {
				return x
			}
		}
		return v
	case map[string]any:
		return normalizeNumbers(t)
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			out[i] = normalizeNumber(e)
		}
		return out
	}
	return v
}
