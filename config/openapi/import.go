// Package openapi drafts a toolgate policy from an OpenAPI 3.0/3.1 or
// Swagger 2.0 document: one tool per operation, with its argument schema,
// request binding and side effect filled in, and `# TODO:` comments where a
// person must decide (response shaping, error rules, cost, timeouts).
//
// The draft is meant to be read and edited, but it is valid as written: Import
// compiles it exactly as `toolgate check` does before returning it, and an
// operation whose tool would not compile is left out with a comment saying
// why.
//
// # Conventions
//
// Names. A tool is named after its operationId, mapped to [A-Za-z0-9_.-]
// (other runs of characters become "_"); an operation without one is named
// from its method and path (GET /tickets/{id}/comments becomes
// get_tickets_by_id_comments). Names longer than 64 characters keep 55 and
// get 8 hex digits of the full name's SHA-256; two operations whose names
// still collide get _2, _3, ... in output order. Output order is by path,
// then method (GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS), so names are
// stable for a given document, whatever -operations selects.
//
// Arguments. Path parameters (required), then query parameters, then the
// top-level properties of an object JSON request body become the tool's
// arguments, named after the parameter or property. A name taken by an
// earlier argument gets the prefix of its place (query_x, body_x); a
// side-effecting tool's own idempotency_key argument is reserved, so a
// parameter of that name becomes query_idempotency_key or
// body_idempotency_key. The binding maps the backend's names to the
// arguments, so nothing changes on the wire.
//
// Request bodies. toolgate sends a JSON object whose top-level fields are
// arguments. An object body (allOf members are merged) is bound field by
// field; a body that is an array, a scalar, a oneOf/anyOf of alternatives,
// a free-form map, or not JSON (form, multipart, binary) is not bound, and a
// TODO comment says so: such an operation needs a backend-side adapter or a
// hand-written binding. The required fields of a bound body are required
// arguments even when the document leaves requestBody.required out, as most
// documents do. A JSON media type other than application/json gets a TODO:
// toolgate sends application/json.
//
// Form bodies (application/x-www-form-urlencoded, when no JSON is offered)
// are bound like JSON ones, with encoding: form. Object fields of a body are
// written as nested shapes whose leaves are arguments (two levels deep);
// arrays of objects, free-form maps and exactly-one-member objects stay one
// argument; a body that is not an object is one argument named body.
//
// Header parameters are bound to arguments, except those that carry a
// credential (see policydoc.SecretName), those toolgate or the upstream's auth sets,
// and Accept, Content-Type and Authorization, which OpenAPI ignores; cookie
// parameters get a TODO. An Idempotency-Key header on a side-effecting
// operation instead gets the suggestion to forward toolgate's key with
// idempotency.forward_header.
//
// Credentials. Each operation sends the first alternative of its security
// requirement (its own, or the document's) that toolgate supports: an API
// key in a header, the query or a cookie, HTTP basic or bearer, OAuth2
// client credentials (other OAuth2 flows as a bearer token obtained out of
// band); a comment says when there were others. One scheme that serves
// every operation is the upstream's auth; operations that need different
// ones, or some none, get named credentials (upstreams.<name>.credentials,
// named from their schemes) and each tool names its own (credential). An
// operation without a requirement sends none. Secrets are ${VAR}s named
// from the scheme (see draftAuth); Draft.Env names the variables, which
// toolgate check needs set.
//
// Side effects. POST, PUT, PATCH and DELETE get side_effect: true, which
// makes toolgate require an idempotency key and run the call at most once
// per key. An operation with the extension `x-idempotent: true` is declared
// safe to repeat: it gets side_effect: false (no key, retried like a read).
// PUT and DELETE are not treated as idempotent on HTTP semantics alone,
// because many backends attach side effects (notifications, audit entries,
// version bumps) to them. `x-toolgate-side-effect: true|false` overrides
// both rules, for example for a GET that triggers work.
//
// Schemas. Argument schemas are JSON Schema 2020-12: nullable becomes a type
// union with "null", example becomes examples, readOnly properties are left
// out, and discriminator, xml, externalDocs and x-* keywords are dropped.
// References are inlined; recursive schemas, and all named schemas of a tool
// whose inlined schema would be very large, go to the schema's $defs.
// Patterns that Go's RE2 cannot compile are dropped with a comment. A
// PATCH tool's schema has no defaults: toolgate fills defaults in before
// sending, which would overwrite the fields a PATCH means to leave alone.
//
// Comments. Each tool says where it came from and carries TODO comments:
// cost and timeout, a suggested response.data/empty for the first 2xx
// answer (CEL that compiles as written), and the documented error answers
// with the status toolgate's default table gives each. Suggested blocks are
// indented so that removing "# " makes them part of the tool.
//
// External references ($ref to other files or URLs) are refused: the
// importer never reads anything but the document it is given.
package openapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/getkin/kin-openapi/openapi2"
	"github.com/getkin/kin-openapi/openapi2conv"
	"github.com/getkin/kin-openapi/openapi3"
	"go.yaml.in/yaml/v3"

	"github.com/toolgate/toolgate/config/policydoc"
)

