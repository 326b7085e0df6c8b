// Package toolformats is the tool list in the shape each model API takes
// verbatim (GET /v1/tools?format=..., toolgate tools), so an agent passes
// the entries on without editing them, and the reading of the arguments
// those shapes make models send (NullArgs):
//
//	(none)         {"name","description","parameters","side_effect"}: List
//	openai                   Chat Completions: {"type":"function","function":{"name","description","parameters"}}
//	openai-strict            the same with "strict":true and parameters in the
//	                         subset OpenAI's strict mode takes (strictSchema)
//	openai-responses         the Responses API (and OpenAI's Agents SDK):
//	                         {"type":"function","name","description","parameters","strict":false}
//	openai-responses-strict  the same with "strict":true and the strict subset
//	anthropic                {"name","description","input_schema"}
//	mcp                      the tools/list entries of the MCP front
//
// A tool the chosen API cannot take (a name with a dot; a schema strict
// mode cannot express or that passes one of its documented size limits,
// strictLimits) is listed under "left_out" with the reason, never sent in
// a shape the API refuses.
package toolformats

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/policy"
)

// MCPTool is a tool as the MCP front lists it (tools/list) and
// GET /v1/tools?format=mcp shows it, in the JSON the MCP Go SDK writes for
// its Tool: the published argument schema (with the required
// idempotency_key of side-effecting tools), MCPOutputSchema as output
// schema, and annotations derived from side_effect. Package
// proxy/mcpfront registers the SDK tool made of it (mcpfront.Tool).
type MCPTool struct {
	Annotations  MCPToolAnnotations `json:"annotations"`
	Description  string             `json:"description,omitempty"`
	InputSchema  json.RawMessage    `json:"inputSchema"`
	Name         string             `json:"name"`
	OutputSchema json.RawMessage    `json:"outputSchema"`
}

// MCPToolAnnotations are an MCP tool's hints.
type MCPToolAnnotations struct {
	DestructiveHint bool `json:"destructiveHint"`
	IdempotentHint  bool `json:"idempotentHint"`
	ReadOnlyHint    bool `json:"readOnlyHint"`
}

// MCPToolOf is contract ct as an MCP tool. A side-effecting tool is
// idempotent by its key: a retry with the same key returns the stored
// result instead of acting twice.
func MCPToolOf(ct *contracts.Contract) *MCPTool {
	return &MCPTool{
		Annotations: MCPToolAnnotations{
			ReadOnlyHint:    !ct.SideEffect,
			DestructiveHint: ct.SideEffect,
			IdempotentHint:  true,
		},
		Description:  ct.Description,
		InputSchema:  ct.PublishedSchema(),
		Name:         ct.Name,
		OutputSchema: json.RawMessage(MCPOutputSchema),
	}
}

// MCPOutputSchema is the JSON Schema of the structuredContent of every MCP
// tools/call result (mcpfront.Output), published as every tool's
// outputSchema. It names no $schema: MCP schemas default to 2020-12, and
// the keywords used here mean the same in draft-07, which some clients'
// validators assume.
const MCPOutputSchema = `{` +
	`"title":"toolgate call status",` +
	`"description":"What happened, in fields; the text block (the observation) says it in words and carries the data.",` +
	`"type":"object",` +
	`"required":["status","retryable","side_effect","replayed","cost","tool","call_id"],` +
	`"additionalProperties":false,` +
	`"properties":{` +
	`"status":{"type":"string","enum":["ok","empty","bad_args","forbidden","not_found","timeout","upstream"],"description":"What happened; ok and empty are successes."},` +
	`"retryable":{"type":"boolean","description":"Re-sending the identical call (same arguments, same idempotency key) later may succeed."},` +
	`"retry_after_ms":{"type":"integer","minimum":0,"description":"When a retry makes sense, in milliseconds."},` +
	`"side_effect":{"type":"string","enum":["none","done","unknown"],"description":"Whether the call changed anything: none, done, or unknown when the outcome was lost."},` +
	`"replayed":{"type":"boolean","description":"A stored result for a repeated idempotency key; the backend was not called again."},` +
	`"cost":{"type":"number","minimum":0,"description":"Cost units this call consumed."},` +
	`"tool":{"type":"string","description":"The tool's name as called."},` +
	`"call_id":{"type":"string","description":"The call's id, for support and logs."}` +
	`}}`

