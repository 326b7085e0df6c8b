package contracts

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// MaxToolNameLength is the longest tool name: MCP clients refuse longer ones.
const MaxToolNameLength = 64

var toolNamePattern = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)

// ContractSpec is one tool as written in the policy file, after decoding.
type ContractSpec struct {
	Name        string
	Description string
	Upstream    string
	Credential  string // the upstream's credential its requests carry (upstreams.<name>.credentials); "" for its auth
	SideEffect  bool
	Cost        float64
	Timeout     time.Duration
	Args        any // the argument schema document
	Request     BindingSpec
	Response    RulesSpec
	Messages    map[string]string
	// TruncationHint tells the model how to get what an observation had
	// to cut ("ask for fewer articles with a smaller limit").
	TruncationHint string
	Idempotency    IdempotencySpec
}

// MaxTruncationHintChars bounds a tool's truncation_hint: it shares the
// observation's room with the data.
const MaxTruncationHintChars = 200

// IdempotencySpec tunes idempotency for a side-effecting tool.
type IdempotencySpec struct {
	TTL           time.Duration // how long results are kept; default 24h
	ForwardHeader string        // header that forwards the key to a backend that dedupes on it
}

// Contract is a compiled, immutable tool contract.
type Contract struct {
	Name        string
	Description string
	Upstream    string
	Credential  string // the upstream's credential its requests carry; "" for its auth (policy.Upstream.CredentialOf)
	SideEffect  bool
	Cost        float64
	Timeout     time.Duration
	Schema      *Schema
	Binding     *Binding
	Rules       *Rules
	Templates   Templates
	Idempotency IdempotencySpec
	// TruncationHint is the tool's words for getting what an observation
	// cut; empty for the catalogue's generic ones.
	TruncationHint string

	published  json.RawMessage
	errorRules []ErrorRuleSpec
}

