package config

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/toolgate/toolgate/contracts"
)

// This file compiles the tools: each one's checks that need the rest of the
// policy (its upstream, the caller header, the upstream's credential), then
// its contract, through contracts.Compile.

// tool checks one tool and compiles its contract (schema, binding, CEL
// rules, templates) through contracts.Compile. The caller header and the
// upstream's own credential header are reserved, so a binding can never
// write them from an argument. An error contracts reports inside a CEL
// expression or template is moved to its position in the file, quotes and
// block scalars accounted for.
func (c *compiler) tool(env *contracts.RuleEnv, name string, t *toolSpec, upstreams map[string]*upstreamSpec, callerHeader string) *contracts.Contract {
	base := "tools." + name
	if t == nil {
		c.errorAt(base, "must not be empty")
		return nil
	}
	n := len(c.errs)
	if strings.TrimSpace(t.Description) == "" {
		c.errorAt(base+".description", "is required: agents choose tools by their description")
	}
	up, ok := upstreams[t.Upstream]
	switch {
	case t.Upstream == "":
		c.errorAt(base+".upstream", "is required")
	case !ok:
		c.errorAt(base+".upstream", "upstream %q is not defined", t.Upstream)
	}
	if t.Credential != "" && ok && up != nil {
		if _, has := up.Credentials[t.Credential]; !has {
			if len(up.Credentials) == 0 {
				c.errorAt(base+".credential", "upstream %s has no credentials (define upstreams.%s.credentials.%s, or remove this key to send its auth)", t.Upstream, t.Upstream, t.Credential)
			} else {
				c.errorAt(base+".credential", "upstream %s has no credential %q (it has %s)", t.Upstream, t.Credential, strings.Join(slices.Sorted(maps.Keys(up.Credentials)), ", "))
			}
		}
	}
	if t.Request == nil {
		c.errorAt(base+".request", "is required (method and path of the backend call)")
	}
	if t.Cost < 0 || math.IsInf(t.Cost, 0) {
		c.errorAt(base+".cost", "must not be negative")
	}
	if t.Idempotency != nil && !t.SideEffect {
		c.errorAt(base+".idempotency", "only applies to tools with side_effect: true")
	}
	if t.Idempotency != nil && t.Idempotency.ForwardHeader != "" && !headerNameRE.MatchString(t.Idempotency.ForwardHeader) {
		c.errorAt(base+".idempotency.forward_header", "%q is not a valid header name", t.Idempotency.ForwardHeader)
	}
	spec := contracts.ContractSpec{
		Name:        name,
		Description: strings.TrimSpace(t.Description),
		Upstream:    t.Upstream,
		Credential:  t.Credential,
		SideEffect:  t.SideEffect,
		Cost:        t.Cost,
		Timeout:     time.Duration(t.Timeout),
		Args:        t.Args,
		Messages:    t.Messages,

		TruncationHint: t.TruncationHint,
	}
	if spec.Args == nil {
		spec.Args = map[string]any{"type": "object", "additionalProperties": false}
	}
	c.requiredDeclared(base+".args", spec.Args)
	if spec.Timeout == 0 && ok && up != nil {
		spec.Timeout = time.Duration(up.Timeout)
	}
	if t.Request != nil {
		spec.Request = contracts.BindingSpec{
			Method: t.Request.Method, Path: t.Request.Path, Encoding: contracts.Encoding(t.Request.Encoding),
			Query: t.Request.Query, Headers: t.Request.Headers, Body: t.Request.Body,
			// The caller's identity is toolgate's business, never a backend's.
			Reserved: map[string]string{callerHeader: "is the caller identity header (server.caller_header)"},
		}
		if ok && up != nil {
			// The upstream's credentials are the operator's, never an
			// argument: whichever the tool sends.
			for h, key := range authHeaders(up) {
				spec.Request.Reserved[h] = "is set by upstreams." + t.Upstream + "." + key
			}
		}
		if t.Request.Path == "" {
			c.errorAt(base+".request.path", "is required")
		}
	}
	if t.Response != nil {
		spec.Response.Data, spec.Response.Empty = t.Response.Data, t.Response.Empty
		spec.Response.ErrorDetail, spec.Response.Schema = t.Response.ErrorDetail, t.Response.Schema
	}
	for i, e := range t.Errors {
		rule := contracts.ErrorRuleSpec{When: e.When, Status: contracts.Status(e.Status), Retryable: e.Retryable}
		if e.SideEffect != "" {
			se, ok := contracts.ParseSideEffect(e.SideEffect)
			if !ok {
				c.errorAt(fmt.Sprintf("%s.errors[%d].side_effect", base, i), "%q is not valid (want none, done or unknown)", e.SideEffect)
			}
			rule.SideEffect = &se
		}
		spec.Response.Errors = append(spec.Response.Errors, rule)
	}
	if t.Idempotency != nil {
		spec.Idempotency = contracts.IdempotencySpec{TTL: time.Duration(t.Idempotency.TTL), ForwardHeader: t.Idempotency.ForwardHeader}
	}
	if len(c.errs) > n {
		return nil
	}
	contract, err := contracts.Compile(env, spec)
	if err != nil {
		var fe *contracts.FieldError
		if !errors.As(err, &fe) {
			c.errorAt(base, "%v", err)
			return nil
		}
		path, at := base, base+"#key"
		if fe.Field != "" {
			path = base + "." + fe.Field
			at = path
		}
		e := &Error{Path: strings.TrimSuffix(path, "#key"), Msg: fe.Msg}
		c.errs = append(c.errs, e)
		c.unplaced = append(c.unplaced, placement{e: e, at: at, adjust: func(np nodePos) Pos {
			pos := np.Pos
			if fe.Line == 1 && fe.Column > 0 && (np.style == 0 || np.style == yaml.DoubleQuotedStyle || np.style == yaml.SingleQuotedStyle) {
				pos.Column += fe.Column - 1
				if np.style != 0 {
					pos.Column++ // the opening quote
				}
			} else if fe.Line > 1 && (np.style == yaml.LiteralStyle || np.style == yaml.FoldedStyle) {
				pos.Line += fe.Line
				pos.Column = 1
			}
			return pos
		}})
		return nil
	}
	c.templateWarnings(base, contract)
	return contract
}

