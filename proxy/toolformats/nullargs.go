package toolformats

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/toolgate/toolgate/contracts"
)

// NullArgs reads an optional argument given as null as absent, where the
// argument's schema does not accept null: that is what OpenAI's strict mode
// sends for an argument the model leaves out (GET
// /v1/tools?format=openai-strict publishes such arguments as nullable), and
// what many models send in any mode. It applies to nested objects through
// properties, items and #/$defs references. The body comes back unchanged
// when there is nothing to drop, or when it is not a well-formed object with
// unique keys: the core refuses those as they are.
func NullArgs(ct *contracts.Contract, body []byte) []byte {
	if ct == nil || !bytes.Contains(body, []byte("null")) {
		return body
	}
	schema, err := decodeSchema(ct.PublishedSchema())
	if err != nil {
		return body
	}
	return dropNullArgs(body, schema)
}

// dropNullArgs is NullArgs against a decoded argument schema.
func dropNullArgs(body []byte, schema map[string]any) []byte {
	defs, _ := schema["$defs"].(map[string]any)
	if out, changed := dropNulls(bytes.TrimSpace(body), schema, defs, 0); changed {
		return out
	}
	return body
}

// dropNulls rewrites one JSON value against its schema node, and reports
// whether it changed. Values it keeps are copied byte for byte.
func dropNulls(raw []byte, node, defs map[string]any, depth int) ([]byte, bool) {
	node = resolveRef(node, defs)
	if node == nil || depth > contracts.MaxArgsDepth || len(raw) == 0 {
		return raw, false
	}
	switch raw[0] {
	case '{':
		return dropNullMembers(raw, node, defs, depth)
	case '[':
		items, _ := node["items"].(map[string]any)
		if items == nil {
			return raw, false
		}
		var elems []json.RawMessage
		if json.Unmarshal(raw, &elems) != nil {
			return raw, false
		}
		changed := false
		for i, e := range elems {
			if out, ok := dropNulls(e, items, defs, depth+1); ok {
				elems[i], changed = out, true
			}
		}
		if !changed {
			return raw, false
		}
		out := []byte{'['}
		for i, e := range elems {
			if i > 0 {
				out = append(out, ',')
			}
			out = append(out, e...)
		}
		return append(out, ']'), true
	}
	return raw, false
}

func dropNullMembers(raw []byte, node, defs map[string]any, depth int) ([]byte, bool) {
	props, _ := node["properties"].(map[string]any)
	if len(props) == 0 {
		return raw, false
	}
	required := map[string]bool{}
	if r, ok := node["required"].([]any); ok {
		for _, n := range r {
			if s, ok := n.(string); ok {
				required[s] = true
			}
		}
	}
	type member struct {
		key    string
		rawKey []byte // as sent, quotes and escapes included
		value  json.RawMessage
	}
	var members []member
	seen := map[string]bool{}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return raw, false
	}
	for dec.More() {
		from := dec.InputOffset()
		tok, err := dec.Token()
		key, ok := tok.(string)
		if err != nil || !ok || seen[key] {
			return raw, false // broken, or a key given twice: the core says so
		}
		seen[key] = true
		start := from + int64(bytes.IndexByte(raw[from:], '"'))
		rawKey := raw[start:dec.InputOffset()]
		var v json.RawMessage
		if dec.Decode(&v) != nil {
			return raw, false
		}
		members = append(members, member{key, rawKey, v})
	}
	if _, err := dec.Token(); err != nil || dec.InputOffset() != int64(len(raw)) {
		return raw, false // not one object: left to the core
	}
	changed := false
	kept := members[:0]
	for _, m := range members {
		prop, _ := props[m.key].(map[string]any)
		if prop == nil {
			kept = append(kept, m)
			continue
		}
		if string(m.value) == "null" && !required[m.key] && !acceptsNull(resolveRef(prop, defs)) {
			changed = true
			continue
		}
		if out, ok := dropNulls(m.value, prop, defs, depth+1); ok {
			m.value, changed = out, true
		}
		kept = append(kept, m)
	}
	if !changed {
		return raw, false
	}
	out := []byte{'{'}
	for i, m := range kept {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, m.rawKey...)
		out = append(out, ':')
		out = append(out, m.value...)
	}
	return append(out, '}'), true
}

// resolveRef follows a #/$defs reference (a few levels: references to
// references are rare); other nodes come back as they are.
func resolveRef(node, defs map[string]any) map[string]any {
	for range 8 {
		ref, ok := node["$ref"].(string)
		if !ok {
			return node
		}
		name, ok := strings.CutPrefix(ref, "#/$defs/")
		if !ok {
			return nil
		}
		next, _ := defs[name].(map[string]any)
		if next == nil {
			return nil
		}
		node = next
	}
	return nil
}
