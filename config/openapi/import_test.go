package openapi

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/config/policydoc"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// specs lists the documents under testdata; each has a golden draft next
// to it (name.golden.yaml).
func specs(t testing.TB) []string {
	t.Helper()
	var out []string
	for _, pattern := range []string{"testdata/*.yaml", "testdata/*.json"} {
		m, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range m {
			if !strings.HasSuffix(f, ".golden.yaml") {
				out = append(out, f)
			}
		}
	}
	if len(out) < 2 {
		t.Fatalf("want at least two documents under testdata, found %v", out)
	}
	return out
}

func goldenName(spec string) string {
	return strings.TrimSuffix(spec, filepath.Ext(spec)) + ".golden.yaml"
}

func importFile(t *testing.T, spec string, opts Options) *Draft {
	t.Helper()
	data, err := os.ReadFile(spec)
	if err != nil {
		t.Fatal(err)
	}
	if opts.SpecName == "" {
		opts.SpecName = filepath.Base(spec)
	}
	d, err := Import(data, opts)
	if err != nil {
		t.Fatalf("Import(%s): %v", spec, err)
	}
	return d
}

func TestImportMatchesGoldenFiles(t *testing.T) {
	for _, spec := range specs(t) {
		t.Run(filepath.Base(spec), func(t *testing.T) {
			d := importFile(t, spec, Options{})
			golden := goldenName(spec)
			if *update {
				if err := os.WriteFile(golden, d.YAML, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./config/openapi -update to create it)", err)
			}
			if !bytes.Equal(d.YAML, want) {
				t.Errorf("the draft of %s differs from %s (run go test ./config/openapi -update and review the diff):\n%s",
					spec, golden, firstDiff(string(want), string(d.YAML)))
			}
		})
	}
}

func firstDiff(want, got string) string {
	wl, gl := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < len(wl) || i < len(gl); i++ {
		var w, g string
		if i < len(wl) {
			w = wl[i]
		}
		if i < len(gl) {
			g = gl[i]
		}
		if w != g {
			return "line " + strconv.Itoa(i+1) + ":\n  want: " + w + "\n  got:  " + g
		}
	}
	return "(no line differs)"
}

func TestGoldenDraftsPassToolgateCheck(t *testing.T) {
	for _, spec := range specs(t) {
		golden := goldenName(spec)
		t.Run(filepath.Base(golden), func(t *testing.T) {
			text, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			snap, err := config.CompileSource(golden, text, config.Options{LookupEnv: policydoc.PlaceholderEnv(draftEnv(text))})
			if err != nil {
				t.Fatalf("toolgate check fails on the draft as written:\n%v", err)
			}
			if len(snap.Tools) == 0 {
				t.Fatal("the draft has no tools")
			}
		})
	}
}