// FieldError is a contract that does not compile. Field is the path of the
// faulty key inside the tool ("args", "request.path", "response.data",
// "errors[0].when", "messages.empty"), ending in "#key" when the fault is
// the key itself rather than its value (a header name); Line and Column,
// when set, are 1-based positions inside that key's expression.
type FieldError struct {
	Field  string
	Line   int
	Column int
	Msg    string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

// DefaultIdempotencyTTL is how long idempotency records are kept by default.
const DefaultIdempotencyTTL = 24 * time.Hour

// Compile compiles spec. The error, when not nil, is a *FieldError.
func Compile(env *RuleEnv, spec ContractSpec) (*Contract, error) {
	if !toolNamePattern.MatchString(spec.Name) {
		return nil, &FieldError{Field: "", Msg: fmt.Sprintf("tool name %q may only contain letters, digits, '_', '.' and '-'", spec.Name)}
	}
	if len(spec.Name) > MaxToolNameLength {
		return nil, &FieldError{Field: "", Msg: fmt.Sprintf("tool name %q is longer than %d characters", spec.Name, MaxToolNameLength)}
	}
	c := &Contract{
		Name:        spec.Name,
		Description: spec.Description,
		Upstream:    spec.Upstream,
		Credential:  spec.Credential,
		SideEffect:  spec.SideEffect,
		Cost:        spec.Cost,
		Timeout:     spec.Timeout,
		Idempotency: spec.Idempotency,

		TruncationHint: strings.TrimSpace(spec.TruncationHint),
	}
	if c.Cost < 0 {
		return nil, &FieldError{Field: "cost", Msg: "must not be negative"}
	}
	if utf8.RuneCountInString(c.TruncationHint) > MaxTruncationHintChars || strings.ContainsFunc(c.TruncationHint, unicode.IsControl) {
		return nil, &FieldError{Field: "truncation_hint", Msg: fmt.Sprintf("must be one line of at most %d characters", MaxTruncationHintChars)}
	}
	if c.Idempotency.TTL == 0 {
		c.Idempotency.TTL = DefaultIdempotencyTTL
	}
	var err error
	if c.Schema, err = env.schema(spec.Args); err != nil {
		field := "args"
		var se *schemaError
		if errors.As(err, &se) && len(se.Location) > 0 {
			field += "." + strings.Join(se.Location, ".")
		}
		return nil, &FieldError{Field: field, Msg: err.Error()}
	}
	if spec.SideEffect && c.Schema.hasProperty(IdempotencyKeyArg) {
		return nil, &FieldError{Field: "args", Msg: IdempotencyKeyArg + " is reserved: toolgate adds it to side-effecting tools"}
	}
	bspec := spec.Request
	if h := spec.Idempotency.ForwardHeader; h != "" {
		bspec.Reserved = make(map[string]string, len(spec.Request.Reserved)+1)
		for k, v := range spec.Request.Reserved {
			bspec.Reserved[k] = v
		}
		bspec.Reserved[http.CanonicalHeaderKey(h)] = "is idempotency.forward_header: toolgate sends the key in it"
	}
	if c.Binding, err = CompileBinding(env, bspec, c.Schema); err != nil {
		var be *BindError
		if errors.As(err, &be) {
			return nil, &FieldError{Field: "request." + be.Field, Line: be.Line, Column: be.Column, Msg: be.Msg}
		}
		return nil, &FieldError{Field: "request", Msg: err.Error()}
	}
	if c.Rules, err = compileRules(env, spec.Response); err != nil {
		var re *ruleError
		if errors.As(err, &re) {
			field := re.Field
			if field == "data" || field == "empty" || field == "error_detail" || field == "schema" || strings.HasPrefix(field, "schema.") {
				field = "response." + field
			}
			return nil, &FieldError{Field: field, Line: re.Line, Column: re.Column, Msg: re.Msg}
		}
		return nil, &FieldError{Field: "response", Msg: err.Error()}
	}
	c.errorRules = slices.Clone(spec.Response.Errors)
	dedupes := spec.Idempotency.ForwardHeader != ""
	for i, e := range spec.Response.Errors {
		if msg := ruleRetryConflict(e, spec.SideEffect, dedupes); msg != "" {
			return nil, &FieldError{Field: fmt.Sprintf("errors[%d].retryable", i), Msg: msg}
		}
	}
	if c.Templates, err = compileTemplates(env, spec.Messages); err != nil {
		var re *ruleError
		if errors.As(err, &re) {
			return nil, &FieldError{Field: "messages." + re.Field, Msg: re.Msg}
		}
		return nil, &FieldError{Field: "messages", Msg: err.Error()}
	}
	if c.published, err = publishSchema(c.Schema, spec.SideEffect); err != nil {
		return nil, &FieldError{Field: "args", Msg: err.Error()}
	}
	return c, nil
}

// PublishedSchema is the argument schema agents see: the contract's schema,
// plus a required idempotency_key string for side-effecting tools.
func (c *Contract) PublishedSchema() json.RawMessage { return c.published }

// ErrorRules are the tool's errors rules as the policy wrote them, in
// order (the first that matches an answer wins), for people to read: the
// admin console lists them. The result must not be modified.
func (c *Contract) ErrorRules() []ErrorRuleSpec { return c.errorRules }

func publishSchema(s *Schema, sideEffect bool) (json.RawMessage, error) {
	if !sideEffect {
		return s.rawJSON(), nil
	}
	doc := make(map[string]any, len(s.document())+2)
	for k, v := range s.document() {
		doc[k] = v
	}
	props := map[string]any{}
	if p, ok := doc["properties"].(map[string]any); ok {
		for k, v := range p {
			props[k] = v
		}
	}
	props[IdempotencyKeyArg] = idempotencyKeySchema()
	doc["properties"] = props
	var required []any
	if r, ok := doc["required"].([]any); ok {
		required = append(required, r...)
	}
	doc["required"] = append(required, IdempotencyKeyArg)
	return json.Marshal(doc)
}