// Info is one entry of GET /v1/tools, in the shape function-calling
// APIs take.
type Info struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
	SideEffect  bool            `json:"side_effect"`
}

// List lists the tools of snap that allow accepts, sorted by name.
func List(snap *policy.Snapshot, allow func(name string) bool) []Info {
	out := make([]Info, 0, len(snap.ToolNames))
	for _, name := range snap.ToolNames {
		if !allow(name) {
			continue
		}
		ct := snap.Tools[name]
		out = append(out, Info{Name: name, Description: ct.Description, Parameters: ct.PublishedSchema(), SideEffect: ct.SideEffect})
	}
	return out
}

// Formats are the values of GET /v1/tools?format=, besides none.
func Formats() []string {
	return []string{"openai", "openai-strict", "openai-responses", "openai-responses-strict", "anthropic", "mcp"}
}

// isStrict reports whether format publishes schemas in OpenAI's strict
// subset, under its size limits.
func isStrict(format string) bool {
	return format == "openai-strict" || format == "openai-responses-strict"
}

// LeftOut is a tool a format cannot carry, and why.
type LeftOut struct {
	Name   string `json:"name"`
	Reason string `json:"reason"`
}

// ListIn is the tool list of snap that allow accepts in format (one of
// Formats): the entries, and the tools left out.
//
// In a strict format each tool's schema must keep within strict mode's
// size limits (strictLimits), and so must the list as a whole: a request
// carries every listed tool, so the totals are also counted over the list.
// Tools are taken in name order; one whose schema would take a total past
// its limit is left out, with the reason, and the tools after it are still
// taken while they fit.
func ListIn(snap *policy.Snapshot, allow func(name string) bool, format string) ([]any, []LeftOut, error) {
	if !slices.Contains(Formats(), format) {
		return nil, nil, fmt.Errorf("format %q is not one of %s", format, strings.Join(Formats(), ", "))
	}
	entries := []any{}
	var left []LeftOut
	var listed strictSize // the strict schemas listed so far
	for _, name := range snap.ToolNames {
		if !allow(name) {
			continue
		}
		ct := snap.Tools[name]
		entry, size, err := toolEntry(ct, format)
		if err == nil && isStrict(format) {
			err = listed.fits(size)
		}
		if err != nil {
			left = append(left, LeftOut{Name: name, Reason: err.Error()})
			continue
		}
		listed.add(size)
		entries = append(entries, entry)
	}
	return entries, left, nil
}