// Options tune an import. The zero value imports every operation into an
// upstream named after the document's title.
type Options struct {
	// Upstream names the upstream the tools call. Empty means the document's
	// info.title in lower case with other characters replaced by "_", or
	// "api".
	Upstream string
	// Operations selects the operations to import, by operationId or by the
	// tool name the importer gives an operation without one. Empty selects
	// every operation.
	Operations []string
	// SpecName names the document in error messages and in the draft's
	// header comment. Empty means "openapi".
	SpecName string
}

// Draft is the result of an import.
type Draft struct {
	// YAML is the policy draft: version, upstreams and tools, with comments.
	YAML []byte
	// Tools are the imported tools, in the order they appear in YAML.
	Tools []Tool
	// Skipped are the selected operations that did not become a tool.
	Skipped []Skipped
	// Env names the environment variables the draft reads (the upstream's
	// credentials); toolgate check needs them set.
	Env []string
}

// Tool is one imported operation.
type Tool struct {
	Name        string
	OperationID string // empty when the document gives none
	Method      string
	Path        string
	SideEffect  bool
}

// Skipped is a selected operation that was not imported, and why.
type Skipped struct {
	OperationID string
	Method      string
	Path        string
	Reason      string
}

// Errors an import can wrap.
var (
	// ErrUnknownOperation: Options.Operations names an operation the
	// document does not have.
	ErrUnknownOperation = errors.New("unknown operation")
	// ErrInvalidOptions: an Options field is not usable (an upstream name
	// with characters toolgate does not accept).
	ErrInvalidOptions = errors.New("invalid options")
	// ErrInvalidDocument: the document is not an OpenAPI 3.x or Swagger 2.0
	// document that can be read without fetching anything.
	ErrInvalidDocument = errors.New("invalid OpenAPI document")
	// ErrTooLarge: the draft would be larger than a policy file may be;
	// select fewer operations.
	ErrTooLarge = errors.New("draft too large")
)

var upstreamNameRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// Import drafts a policy from an OpenAPI 3.0/3.1 or Swagger 2.0 document
// (YAML or JSON). The draft compiles as written.
func Import(doc []byte, opts Options) (*Draft, error) {
	b, tools, skipped, err := draft(doc, opts, loaderKnowsResponseSchema())
	if err != nil {
		return nil, err
	}
	return b.finish(tools, skipped)
}