var envRef = regexp.MustCompile(`(?:^|[^$])\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// draftEnv lists the variables a draft reads, as toolgate check would need
// them set.
func draftEnv(text []byte) []string {
	var out []string
	for _, m := range envRef.FindAllSubmatch(text, -1) {
		if n := string(m[1]); !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

// suggestionStart matches the first line of a commented-out suggestion the
// draft offers to uncomment: a whole block, or a data or empty expression
// under a response block that already holds the answer's schema.
var suggestionStart = regexp.MustCompile(`^( *)# (response:|errors:|idempotency: |data: |empty: )`)

// uncommentSuggestions turns the draft's suggested response, errors and
// idempotency blocks into policy text, as a person accepting them would.
func uncommentSuggestions(text string) (string, int) {
	lines := strings.Split(text, "\n")
	n := 0
	for i := 0; i < len(lines); i++ {
		m := suggestionStart.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		indent := m[1]
		lines[i] = indent + strings.TrimPrefix(lines[i], indent+"# ")
		n++
		for i+1 < len(lines) && strings.HasPrefix(lines[i+1], indent+"#   ") {
			i++
			lines[i] = indent + strings.TrimPrefix(lines[i], indent+"# ")
		}
	}
	return strings.Join(lines, "\n"), n
}

func TestSuggestionsCompileWhenUncommented(t *testing.T) {
	for _, spec := range specs(t) {
		golden := goldenName(spec)
		t.Run(filepath.Base(golden), func(t *testing.T) {
			text, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			accepted, n := uncommentSuggestions(string(text))
			if n == 0 && !strings.Contains(string(text), "\n      data: ") {
				// A draft whose only suggestion was data writes it
				// itself where the answer holds credentials.
				t.Fatal("the draft offers no suggestion to uncomment")
			}
			if _, err := config.CompileSource(golden, []byte(accepted), config.Options{LookupEnv: policydoc.PlaceholderEnv(draftEnv([]byte(accepted)))}); err != nil {
				t.Fatalf("the draft with its %d suggestions uncommented does not compile:\n%v", n, err)
			}
		})
	}
}

func TestToolsAndArgumentsFollowTheConventions(t *testing.T) {
	d := importFile(t, "testdata/helpdesk-3.0.yaml", Options{})
	tools := map[string]Tool{}
	for _, tl := range d.Tools {
		tools[tl.Name] = tl
	}
	for name, want := range map[string]bool{
		"listTickets":                       false,
		"createTicket":                      true,
		"getTicket":                         false,
		"replaceTicket":                     false, // PUT marked x-idempotent: true
		"updateTicket":                      true,
		"deleteTicket":                      true, // DELETE is not idempotent by method alone
		"post_tickets_by_ticketId_comments": true, // no operationId
		"tickets.byRequester":               false,
	} {
		tl, ok := tools[name]
		if !ok {
			t.Errorf("tool %s is missing; got %v", name, toolNames(d))
			continue
		}
		if tl.SideEffect != want {
			t.Errorf("tool %s: side effect %v, want %v", name, tl.SideEffect, want)
		}
	}
	text := string(d.YAML)
	for _, want := range []string{
		// A body field named like a path argument is renamed, and bound under its own name.
		"ticketId: body_ticketId",
		// A side-effecting tool's idempotency_key argument is reserved.
		"idempotency_key: body_idempotency_key",
		// A query parameter with characters arguments cannot have.
		"filter[priority]: filter_priority",
		// nullable becomes a type union; the boolean exclusiveMinimum the numeric form.
		`assignee: {type: [string, "null"]`,
		"estimate_hours: {type: number, exclusiveMinimum: 0, maximum: 1000}",
		// A recursive schema goes to $defs.
		"$ref: '#/$defs/ChecklistItem'",
		// A header toolgate sets, cookies and multipart bodies are left to
		// a person; a oneOf body is one argument.
		"The header parameter X-Request-Id (optional) is not an argument: toolgate sets it.",
		"cookie parameter session (optional) is not sent",
		"The request body is a oneOf of AssignAction | CloseAction: the argument body is the whole",
		"the request body is multipart/form-data; toolgate sends JSON and form bodies only",
		"idempotency: {forward_header: Idempotency-Key}",
		"url: https://eu.helpdesk.example.com/api/v2 #",
		// A POST keeps the document's defaults; a PATCH does not, since
		// toolgate would send them and overwrite fields left alone.
		"priority: {type: string, enum: [low, normal, high, urgent], default: normal}",
		"priority: {type: string, enum: [low, normal, high, urgent]}\n",
		"the document gives the body as application/merge-patch+json",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the draft lacks %q", want)
		}
	}
	for _, unwanted := range []string{"readOnly", "nullable", "discriminator", "xml:", "externalDocs", "created_at: {type: string, format: date-time}\n        id:"} {
		if strings.Contains(text, unwanted) {
			t.Errorf("the draft contains %q", unwanted)
		}
	}
}

func toolNames(d *Draft) []string {
	var out []string
	for _, t := range d.Tools {
		out = append(out, t.Name)
	}
	return out
}