// apiToolName reports whether both OpenAI and Anthropic take name:
// ^[a-zA-Z0-9_-]{1,64}$.
func apiToolName(name string) bool {
	if name == "" || len(name) > 64 {
		return false
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}

// toolEntry is contract ct in format, with the size of its schema in a
// strict format (checked against strict mode's limits for one schema).
func toolEntry(ct *contracts.Contract, format string) (any, strictSize, error) {
	if format == "mcp" {
		return MCPToolOf(ct), strictSize{}, nil
	}
	if !apiToolName(ct.Name) {
		return nil, strictSize{}, fmt.Errorf("the API takes tool names of 1 to 64 letters, digits, '_' and '-'")
	}
	schema, err := decodeSchema(ct.PublishedSchema())
	if err != nil {
		return nil, strictSize{}, err
	}
	delete(schema, "$schema") // each API has its own dialect
	var size strictSize
	if isStrict(format) {
		if schema, err = strictSchema(schema); err != nil {
			return nil, strictSize{}, err
		}
		if size, err = measureStrict(schema); err != nil {
			return nil, strictSize{}, err
		}
	}
	switch format {
	case "openai", "openai-strict":
		type function struct {
			Name        string         `json:"name"`
			Description string         `json:"description,omitempty"`
			Parameters  map[string]any `json:"parameters"`
			Strict      bool           `json:"strict,omitempty"`
		}
		fn := function{Name: ct.Name, Description: ct.Description, Parameters: schema, Strict: format == "openai-strict"}
		return map[string]any{"type": "function", "function": fn}, size, nil
	case "openai-responses", "openai-responses-strict":
		// The Responses API's function tool is flat, and its strict
		// defaults to true there: the loose format says false.
		return struct {
			Type        string         `json:"type"`
			Name        string         `json:"name"`
			Description string         `json:"description,omitempty"`
			Parameters  map[string]any `json:"parameters"`
			Strict      bool           `json:"strict"`
		}{"function", ct.Name, ct.Description, schema, format == "openai-responses-strict"}, size, nil
	default: // anthropic
		return struct {
			Name        string         `json:"name"`
			Description string         `json:"description,omitempty"`
			InputSchema map[string]any `json:"input_schema"`
		}{ct.Name, ct.Description, schema}, size, nil
	}
}

// decodeSchema decodes a published schema, numbers kept as written.
func decodeSchema(raw []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("the schema does not decode: %w", err)
	}
	return m, nil
}

// strictKept reports whether strict mode takes keyword k as it is, besides
// the structure (type, properties, required, additionalProperties, items,
// anyOf, $defs, $ref).
func strictKept(k string) bool {
	switch k {
	case "type", "description", "enum", "const", "pattern",
		"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "minItems", "maxItems":
		return true
	}
	return false
}

// strictFormat reports whether strict mode takes string format f.
func strictFormat(f string) bool {
	switch f {
	case "date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid":
		return true
	}
	return false
}

// strictRefused reports whether keyword k changes which documents a schema
// accepts in a way strict mode cannot express; a tool using it is left out
// rather than published with a looser or wrong schema.
func strictRefused(k string) bool {
	switch k {
	case "allOf", "not", "if", "then", "else", "dependentSchemas", "dependentRequired", "dependencies",
		"patternProperties", "propertyNames", "prefixItems", "contains", "unevaluatedProperties",
		"unevaluatedItems", "$dynamicRef":
		return true
	}
	return false
}

// strictMaxDepth is how deeply strict mode nests objects.
const strictMaxDepth = 10

// strictSchema converts a tool's argument schema to OpenAI's strict subset:
// every object lists all its properties as required and forbids others;
// an optional property becomes nullable (the model sends null for it, which
// the tool endpoint and MCP read as absent: nullArgs); keywords strict mode
// does not take are dropped, and the ones a model needs to know (lengths,
// defaults, formats) are said in the description instead. toolgate still
// validates every call against the contract's own schema.
func strictSchema(schema map[string]any) (map[string]any, error) {
	if t, _ := schema["type"].(string); t != "object" {
		return nil, fmt.Errorf("strict mode takes an object schema at the root")
	}
	out, err := strictNode(schema, "", 0)
	if err != nil {
		return nil, err
	}
	if defs, ok := schema["$defs"].(map[string]any); ok {
		converted := make(map[string]any, len(defs))
		for name, d := range defs {
			node, ok := d.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("$defs/%s: strict mode takes object schemas only", name)
			}
			if converted[name], err = strictNode(node, "/$defs/"+name, 1); err != nil {
				return nil, err
			}
		}
		out["$defs"] = converted
	}
	return out, nil
}

