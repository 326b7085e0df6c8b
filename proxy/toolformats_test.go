package proxy_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/internal/testkit/mcptest"
	"github.com/toolgate/toolgate/proxy/mcpfront"
	"github.com/toolgate/toolgate/proxy/toolformats"
)

// formatTools are tools whose argument schemas use what the model APIs
// take differently; they are added to the example policy.
const formatTools = `
  profile.update:
    description: A name with a dot, which the model APIs refuse.
    upstream: search
    args: {type: object, properties: {q: {type: string}}}
    request: {method: GET, path: /api/search, query: {q: q}}
  book_meeting:
    description: Nested objects, arrays, formats, defaults and choices.
    upstream: search
    args:
      $schema: https://json-schema.org/draft/2020-12/schema
      type: object
      required: [title, attendees]
      additionalProperties: false
      $defs:
        person:
          type: object
          required: [email]
          properties:
            email: {type: string, format: email}
            name: {type: string, minLength: 1, maxLength: 80}
      properties:
        title: {type: string, minLength: 1, maxLength: 200, description: What the meeting is about}
        attendees: {type: array, minItems: 1, maxItems: 20, uniqueItems: true, items: {$ref: "#/$defs/person"}}
        organizer: {$ref: "#/$defs/person"}
        room: {type: object, properties: {building: {type: string}, floor: {type: integer, minimum: 0}}}
        priority: {enum: [low, normal, high], default: normal}
        link: {type: string, format: uri}
        length: {oneOf: [{type: integer, minimum: 15}, {type: string, enum: [all-day]}]}
        notes: {type: [string, "null"]}
    request: {method: GET, path: /api/search, query: {q: title}}
  free_form:
    description: An object with keys of the caller's choosing.
    upstream: search
    args: {type: object, properties: {labels: {type: object, additionalProperties: {type: string}}}}
    request: {method: GET, path: /api/search}
  conditional:
    description: A schema strict mode cannot express.
    upstream: search
    args: {type: object, properties: {q: {type: string}}, allOf: [{required: [q]}]}
    request: {method: GET, path: /api/search, query: {q: q}}
`

func formatsEnv(t *testing.T) *mcptest.Env {
	t.Helper()
	return mcptest.NewEnv(t, func(doc string) string {
		return strings.Replace(doc, "\ntools:\n", "\ntools:\n"+formatTools, 1)
	})
}

func getTools(t *testing.T, env *mcptest.Env, format string) (int, map[string]json.RawMessage) {
	t.Helper()
	resp, err := http.Get(env.Server.URL + "/v1/tools?format=" + format)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatalf("not JSON: %s", body)
	}
	return resp.StatusCode, m
}

func decodeEntries(t *testing.T, raw json.RawMessage) []map[string]any {
	t.Helper()
	var entries []map[string]any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&entries); err != nil {
		t.Fatal(err)
	}
	return entries
}

