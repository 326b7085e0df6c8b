package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// splitEnv resolves the ${VAR} references of the differential tests' files.
func splitEnv(name string) (string, bool) {
	v, ok := map[string]string{"HOST": "db.internal", "TOKEN": "s3cret", "TOOLGATE_TEST_TOKEN": "t0ken"}[name]
	return v, ok
}

// manyToolsFile is a file as bench/run.sh writes them: version, then n
// copies of the example's search_articles, each on a path of its own.
func manyToolsFile(t testing.TB, n int) []byte {
	t.Helper()
	example, err := os.ReadFile("../examples/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	start := bytes.Index(example, []byte("\n  search_articles:\n"))
	end := bytes.Index(example, []byte("\n  send_notification:\n"))
	if start < 0 || end < 0 {
		t.Fatal("examples/policy.yaml: search_articles not found")
	}
	tool := example[start+1 : end+1]
	var out bytes.Buffer
	out.WriteString("version: 1\ntools:\n")
	for i := range n {
		c := bytes.Replace(tool, []byte("  search_articles:"), fmt.Appendf(nil, "  search_articles_%d:", i), 1)
		c = bytes.Replace(c, []byte("path: /api/search\n"), fmt.Appendf(nil, "path: /api/search_%d\n", i), 1)
		out.Write(c)
	}
	return out.Bytes()
}

// splitCorpus is what the differential tests decode both ways: every
// policy file of the repository's tests and example, and the forms below,
// each written to be cut (or, some, to look as if it could be and not be).
func splitCorpus(t testing.TB) map[string][]byte {
	t.Helper()
	corpus := map[string][]byte{}
	files, _ := filepath.Glob("testdata/*/*.yaml")
	files = append(files, "../examples/policy.yaml")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		corpus[f] = b
	}
	example := corpus["../examples/policy.yaml"]
	corpus["example with CRLF"] = bytes.ReplaceAll(example, []byte("\n"), []byte("\r\n"))
	corpus["example without its last line break"] = bytes.TrimSuffix(example, []byte("\n"))
	if i, j := bytes.Index(example, []byte("\ntools:\n")), bytes.Index(example, []byte("\naccess:\n")); i > 0 && j > i {
		corpus["example with tools last"] = slices.Concat(example[:i+1], example[j+1:], example[i+1:j+1])
	}
	corpus["many tools"] = manyToolsFile(t, 20)
	const head = "version: 1\nupstreams:\n  search: {url: \"http://${HOST}:7001\", headers: {Authorization: \"Bearer ${TOKEN}\"}}\n"
	for name, doc := range map[string]string{
		"comments and blank lines between tools": head + "tools: # the tools\n# before\n\n  a:\n    upstream: search\n    request: {path: /a}\n\n# between\n  # indented\n  b:\n    upstream: search\n\n    request: {path: /b}\n# after\n",
		"quoted keys":                            head + "tools:\n  \"a\":\n    upstream: search\n    request: {path: /a}\n  'b':\n    upstream: search\n    request: {path: /b}\n",
		"block scalars kept and stripped":        head + "tools:\n  a:\n    description: |+\n      line\n\n    upstream: search\n    request: {path: /a}\n  b:\n    description: >-\n      folded\n      text\n\n\n    upstream: search\n    request: {path: /b}\n    messages:\n      ok: |+\n        keep\n\n\n  c:\n    upstream: search\n    request: {path: /c}\n    description: |2-\n        two more\n",
		"a block scalar kept at the section end": head + "tools:\n  a:\n    upstream: search\n    request: {path: /a}\n    description: |+\n      kept\n\n\naccess: {default: allow}\n",
		"a quoted scalar over lines":             head + "tools:\n  a:\n    description: \"one\n      two\n  # three\n    four\"\n    upstream: search\n    request: {path: /a}\n  b:\n    upstream: search\n    request: {path: /b}\n",
		"a quoted scalar into the next entry":    head + "tools:\n  a:\n    description: \"one\n  b: two\"\n    upstream: search\n    request: {path: /a}\n",
		"a quoted scalar into the next section":  head + "tools:\n  a:\n    upstream: search\n    request: {path: /a}\n    description: 'one\naccess: two'\n",
		"a flow mapping over lines":              head + "tools:\n  a: {upstream: search,\n  request: {path: /a}}\n  b:\n    upstream: search\n    request: {path: /b}\n",
		"tools inside a quoted scalar":           head + "server: {listen: \"a\ntools:\n  a:\n    upstream: search\n\"}\n",
		"anchors within a tool":                  head + "tools:\n  a:\n    upstream: &up search\n    request: {path: /a}\n    description: *up\n",
		"an alias to another tool":               head + "tools:\n  a:\n    upstream: &up search\n    request: {path: /a}\n  b:\n    upstream: *up\n    request: {path: /b}\n",
		"an anchor redefined in the tools":       "version: 1\nupstreams:\n  search: {url: &u \"http://x:1\"}\n  other: {url: \"http://y:1\"}\ntools:\n  a:\n    upstream: search\n    request: {path: /a}\n    description: &u other\naccess:\n  default: allow\n  callers: {c: {tools: [*u]}}\n",
		"an alias to the upstreams":              "version: 1\nupstreams:\n  search: {url: \"http://x:1\", headers: &h {A: b}}\ntools:\n  a:\n    upstream: search\n    request: {path: /a, headers: *h}\n",
		"an entry indented less":                 head + "tools:\n    a:\n      upstream: search\n      request: {path: /a}\n  b:\n    upstream: search\n",
		"a sequence of tools":                    head + "tools:\n  - a: {upstream: search}\n",
		"an explicit key":                        head + "tools:\n  ? a\n  : {upstream: search, request: {path: /a}}\n",
		"tools written twice":                    head + "tools:\n  a: {upstream: search, request: {path: /a}}\ntools:\n  b: {upstream: search, request: {path: /b}}\n",
		"a tool defined twice":                   head + "tools:\n  a: {upstream: search, request: {path: /a}}\n  a: {upstream: search, request: {path: /b}}\n",
		"an unknown key in a tool":               head + "tools:\n  a:\n    upstream: search\n    request: {path: /a}\n  b:\n    upstream: search\n    reqest: {path: /b}\n",
		"a compile error in a tool":              head + "tools:\n  a:\n    upstream: search\n    request: {path: /a}\n  b:\n    upstream: nowhere\n    request: {path: '/b/{id}'}\n",
		"a bare $VAR":                            head + "tools:\n  a:\n    upstream: search\n    request: {path: /a, headers: {X-Key: $TOKEN}}\n",
		"a second document":                      head + "tools:\n  a: {upstream: search, request: {path: /a}}\n---\ntools:\n  b: {}\n",
		"a tab in a block scalar":                head + "tools:\n  a:\n    upstream: search\n    request: {path: /a}\n    description: |\n      first\n      \tsecond, indented by a tab\n",
		"a tab before an entry":                  head + "tools:\n\ta: {upstream: search}\n",
		"a lone carriage return":                 head + "tools:\n  a: {upstream: search,\r request: {path: /a}}\n",
		"a next line character":                  head + "tools:\n  a: {upstream: search, request: {path: /a}, description: \"x\u0085y\"}\n",
		"a tagged tool":                          head + "tools:\n  a: !!map {upstream: search, request: {path: /a}}\n",
		"a tool that is null":                    head + "tools:\n  a:\n  b: {upstream: search, request: {path: /b}}\n",
		"tools with nothing in them":             head + "tools:\n# none\n",
		"an empty key":                           head + "tools:\n  \"\": {upstream: search}\n",
		"a byte order mark":                      "\ufeff" + head + "tools:\n  a: {upstream: search, request: {path: /a}}\n",
		"a missing version":                      "tools:\n  a: {upstream: search, request: {path: /a}}\n",
		"a wrong version":                        "version: 2\ntools:\n  a: {upstream: search, request: {path: /a}}\n",
		"a syntax error in a tool":               head + "tools:\n  a:\n    upstream: [search\n  b: {upstream: search}\n",
	} {
		corpus[name] = []byte(doc)
	}
	return corpus
}