func strictNode(node map[string]any, at string, depth int) (map[string]any, error) {
	if depth > strictMaxDepth {
		return nil, fmt.Errorf("%s: strict mode nests at most %d levels", pointer(at), strictMaxDepth)
	}
	out := map[string]any{}
	var said []string // constraints dropped, said in words
	for _, k := range slices.Sorted(maps.Keys(node)) {
		v := node[k]
		switch {
		case strictRefused(k):
			return nil, fmt.Errorf("%s: strict mode cannot express %s", pointer(at), k)
		case strictKept(k):
			out[k] = v
		case k == "$ref":
			ref, _ := v.(string)
			if ref != "#" && !strings.HasPrefix(ref, "#/$defs/") {
				return nil, fmt.Errorf("%s: strict mode follows only #/$defs references", pointer(at))
			}
			out[k] = ref
		case k == "format":
			if f, _ := v.(string); strictFormat(f) {
				out[k] = f
			} else {
				said = append(said, fmt.Sprintf("format %v", v))
			}
		case k == "default":
			b, _ := json.Marshal(v)
			said = append(said, "default "+string(b))
		case k == "uniqueItems":
			if v == true {
				said = append(said, "no duplicate items")
			}
		case k == "minProperties" || k == "maxProperties":
			said = append(said, fmt.Sprintf("%s %v", k, v))
		case k == "anyOf" || k == "oneOf": // oneOf: the contract still checks exclusivity
			branches, ok := v.([]any)
			if !ok {
				return nil, fmt.Errorf("%s: %s must be a list", pointer(at), k)
			}
			conv := make([]any, len(branches))
			for i, b := range branches {
				bm, ok := b.(map[string]any)
				if !ok {
					return nil, fmt.Errorf("%s/%s/%d: strict mode takes object schemas only", pointer(at), k, i)
				}
				c, err := strictNode(bm, fmt.Sprintf("%s/%s/%d", at, k, i), depth+1)
				if err != nil {
					return nil, err
				}
				conv[i] = c
			}
			out["anyOf"] = conv
		case k == "items":
			im, ok := v.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("%s/items: strict mode takes one object schema for items", pointer(at))
			}
			c, err := strictNode(im, at+"/items", depth+1)
			if err != nil {
				return nil, err
			}
			out[k] = c
		}
		// Everything else ($schema, $id, title, examples, x-...) is an
		// annotation and is dropped.
	}
	if words := lengthWords(node); words != "" {
		said = append([]string{words}, said...)
	}
	if _, typed := out["type"]; !typed {
		if t := enumType(out["enum"]); t != "" {
			out["type"] = t // strict mode wants a type next to an enum
		}
	}
	if isObjectSchema(node) {
		if err := strictObject(node, out, at, depth); err != nil {
			return nil, err
		}
	}
	if len(said) > 0 {
		desc, _ := out["description"].(string)
		if desc != "" && !strings.HasSuffix(desc, ".") {
			desc += "."
		}
		out["description"] = strings.TrimSpace(desc + " (" + strings.Join(said, "; ") + ")")
	}
	return out, nil
}

// lengthWords says a string's length bounds, which strict mode does not
// take: "1 to 80 characters".
func lengthWords(node map[string]any) string {
	lo, hasLo := node["minLength"]
	hi, hasHi := node["maxLength"]
	switch {
	case hasLo && hasHi:
		return fmt.Sprintf("%v to %v characters", lo, hi)
	case hasLo:
		return fmt.Sprintf("at least %v characters", lo)
	case hasHi:
		return fmt.Sprintf("at most %v characters", hi)
	}
	return ""
}

// enumType is the JSON type shared by every value of an enum, or "".
func enumType(enum any) string {
	values, _ := enum.([]any)
	kind := ""
	for _, v := range values {
		k := ""
		switch v := v.(type) {
		case string:
			k = "string"
		case bool:
			k = "boolean"
		case json.Number:
			k = "number"
			if _, err := v.Int64(); err == nil {
				k = "integer"
			}
		default:
			return ""
		}
		if kind != "" && kind != k {
			if kind == "integer" && k == "number" || kind == "number" && k == "integer" {
				k = "number"
			} else {
				return ""
			}
		}
		kind = k
	}
	return kind
}