// draft builds the tools of an import; schemaKey says whether they get
// response.schema.
func draft(doc []byte, opts Options, schemaKey bool) (*builder, []*toolDraft, []Skipped, error) {
	spec := opts.SpecName
	if spec == "" {
		spec = "openapi"
	}
	if opts.Upstream != "" && !upstreamNameRE.MatchString(opts.Upstream) {
		return nil, nil, nil, fmt.Errorf("%w: upstream name %q may only contain letters, digits, '_', '.' and '-' (at most 64)", ErrInvalidOptions, opts.Upstream)
	}
	d, kind, err := load(doc)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%s: %w", spec, err)
	}
	ops, unsupported := collectOperations(d)
	selected, err := selectOperations(ops, unsupported, opts.Operations)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%s: %w", spec, err)
	}
	b := &builder{doc: d, spec: spec, kind: kind}
	b.upstream = opts.Upstream
	if b.upstream == "" {
		b.upstream = upstreamFromTitle(d)
	}
	var usable []*operation
	for _, op := range selected {
		if op.unsupported == "" {
			usable = append(usable, op)
		}
	}
	b.auth = b.draftAuth(usable)
	b.schemaKey = schemaKey
	var tools []*toolDraft
	var skipped []Skipped
	for _, op := range selected {
		if op.unsupported != "" {
			skipped = append(skipped, Skipped{OperationID: op.op.OperationID, Method: op.method, Path: op.path, Reason: op.unsupported})
			continue
		}
		tools = append(tools, b.tool(op))
	}
	return b, tools, skipped, nil
}

// load reads a document of either generation into an OpenAPI 3 model with
// every local reference resolved. External references are refused.
func load(data []byte) (doc *openapi3.T, kind string, err error) {
	// The parser is a library reading untrusted input; a panic in it must
	// become an error for this document, not end the process.
	defer func() {
		if r := recover(); r != nil {
			doc, err = nil, fmt.Errorf("%w: the parser failed: %v", ErrInvalidDocument, r)
		}
	}()
	var head struct {
		Swagger any `yaml:"swagger" json:"swagger"`
		OpenAPI any `yaml:"openapi" json:"openapi"`
	}
	if err := yaml.Unmarshal(data, &head); err != nil {
		// JSON that YAML refuses (control characters in strings).
		if jerr := json.Unmarshal(data, &head); jerr != nil {
			return nil, "", fmt.Errorf("%w: not a YAML or JSON document: %s", ErrInvalidDocument, strings.TrimPrefix(err.Error(), "yaml: "))
		}
	}
	switch {
	case head.Swagger != nil:
		if v := fmt.Sprint(head.Swagger); v != "2.0" && v != "2" {
			return nil, "", fmt.Errorf("%w: swagger version %q is not supported (want 2.0)", ErrInvalidDocument, v)
		}
		var d2 openapi2.T
		if err := openapi2.UnmarshalFromData(data, &d2); err != nil {
			return nil, "", fmt.Errorf("%w: %v", ErrInvalidDocument, err)
		}
		d3, err := openapi2conv.ToV3(&d2)
		if err != nil {
			return nil, "", fmt.Errorf("%w: converting Swagger 2.0: %v", ErrInvalidDocument, err)
		}
		return d3, "Swagger 2.0", nil
	case head.OpenAPI != nil:
		v := fmt.Sprint(head.OpenAPI)
		if v != "3" && !strings.HasPrefix(v, "3.") {
			return nil, "", fmt.Errorf("%w: openapi version %q is not supported (want 3.x)", ErrInvalidDocument, v)
		}
		loader := openapi3.NewLoader()
		loader.IsExternalRefsAllowed = false
		d3, err := loader.LoadFromData(data)
		if err != nil {
			var ext *openapi3.DisallowedExternalRefError
			if errors.As(err, &ext) {
				return nil, "", fmt.Errorf("%w: $ref %q points outside the document; the importer reads nothing else, so bundle the document into one file first", ErrInvalidDocument, ext.Ref)
			}
			return nil, "", fmt.Errorf("%w: %v", ErrInvalidDocument, err)
		}
		return d3, "OpenAPI " + v, nil
	}
	return nil, "", fmt.Errorf("%w: neither \"openapi: 3.x\" nor \"swagger: 2.0\" is set", ErrInvalidDocument)
}