// decodeBothWays decodes data one tool at a time and whole, and fails t
// where they differ: the spec, the positions recorded, the values of ${VAR}
// references and the warnings when the split decoding succeeds; nothing of
// the compiler touched when it gives up. It reports whether data was split.
func decodeBothWays(t *testing.T, data []byte) bool {
	t.Helper()
	src := source{name: "p.yaml", data: data}
	split := &compiler{pos: map[string]nodePos{}, envValues: map[string][]string{}, lookupEnv: splitEnv}
	spec, ok := split.decodeByTool(src, splitEnv)
	if !ok {
		if len(split.pos) > 0 || len(split.envValues) > 0 || len(split.warns) > 0 || len(split.errs) > 0 {
			t.Errorf("the split decoding gave up but left positions %v, values %v, warnings %v, errors %v",
				split.pos, split.envValues, split.warns, split.errs)
		}
		return false
	}
	whole := &compiler{pos: map[string]nodePos{}, envValues: map[string][]string{}, lookupEnv: splitEnv, decodeWhole: true}
	want, ok := whole.decodeFile(src, splitEnv)
	if !ok {
		t.Fatalf("split decoding succeeded, whole decoding failed: %v", whole.errs)
	}
	if !reflect.DeepEqual(spec, want) {
		a, _ := json.MarshalIndent(spec, "", "  ")
		b, _ := json.MarshalIndent(want, "", "  ")
		t.Errorf("spec split and whole differ:\n%s\nwhole:\n%s", a, b)
	}
	if !maps.Equal(split.pos, whole.pos) {
		for _, k := range slices.Sorted(maps.Keys(whole.pos)) {
			if split.pos[k] != whole.pos[k] {
				t.Errorf("position of %s: split %v, whole %v", k, split.pos[k], whole.pos[k])
			}
		}
		for _, k := range slices.Sorted(maps.Keys(split.pos)) {
			if _, ok := whole.pos[k]; !ok {
				t.Errorf("position of %s: split %v, whole none", k, split.pos[k])
			}
		}
	}
	if !reflect.DeepEqual(split.envValues, whole.envValues) {
		t.Errorf("${VAR} values split %v, whole %v", split.envValues, whole.envValues)
	}
	if a, b := split.warns.sorted().Error(), whole.warns.sorted().Error(); a != b {
		t.Errorf("warnings split:\n%s\nwhole:\n%s", a, b)
	}
	return true
}

