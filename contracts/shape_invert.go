package contracts

import (
	"bytes"
	"net/url"
	"strconv"
)

// Reading arguments back: in transparent mode and under Envoy ext_proc, a
// request on a tool's own route is a call of that tool, and its arguments
// are read from where the binding would have put them. Every argument
// leaf can be read back except those inside an expression (an expression
// is not inverted) and the items of a written list in a query or form
// body (their positions among the repeated key's values are not theirs
// alone). Constants are not read back: a legacy client may send them or
// not. A tool whose binding reads an argument only where it cannot be
// read back is refused in transparent mode (Binding.Unreadable).

// LegacyRequest is a request on a tool's own route, as transparent mode
// and ext_proc receive it.
type LegacyRequest struct {
	PathValues map[string]string // placeholder values, unescaped
	RawQuery   string
	Header     map[string][]string // by canonical name
	Body       []byte
}

// ReadArgs reads a call's arguments back from a request on the tool's own
// route: path placeholders, the query parameters and headers the binding
// names (text coerced by the schema's types), and the body's members (a
// JSON body by its objects and lists; a form or multipart body as text,
// coerced, whichever encoding the binding sends: legacy_body.go).
// Query parameters the binding does not name are ignored (cache busters
// and the like); body members it does not name are refused, since they
// carry data the call would silently drop. maxDepth bounds the nesting
// of a JSON body. The error, when not nil, is an *ArgError.
func (c *Contract) ReadArgs(req LegacyRequest, maxDepth int) (map[string]any, error) {
	b, schema := c.Binding, c.Schema
	if arg, _, bad := b.Unreadable(); bad {
		return nil, &ArgError{Problem: ProblemInvalid,
			Detail: "argument " + arg + " cannot be read from this tool's own route; call the tool endpoint"}
	}
	args := map[string]any{}
	for arg, v := range req.PathValues {
		val, err := schema.Coerce(arg, []string{v})
		if err != nil {
			return nil, err
		}
		args[arg] = val
	}
	if b.query != nil && req.RawQuery != "" {
		q, err := url.ParseQuery(req.RawQuery)
		if err != nil {
			return nil, &ArgError{Problem: ProblemQuery}
		}
		if err := readForm(b.query, q, schema, args, false, false); err != nil {
			return nil, err
		}
	}
	for i := range b.headers {
		hf := &b.headers[i]
		if hf.leaf == nil || hf.leaf.kind != ShapeArg {
			continue
		}
		vals, ok := req.Header[hf.name]
		if !ok {
			continue
		}
		val, err := schema.Coerce(hf.leaf.arg, vals)
		if err != nil {
			return nil, err
		}
		args[hf.leaf.arg] = val
	}
	body := bytes.TrimSpace(req.Body)
	if len(body) == 0 || !b.HasBody() {
		return args, nil
	}
	enc, boundary, err := b.legacyBodyEncoding(req.Header, body)
	if err != nil {
		return nil, err
	}
	fields := b.form
	if fields == nil {
		fields = b.bodyFields
	}
	switch enc {
	case legacyForm, legacyMultipart:
		var form url.Values
		if enc == legacyForm {
			form, err = readFormBody(body)
		} else {
			form, err = readMultipartBody(req.Body, boundary)
		}
		if err != nil {
			return nil, err
		}
		if err := readForm(fields, form, schema, args, true, c.SideEffect); err != nil {
			return nil, err
		}
	default: // JSON
		obj, err := DecodeArgs(body, maxDepth)
		if err != nil {
			return nil, err // an *ArgError naming what is wrong with the body
		}
		if b.form != nil {
			form, err := jsonFormValues(b.form, obj)
			if err != nil {
				return nil, err
			}
			if err := readForm(b.form, form, schema, args, true, c.SideEffect); err != nil {
				return nil, err
			}
			return args, nil
		}
		if c.SideEffect {
			if key, ok := obj[IdempotencyKeyArg]; ok && !b.body.hasMember(IdempotencyKeyArg) {
				args[IdempotencyKeyArg] = key
				delete(obj, IdempotencyKeyArg)
			}
		}
		if err := readJSON(b.body, obj, "", args); err != nil {
			return nil, err
		}
	}
	return args, nil
}

func (n *node) hasMember(name string) bool {
	if n.kind != ShapeObject {
		return false
	}
	for _, m := range n.members {
		if m.name == name {
			return true
		}
	}
	return false
}

// readJSON reads the argument leaves of a JSON body node from v, the
// legacy body's value at pointer ptr.
func readJSON(n *node, v any, ptr string, args map[string]any) error {
	switch n.kind {
	case ShapeArg:
		args[n.arg] = v
	case ShapeObject:
		if v == nil {
			return nil
		}
		obj, ok := v.(map[string]any)
		if !ok {
			return &ArgError{Pointer: ptr, Problem: ProblemType, Values: []string{"object"}, Got: displayJSON(v)}
		}
		for k, e := range obj {
			var child *node
			for i := range n.members {
				if n.members[i].name == k {
					child = n.members[i].node
					break
				}
			}
			p := ptr + "/" + escapePointer(k)
			if child == nil {
				return &ArgError{Pointer: p, Problem: ProblemUnexpected}
			}
			if err := readJSON(child, e, p, args); err != nil {
				return err
			}
		}
	case ShapeList:
		if v == nil {
			return nil
		}
		list, ok := v.([]any)
		if !ok {
			return &ArgError{Pointer: ptr, Problem: ProblemType, Values: []string{"array"}, Got: displayJSON(v)}
		}
		for i, e := range list {
			p := ptr + "/" + strconv.Itoa(i)
			if i >= len(n.items) {
				return &ArgError{Pointer: p, Problem: ProblemUnexpected}
			}
			if err := readJSON(n.items[i], e, p, args); err != nil {
				return err
			}
		}
	}
	// Constants and expressions are not read back.
	return nil
}

// readForm reads the argument leaves of a query or form body from its
// parsed pairs. With strict (a form body), a key the binding does not
// name is refused; the idempotency key of a side-effecting tool may come
// as a form field.
func readForm(f *formShape, vals url.Values, schema *Schema, args map[string]any, strict, sideEffect bool) error {
	if f.whole != nil {
		return nil // unreadable, refused before
	}
	known := make(map[string]bool, len(f.fields))
	for i := range f.fields {
		fd := &f.fields[i]
		known[fd.key] = true
		if !fd.readable {
			continue
		}
		vs, ok := vals[fd.key]
		if !ok {
			continue
		}
		val, err := schema.Coerce(fd.leaf.arg, vs)
		if err != nil {
			return err
		}
		args[fd.leaf.arg] = val
	}
	if !strict {
		return nil
	}
	for k, vs := range vals {
		if known[k] {
			continue
		}
		if k == IdempotencyKeyArg && sideEffect && len(vs) == 1 {
			args[k] = vs[0]
			continue
		}
		return &ArgError{Pointer: "/" + escapePointer(k), Problem: ProblemUnexpected}
	}
	return nil
}