func TestSwaggerConventions(t *testing.T) {
	d := importFile(t, "testdata/petstore-swagger2.yaml", Options{Upstream: "petstore"})
	side := map[string]bool{}
	for _, tl := range d.Tools {
		side[tl.Name] = tl.SideEffect
	}
	if !side["loginUser"] {
		t.Error("loginUser: x-toolgate-side-effect: true on a GET must make it side-effecting")
	}
	if side["deleteOrder"] {
		t.Error("deleteOrder: x-idempotent: true on a DELETE must make it read-only")
	}
	if !side["addPet"] || side["getPetById"] {
		t.Error("addPet must be side-effecting and getPetById not")
	}
	text := string(d.YAML)
	for _, want := range []string{
		"url: https://petstore.swagger.io/v2",
		"upstream: petstore",
		"username: body_username",
		"encoding: form",
		"The request body is an array of User: the argument body is the whole body.",
		"The document marks this operation deprecated.",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the draft lacks %q", want)
		}
	}
}

func TestOperationsFilterKeepsNamesStable(t *testing.T) {
	all := importFile(t, "testdata/inventory-3.1.yaml", Options{})
	if got, want := toolNames(all), []string{"search_items", "search_items_2", "adjustStockLevelOfASingleItemInTheWarehouseAndNotifyThe_f9a40707", "put_items_by_sku_tags"}; !slices.Equal(got, want) {
		t.Fatalf("tools %v, want %v", got, want)
	}
	cases := []struct {
		name string
		ops  []string
		want []string
	}{
		{"by operationId, in document order", []string{"search_items", "search items"}, []string{"search_items", "search_items_2"}},
		{"by the derived name of an operation without operationId", []string{"put_items_by_sku_tags"}, []string{"put_items_by_sku_tags"}},
		{"a long operationId keeps its shortened name", []string{"adjustStockLevelOfASingleItemInTheWarehouseAndNotifyTheReplenishmentPlanner"},
			[]string{"adjustStockLevelOfASingleItemInTheWarehouseAndNotifyThe_f9a40707"}},
		{"by tool name", []string{"search_items_2"}, []string{"search_items_2"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := importFile(t, "testdata/inventory-3.1.yaml", Options{Operations: c.ops})
			if got := toolNames(d); !slices.Equal(got, c.want) {
				t.Errorf("tools %v, want %v", got, c.want)
			}
			if err := policydoc.Check("filtered", d.YAML); err != nil {
				t.Error(err)
			}
		})
	}
	t.Run("an unsupported method is reported, not imported", func(t *testing.T) {
		d := importFile(t, "testdata/inventory-3.1.yaml", Options{Operations: []string{"traceItems"}})
		if len(d.Tools) != 0 || len(d.Skipped) != 1 || d.Skipped[0].Method != "TRACE" {
			t.Errorf("tools %v, skipped %+v", toolNames(d), d.Skipped)
		}
		if err := policydoc.Check("empty", d.YAML); err != nil {
			t.Errorf("a draft without tools must still compile: %v", err)
		}
	})
}

const smallJSON = `{
  "openapi": "3.0.3",
  "info": {"title": "Small", "version": "1"},
  "paths": {
    "/things/{id}": {
      "get": {
        "operationId": "getThing",
        "parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "string"}}],
        "responses": {"200": {"description": "ok"}}
      }
    }
  }
}`