func isObjectSchema(node map[string]any) bool {
	if object, typed := typeNames(node, "object"); typed {
		return object
	}
	_, ok := node["properties"]
	return ok
}

// typeNames reports whether node's type keyword names the JSON type name;
// typed is false when node has no type keyword (a string or a list).
func typeNames(node map[string]any, name string) (names, typed bool) {
	switch t := node["type"].(type) {
	case string:
		return t == name, true
	case []any:
		return slices.Contains(t, any(name)), true
	}
	return false, false
}

// strictObject fills an object node: all properties, all required, no
// others, optional ones nullable.
func strictObject(node, out map[string]any, at string, depth int) error {
	props, _ := node["properties"].(map[string]any)
	if len(props) == 0 {
		if ap, ok := node["additionalProperties"]; !ok || ap != false {
			return fmt.Errorf("%s: strict mode cannot express an object with free-form keys", pointer(at))
		}
	}
	required := map[string]bool{}
	if r, ok := node["required"].([]any); ok {
		for _, n := range r {
			if s, ok := n.(string); ok {
				required[s] = true
			}
		}
	}
	names := slices.Sorted(maps.Keys(props))
	conv := make(map[string]any, len(props))
	for _, name := range names {
		pm, ok := props[name].(map[string]any)
		if !ok {
			return fmt.Errorf("%s/properties/%s: strict mode takes object schemas only", pointer(at), name)
		}
		c, err := strictNode(pm, at+"/properties/"+name, depth+1)
		if err != nil {
			return err
		}
		if !required[name] && !acceptsNull(pm) {
			c = nullable(c)
		}
		conv[name] = c
	}
	out["type"] = "object"
	out["properties"] = conv
	req := make([]any, len(names))
	for i, n := range names {
		req[i] = n
	}
	out["required"] = req
	out["additionalProperties"] = false
	return nil
}

// acceptsNull reports whether a property schema lets null through: its type
// names null, or it has neither a type nor anything else that would refuse
// null (then null is already a valid value).
func acceptsNull(node map[string]any) bool {
	if null, typed := typeNames(node, "null"); typed {
		return null
	}
	if e, ok := node["enum"].([]any); ok {
		return slices.Contains(e, nil)
	}
	if c, ok := node["const"]; ok {
		return c == nil
	}
	for _, k := range []string{"anyOf", "oneOf", "$ref", "properties", "items"} {
		if _, ok := node[k]; ok {
			return false
		}
	}
	return true
}

// nullable makes a converted node also accept null: a null type next to
// its type, a null branch in its anyOf, or an anyOf around a reference.
func nullable(node map[string]any) map[string]any {
	out := make(map[string]any, len(node))
	for k, v := range node {
		out[k] = v
	}
	if branches, ok := node["anyOf"].([]any); ok && node["$ref"] == nil {
		out["anyOf"] = append(slices.Clone(branches), map[string]any{"type": "null"})
		return out
	}
	if t, ok := node["type"].(string); ok && node["$ref"] == nil {
		out["type"] = []any{t, "null"}
		if e, ok := node["enum"].([]any); ok {
			out["enum"] = append(slices.Clone(e), nil)
		}
		if c, ok := node["const"]; ok {
			delete(out, "const")
			out["enum"] = []any{c, nil}
		}
		return out
	}
	desc, hasDesc := out["description"]
	delete(out, "description")
	wrapped := map[string]any{"anyOf": []any{out, map[string]any{"type": "null"}}}
	if hasDesc {
		wrapped["description"] = desc
	}
	return wrapped
}

// pointer names a place in the argument schema for a left_out reason.
func pointer(at string) string {
	if at == "" {
		return "the argument schema"
	}
	return "the argument schema at " + at
}