func keysOf(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// apiName is the tool name rule of OpenAI's and Anthropic's APIs.
var apiName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// TestToolListFormatsTakeEachAPIsShape checks every entry of each format
// against the constraints its API documents, and that what an API cannot
// take is left out with a reason rather than sent.
func TestToolListFormatsTakeEachAPIsShape(t *testing.T) {
	env := formatsEnv(t)
	snap := env.Core.Snapshot()
	cases := []struct {
		format   string
		leftOut  []string
		checkOne func(t *testing.T, e map[string]any) (name string)
	}{
		{"openai", []string{"profile.update"}, func(t *testing.T, e map[string]any) string {
			fn := checkOpenAIEntry(t, e, false)
			return fn["name"].(string)
		}},
		{"openai-strict", []string{"conditional", "free_form", "profile.update"}, func(t *testing.T, e map[string]any) string {
			fn := checkOpenAIEntry(t, e, true)
			checkStrictSchema(t, fn["name"].(string), fn["parameters"].(map[string]any), "", 0)
			return fn["name"].(string)
		}},
		{"openai-responses", []string{"profile.update"}, func(t *testing.T, e map[string]any) string {
			return checkResponsesEntry(t, e, false)
		}},
		{"openai-responses-strict", []string{"conditional", "free_form", "profile.update"}, func(t *testing.T, e map[string]any) string {
			name := checkResponsesEntry(t, e, true)
			checkStrictSchema(t, name, e["parameters"].(map[string]any), "", 0)
			return name
		}},
		{"anthropic", []string{"profile.update"}, func(t *testing.T, e map[string]any) string {
			for _, k := range keysOf(e) {
				if k != "name" && k != "description" && k != "input_schema" {
					t.Errorf("Anthropic takes no %q key in a tool: %v", k, keysOf(e))
				}
			}
			name, _ := e["name"].(string)
			if !apiName.MatchString(name) {
				t.Errorf("name %q is not an Anthropic tool name", name)
			}
			schema, _ := e["input_schema"].(map[string]any)
			if schema["type"] != "object" {
				t.Errorf("%s: input_schema must be an object schema: %v", name, schema)
			}
			return name
		}},
		{"mcp", nil, func(t *testing.T, e map[string]any) string {
			name := e["name"].(string)
			want, _ := json.Marshal(mcpfront.Tool(snap.Tools[name]))
			got, _ := json.Marshal(e)
			var w, g any
			_ = json.Unmarshal(want, &w)
			_ = json.Unmarshal(got, &g)
			if !jsonEqual(w, g) {
				t.Errorf("%s is not the tools/list entry:\n got  %s\n want %s", name, got, want)
			}
			return name
		}},
	}
	for _, tc := range cases {
		t.Run(tc.format, func(t *testing.T) {
			code, m := getTools(t, env, tc.format)
			if code != http.StatusOK {
				t.Fatalf("HTTP %d", code)
			}
			var names []string
			for _, e := range decodeEntries(t, m["tools"]) {
				names = append(names, tc.checkOne(t, e))
			}
			var left []toolformats.LeftOut
			if raw, ok := m["left_out"]; ok {
				if err := json.Unmarshal(raw, &left); err != nil {
					t.Fatal(err)
				}
			}
			var leftNames []string
			for _, l := range left {
				leftNames = append(leftNames, l.Name)
				if l.Reason == "" {
					t.Errorf("%s left out without a reason", l.Name)
				}
			}
			if !slices.Equal(leftNames, tc.leftOut) {
				t.Errorf("left out %v, want %v", left, tc.leftOut)
			}
			all := append(slices.Clone(names), leftNames...)
			sort.Strings(all)
			if !slices.Equal(all, snap.ToolNames) {
				t.Errorf("entries and left_out %v, want every tool %v", all, snap.ToolNames)
			}
		})
	}
	t.Run("the Responses entries are the Chat Completions functions, flat", func(t *testing.T) {
		for _, pair := range [][2]string{{"openai", "openai-responses"}, {"openai-strict", "openai-responses-strict"}} {
			_, chat := getTools(t, env, pair[0])
			_, responses := getTools(t, env, pair[1])
			chatEntries, respEntries := decodeEntries(t, chat["tools"]), decodeEntries(t, responses["tools"])
			if len(chatEntries) != len(respEntries) {
				t.Fatalf("%s lists %d tools, %s %d", pair[0], len(chatEntries), pair[1], len(respEntries))
			}
			for i, ce := range chatEntries {
				want := map[string]any{"type": "function", "strict": pair[1] == "openai-responses-strict"}
				for k, v := range ce["function"].(map[string]any) {
					want[k] = v
				}
				if !jsonEqual(want, respEntries[i]) {
					t.Errorf("%s entry\n got  %v\n want %v", pair[1], respEntries[i], want)
				}
			}
		}
	})
	t.Run("an unknown format is a 400 that lists the formats", func(t *testing.T) {
		code, m := getTools(t, env, "gemini")
		if code != http.StatusBadRequest || !strings.Contains(string(m["error"]), "openai-strict") {
			t.Errorf("HTTP %d %s", code, m["error"])
		}
	})
	t.Run("the list is filtered by caller in every format", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodGet, env.Server.URL+"/v1/tools?format=openai", nil)
		req.Header.Set("X-Toolgate-Caller", "research-agent")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m struct {
			Tools []struct{ Function struct{ Name string } }
		}
		_ = json.NewDecoder(resp.Body).Decode(&m)
		if len(m.Tools) != 1 || m.Tools[0].Function.Name != "search_articles" {
			t.Errorf("tools %+v, want only search_articles", m.Tools)
		}
	})
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