func TestImportErrors(t *testing.T) {
	cases := []struct {
		name string
		doc  string
		opts Options
		is   error
		msg  string
	}{
		{"an unknown operation id", smallJSON, Options{Operations: []string{"getThing", "deleteThing"}}, ErrUnknownOperation, `"deleteThing" (the document has: getThing)`},
		{"a document that is not YAML", "openapi: [3.0\n  : }", Options{}, ErrInvalidDocument, "not a YAML or JSON document"},
		{"a document without a version", "info: {title: x}\npaths: {}\n", Options{}, ErrInvalidDocument, `neither "openapi: 3.x" nor "swagger: 2.0"`},
		{"Swagger 1.2", `{"swagger": "1.2"}`, Options{}, ErrInvalidDocument, `swagger version "1.2"`},
		{"OpenAPI 4", "openapi: 4.0.0\n", Options{}, ErrInvalidDocument, `openapi version "4.0.0"`},
		{"a reference to another file", strings.Replace(smallJSON, `{"type": "string"}`, `{"$ref": "other.yaml#/Id"}`, 1), Options{}, ErrInvalidDocument, "other.yaml"},
		{"a reference to a URL", strings.Replace(smallJSON, `{"type": "string"}`, `{"$ref": "https://example.com/s.json#/Id"}`, 1), Options{}, ErrInvalidDocument, "example.com"},
		{"an upstream name with spaces", smallJSON, Options{Upstream: "my api"}, ErrInvalidOptions, `upstream name "my api"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d, err := Import([]byte(c.doc), Options{SpecName: "spec.yaml", Operations: c.opts.Operations, Upstream: c.opts.Upstream})
			if err == nil {
				t.Fatalf("no error; draft:\n%s", d.YAML)
			}
			if !errors.Is(err, c.is) {
				t.Errorf("error %q is not %v", err, c.is)
			}
			if !strings.Contains(err.Error(), c.msg) {
				t.Errorf("error %q does not say %q", err, c.msg)
			}
		})
	}
}

func TestImportReadsJSON(t *testing.T) {
	d, err := Import([]byte(smallJSON), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := toolNames(d); !slices.Equal(got, []string{"getThing"}) {
		t.Errorf("tools %v", got)
	}
	for _, want := range []string{"small:\n", "url: http://127.0.0.1:8000 # TODO", "imported from openapi (Small 1, OpenAPI 3.0.3)"} {
		if !strings.Contains(string(d.YAML), want) {
			t.Errorf("the draft lacks %q:\n%s", want, d.YAML)
		}
	}
}

func TestDollarBracesInTheDocumentStayLiteral(t *testing.T) {
	doc := strings.Replace(smallJSON, `"operationId": "getThing",`, `"operationId": "getThing", "summary": "Costs ${PRICE} per call",`, 1)
	d, err := Import([]byte(doc), Options{})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := config.CompileSource("x", d.YAML, config.Options{LookupEnv: policydoc.PlaceholderEnv(d.Env)})
	if err != nil {
		t.Fatal(err)
	}
	if got := snap.Tools["getThing"].Description; got != "Costs ${PRICE} per call" {
		t.Errorf("description %q", got)
	}
}

func TestAToolThatDoesNotCompileIsLeftOutWithAComment(t *testing.T) {
	doc := `openapi: 3.0.3
info: {title: Odd, version: "1"}
paths:
  /files/{name}{ext}:
    get:
      operationId: getFile
      parameters:
        - {name: name, in: path, required: true, schema: {type: string}}
        - {name: ext, in: path, required: true, schema: {type: string}}
      responses: {"200": {description: ok}}
  /pairs/{id}/with/{id}:
    get:
      operationId: getPair
      parameters:
        - {name: id, in: path, required: true, schema: {type: string}}
      responses: {"200": {description: ok}}
`
	d, err := Import([]byte(doc), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := toolNames(d); !slices.Equal(got, []string{"getPair"}) {
		t.Errorf("tools %v, want [getPair]", got)
	}
	if len(d.Skipped) != 1 || d.Skipped[0].OperationID != "getFile" || !strings.Contains(d.Skipped[0].Reason, "request.path: two placeholders must be separated by a literal") {
		t.Errorf("skipped %+v", d.Skipped)
	}
	text := string(d.YAML)
	for _, want := range []string{"# - GET /files/{name}{ext} (operationId getFile): the generated tool does not compile", "path: /pairs/{id}/with/{id}\n"} {
		if !strings.Contains(text, want) {
			t.Errorf("the draft lacks %q:\n%s", want, text)
		}
	}
}