// compileBothWays compiles data as a policy file with and without the
// split decoding, and fails t where the errors or the warnings differ, or
// the tools and where each is written.
func compileBothWays(t *testing.T, data []byte) {
	t.Helper()
	run := func(whole bool) (string, []string, []string, string) {
		var warns []string
		opts := Options{LookupEnv: splitEnv, Warn: func(e *Error) { warns = append(warns, e.Error()) }, decodeWhole: whole}
		snap, err := CompileSource("p.yaml", data, opts)
		if err != nil {
			var errs Errors
			if !errors.As(err, &errs) {
				t.Fatalf("error %T %v is not config.Errors", err, err)
			}
			return err.Error(), warns, nil, ""
		}
		return "", warns, snap.ToolNames, fmt.Sprint(snap.ToolOrigins)
	}
	errSplit, warnSplit, namesSplit, originsSplit := run(false)
	errWhole, warnWhole, namesWhole, originsWhole := run(true)
	if errSplit != errWhole {
		t.Errorf("errors split:\n%s\nwhole:\n%s", errSplit, errWhole)
	}
	if !slices.Equal(warnSplit, warnWhole) {
		t.Errorf("warnings split:\n%s\nwhole:\n%s", strings.Join(warnSplit, "\n"), strings.Join(warnWhole, "\n"))
	}
	if !slices.Equal(namesSplit, namesWhole) || originsSplit != originsWhole {
		t.Errorf("tools split %v at %s, whole %v at %s", namesSplit, originsSplit, namesWhole, originsWhole)
	}
}