// operation is one method on one path of the document.
type operation struct {
	method      string
	path        string
	item        *openapi3.PathItem
	op          *openapi3.Operation
	name        string // tool name
	unsupported string // why toolgate cannot bind it, when not empty
}

// methodOrder is the output order of methods on one path; these are the
// methods a toolgate binding supports.
var methodOrder = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions}

// collectOperations lists the document's operations sorted by path, then
// method, and names them. Operations with a method toolgate cannot send
// (TRACE, QUERY, ...) come back separately.
func collectOperations(doc *openapi3.T) (ops, unsupported []*operation) {
	if doc.Paths == nil {
		return nil, nil
	}
	pathMap := doc.Paths.Map()
	for _, path := range slices.Sorted(maps.Keys(pathMap)) {
		item := pathMap[path]
		if item == nil {
			continue
		}
		byMethod := item.Operations()
		for _, m := range methodOrder {
			if op := byMethod[m]; op != nil {
				ops = append(ops, &operation{method: m, path: path, item: item, op: op})
			}
		}
		for _, m := range slices.Sorted(maps.Keys(byMethod)) {
			if op := byMethod[m]; op != nil && !supportedMethod(m) {
				unsupported = append(unsupported, &operation{method: m, path: path, item: item, op: op,
					unsupported: fmt.Sprintf("toolgate bindings cannot send the %s method", m)})
			}
		}
	}
	names := policydoc.NewNamer()
	for _, op := range ops {
		base := policydoc.Sanitize(op.op.OperationID)
		if base == "" {
			base = policydoc.DerivedName(op.method, op.path)
		}
		op.name = names.Take(base)
	}
	return ops, unsupported
}

func supportedMethod(m string) bool {
	for _, s := range methodOrder {
		if s == m {
			return true
		}
	}
	return false
}

// selectOperations keeps the operations named in want (by operationId or
// tool name), in output order; an empty want keeps all of them.
func selectOperations(ops, unsupported []*operation, want []string) ([]*operation, error) {
	all := append(append([]*operation(nil), ops...), unsupported...)
	if len(want) == 0 {
		return all, nil
	}
	wanted := map[string]bool{}
	for _, w := range want {
		if w = strings.TrimSpace(w); w != "" {
			wanted[w] = true
		}
	}
	found := map[string]bool{}
	var out []*operation
	for _, op := range all {
		id := op.op.OperationID
		if (id != "" && wanted[id]) || (op.name != "" && wanted[op.name]) {
			out = append(out, op)
			found[id], found[op.name] = true, true
		}
	}
	var missing []string
	for w := range wanted {
		if !found[w] {
			missing = append(missing, w)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		var known []string
		for _, op := range all {
			if op.op.OperationID != "" {
				known = append(known, op.op.OperationID)
			} else if op.name != "" {
				known = append(known, op.name)
			}
		}
		return nil, fmt.Errorf("%w %s (the document has: %s)", ErrUnknownOperation, strings.Join(quoteAll(missing), ", "), strings.Join(known, ", "))
	}
	return out, nil
}

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = fmt.Sprintf("%q", s)
	}
	return out
}

// upstreamFromTitle derives an upstream name from info.title:
// "Helpdesk API" becomes helpdesk_api.
func upstreamFromTitle(doc *openapi3.T) string {
	if doc.Info == nil {
		return "api"
	}
	name := policydoc.Shorten(policydoc.Sanitize(strings.ToLower(strings.ReplaceAll(doc.Info.Title, ".", " "))))
	if name == "" {
		return "api"
	}
	return name
}

// loaderKnowsResponseSchema says whether the policy loader accepts
// response.schema. The key is being added to the policy; until it is, the
// draft leaves it out, since it must compile as written.
func loaderKnowsResponseSchema() bool {
	const probe = "version: 1\nupstreams: {u: {url: \"http://127.0.0.1:1\"}}\ntools: {t: {description: d, upstream: u, request: {path: /}, response: {schema: {type: object}}}}\n"
	return policydoc.Check("probe", []byte(probe)) == nil
}