// templateWarnings warns, at the template, of every value a tool's
// message template prints that the tool's calls can never have
// (contracts.Contract.TemplateWarnings): the policy loads, but where such
// a template would speak the catalogue does.
func (c *compiler) templateWarnings(base string, ct *contracts.Contract) {
	for _, w := range ct.TemplateWarnings() {
		path := base + "." + w.Field
		c.warnAt(path, "%s", w.Msg)
	}
}

// requiredDeclared refuses a `required` name that no property declares in
// an object schema that admits no other properties: no call could ever
// satisfy it, so every call would be bad_args. It looks into nested
// properties and array items, where such schemas also occur.
func (c *compiler) requiredDeclared(path string, schema any) {
	m, ok := schema.(map[string]any)
	if !ok {
		return
	}
	props, _ := m["properties"].(map[string]any)
	if closed, _ := m["additionalProperties"].(bool); m["additionalProperties"] != nil && !closed && m["patternProperties"] == nil {
		required, _ := m["required"].([]any)
		for i, r := range required {
			if name, ok := r.(string); ok {
				if _, declared := props[name]; !declared {
					c.errorAt(fmt.Sprintf("%s.required[%d]", path, i), "%q is required, but no property declares it and additionalProperties is false", name)
				}
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(props)) {
		c.requiredDeclared(path+".properties."+name, props[name])
	}
	if items, ok := m["items"]; ok {
		c.requiredDeclared(path+".items", items)
	}
}