// TestSplitMatchesWhole holds decoding a policy file one tool at a time
// equal to decoding it whole, over every policy file of the tests and the
// forms of splitCorpus, and checks that the files written to be split are.
func TestSplitMatchesWhole(t *testing.T) {
	corpus := splitCorpus(t)
	wantSplit := []string{
		"../examples/policy.yaml", "example with CRLF", "example without its last line break", "example with tools last",
		"many tools", "comments and blank lines between tools", "quoted keys", "block scalars kept and stripped",
		"a block scalar kept at the section end", "a quoted scalar over lines", "anchors within a tool",
		"a tagged tool", "a compile error in a tool", "a bare $VAR", "a tab in a block scalar",
		"a tool that is null", "testdata/dir/20-search.yaml",
	}
	wantWhole := []string{
		"a quoted scalar into the next entry", "a quoted scalar into the next section", "a flow mapping over lines",
		"tools inside a quoted scalar", "an alias to another tool", "an anchor redefined in the tools", "testdata/invalid/alias_in_tool.yaml", "an alias to the upstreams", "an entry indented less",
		"a sequence of tools", "an explicit key", "tools written twice", "a tool defined twice", "an unknown key in a tool",
		"a second document", "a tab before an entry", "a lone carriage return", "a next line character",
		"tools with nothing in them", "an empty key", "a byte order mark", "a missing version", "a wrong version",
		"a syntax error in a tool",
	}
	wasSplit := map[string]bool{}
	for _, name := range slices.Sorted(maps.Keys(corpus)) {
		t.Run(name, func(t *testing.T) {
			wasSplit[name] = decodeBothWays(t, corpus[name])
			compileBothWays(t, corpus[name])
		})
	}
	for _, name := range wantSplit {
		if !wasSplit[name] {
			t.Errorf("%s was decoded whole, not one tool at a time", name)
		}
	}
	for _, name := range wantWhole {
		if _, ok := corpus[name]; !ok || wasSplit[name] {
			t.Errorf("%s was decoded one tool at a time (or is not in the corpus), not whole", name)
		}
	}
}

// TestCutTools pins where the cut puts the entries: their first lines and
// the skeleton, whose lines stay where they were.
func TestCutTools(t *testing.T) {
	doc := "version: 1\ntools: # comment\n# lead\n  a:\n    x: 1\n\n  # mid\n  b: {}\nnext: 2\n"
	cut, ok := cutTools([]byte(doc))
	if !ok {
		t.Fatal("not cut")
	}
	var lines []int
	var texts []string
	for _, e := range cut.entries {
		lines = append(lines, e.line)
		texts = append(texts, doc[e.start:e.end])
	}
	if cut.line != 2 || cut.indent != 2 || !slices.Equal(lines, []int{4, 8}) ||
		!slices.Equal(texts, []string{"  a:\n    x: 1\n\n  # mid\n", "  b: {}\n"}) {
		t.Errorf("cut at line %d, indent %d, entries at %v: %q", cut.line, cut.indent, lines, texts)
	}
	if want := "version: 1\ntools: # comment\n\n\n\n\n\n\nnext: 2\n"; string(cut.skeleton) != want {
		t.Errorf("skeleton %q, want %q", cut.skeleton, want)
	}
}

// FuzzSplitMatchesWhole: for any document, decoding it one tool at a time
// gives what decoding it whole gives (or gives up and leaves the compiler
// as it was), and compiling it gives the same errors and warnings.
func FuzzSplitMatchesWhole(f *testing.F) {
	corpus := splitCorpus(f)
	for _, name := range slices.Sorted(maps.Keys(corpus)) {
		f.Add(corpus[name])
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		decodeBothWays(t, doc)
		compileBothWays(t, doc)
	})
}

// BenchmarkDecodeManyTools decodes a file of 1,000 tools as bench/run.sh
// writes them, one tool at a time and whole: the time and the allocations
// each costs (the peak heap is cmd/toolgate's TestLoadPeakHeap and
// bench/run.sh's startup section).
func BenchmarkDecodeManyTools(b *testing.B) {
	data := manyToolsFile(b, 1000)
	for _, whole := range []bool{false, true} {
		name := "one tool at a time"
		if whole {
			name = "whole"
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				c := &compiler{pos: map[string]nodePos{}, envValues: map[string][]string{}, lookupEnv: noEnv, decodeWhole: whole}
				if _, ok := c.decodeFile(source{name: "p.yaml", data: data}, noEnv); !ok {
					b.Fatal(c.errs)
				}
			}
		})
	}
}