// checkOpenAIEntry checks the Chat Completions tool shape and returns its
// function object.
func checkOpenAIEntry(t *testing.T, e map[string]any, strict bool) map[string]any {
	t.Helper()
	if got := keysOf(e); !slices.Equal(got, []string{"function", "type"}) || e["type"] != "function" {
		t.Fatalf("want {type: function, function}, got %v", e)
	}
	fn := e["function"].(map[string]any)
	for _, k := range keysOf(fn) {
		if !slices.Contains([]string{"name", "description", "parameters", "strict"}, k) {
			t.Errorf("OpenAI takes no %q key in a function", k)
		}
	}
	name, _ := fn["name"].(string)
	if !apiName.MatchString(name) {
		t.Errorf("name %q does not match ^[a-zA-Z0-9_-]{1,64}$", name)
	}
	if (fn["strict"] == true) != strict {
		t.Errorf("%s: strict = %v, want %v", name, fn["strict"], strict)
	}
	params, _ := fn["parameters"].(map[string]any)
	if params["type"] != "object" {
		t.Errorf("%s: parameters must be an object schema", name)
	}
	if _, ok := params["$schema"]; ok {
		t.Errorf("%s: parameters carry $schema", name)
	}
	return fn
}

// checkResponsesEntry checks a Responses API function tool against the
// JSON Schema written from its reference (testdata), and that it carries
// the tool's own name, description and strictness, and returns the name.
func checkResponsesEntry(t *testing.T, e map[string]any, strict bool) string {
	t.Helper()
	c := jsonschema.NewCompiler()
	sch, err := c.Compile("testdata/openai-responses-function-tool.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(e)
	inst, _ := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err := sch.Validate(inst); err != nil {
		t.Errorf("not a Responses API function tool: %v\n%s", err, raw)
	}
	name, _ := e["name"].(string)
	if e["strict"] != strict {
		t.Errorf("%s: strict = %v, want %v (the Responses API defaults to true)", name, e["strict"], strict)
	}
	if _, ok := e["parameters"].(map[string]any)["$schema"]; ok {
		t.Errorf("%s: parameters carry $schema", name)
	}
	return name
}

// checkStrictSchema checks the subset OpenAI's strict mode takes: every
// object lists all its properties as required and forbids others; only
// supported keywords and formats; no anyOf at the root; at most 10 levels.
func checkStrictSchema(t *testing.T, tool string, node map[string]any, at string, depth int) {
	t.Helper()
	allowed := []string{"type", "properties", "required", "additionalProperties", "items", "anyOf", "$defs", "$ref",
		"description", "enum", "const", "pattern", "format", "minimum", "maximum", "exclusiveMinimum",
		"exclusiveMaximum", "multipleOf", "minItems", "maxItems"}
	if depth > 10 {
		t.Errorf("%s%s: deeper than 10 levels", tool, at)
	}
	if at == "" {
		if _, ok := node["anyOf"]; ok {
			t.Errorf("%s: anyOf at the root", tool)
		}
	}
	for _, k := range keysOf(node) {
		if !slices.Contains(allowed, k) {
			t.Errorf("%s%s: strict mode does not take %q", tool, at, k)
		}
	}
	if f, ok := node["format"].(string); ok && !slices.Contains([]string{"date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid"}, f) {
		t.Errorf("%s%s: format %q is not supported", tool, at, f)
	}
	if props, ok := node["properties"].(map[string]any); ok {
		if node["additionalProperties"] != false {
			t.Errorf("%s%s: additionalProperties must be false", tool, at)
		}
		var req []string
		for _, r := range node["required"].([]any) {
			req = append(req, r.(string))
		}
		sort.Strings(req)
		if !slices.Equal(req, keysOf(props)) {
			t.Errorf("%s%s: required %v, want every property %v", tool, at, req, keysOf(props))
		}
		for name, p := range props {
			checkStrictSchema(t, tool, p.(map[string]any), at+"/properties/"+name, depth+1)
		}
	} else if node["type"] == "object" {
		t.Errorf("%s%s: an object without properties", tool, at)
	}
	if items, ok := node["items"].(map[string]any); ok {
		checkStrictSchema(t, tool, items, at+"/items", depth+1)
	}
	if branches, ok := node["anyOf"].([]any); ok {
		for i, b := range branches {
			checkStrictSchema(t, tool, b.(map[string]any), at+"/anyOf/"+string(rune('0'+i)), depth+1)
		}
	}
	if defs, ok := node["$defs"].(map[string]any); ok {
		for name, d := range defs {
			checkStrictSchema(t, tool, d.(map[string]any), at+"/$defs/"+name, depth+1)
		}
	}
}

// TestStrictModeArgumentsAreServed: what a strict-mode model sends (every
// argument, null for the ones it leaves out) fits the published strict
// schema and is served as if the nulls were absent.
func TestStrictModeArgumentsAreServed(t *testing.T) {
	env := formatsEnv(t)
	_, m := getTools(t, env, "openai-strict")
	strict := map[string]map[string]any{}
	for _, e := range decodeEntries(t, m["tools"]) {
		fn := e["function"].(map[string]any)
		strict[fn["name"].(string)] = fn["parameters"].(map[string]any)
	}
	cases := []struct {
		tool, args string
		status     contracts.Status
	}{
		{"search_articles", `{"q":"go","limit":null}`, contracts.StatusOK},
		{"search_articles", `{"q":"go","limit":2}`, contracts.StatusOK},
		{"send_notification", `{"user_id":"alice","text":"hi","idempotency_key":"strict-1"}`, contracts.StatusOK},
		{"book_meeting", `{"title":"go","attendees":[{"email":"a@example.com","name":null}],"organizer":null,"room":{"building":null,"floor":null},` +
			`"priority":null,"link":null,"length":null,"notes":null}`, contracts.StatusOK},
		{"book_meeting", `{"title":"go","attendees":[{"email":"a@example.com","name":null}],"organizer":{"email":"b@example.com","name":"B"},` +
			`"room":null,"priority":"high","link":"https://x.example","length":30,"notes":"bring snacks"}`, contracts.StatusOK},
		{"book_meeting", `{"title":null,"attendees":[{"email":"a@example.com","name":null}],"organizer":null,"room":null,` +
			`"priority":null,"link":null,"length":null,"notes":null}`, contracts.StatusBadArgs}, // title is required
	}
	for _, tc := range cases {
		t.Run(tc.tool+" "+tc.args, func(t *testing.T) {
			c := jsonschema.NewCompiler()
			if err := c.AddResource("strict.json", strict[tc.tool]); err != nil {
				t.Fatal(err)
			}
			sch, err := c.Compile("strict.json")
			if err != nil {
				t.Fatal(err)
			}
			args, _ := jsonschema.UnmarshalJSON(strings.NewReader(tc.args))
			if err := sch.Validate(args); (err == nil) != (tc.status != contracts.StatusBadArgs) {
				t.Errorf("strict schema validation: %v", err)
			}
			req, _ := http.NewRequest(http.MethodPost, env.Server.URL+"/v1/tools/"+tc.tool, strings.NewReader(tc.args))
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			e, err := contracts.DecodeEnvelope(bytes.TrimSpace(body))
			if err != nil {
				t.Fatalf("not an envelope: %s", body)
			}
			if e.Status != tc.status {
				t.Errorf("status %s, want %s: %s", e.Status, tc.status, e.Message)
			}
		})
	}
}
