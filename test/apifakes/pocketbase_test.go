package apifakes_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
)

// fakePocketBase answers GET /api/collections/notes/records as PocketBase
// does (https://pocketbase.io/docs/api-records/#listsearch-records): its
// filter is read as PocketBase's filter parser (github.com/ganigeorgiev/fexpr,
// scanner.go scanText) reads it — a quoted text ends at the first quote
// not preceded by a backslash, and `\"` within it is a quote; no other
// escape exists — and evaluated for the operators this test uses:
// `title ~ "text"` (contains), `title = "text"`, `title != "text"`, joined
// by `&&` and `||` left to right. A filter it cannot read is PocketBase's
// 400.
func fakePocketBase(titles []string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/collections/notes/records" || r.Method != http.MethodGet {
			writeJSON(w, 404, map[string]any{"status": 404, "message": "The requested resource wasn't found.", "data": map[string]any{}})
			return
		}
		match, ok := parseFilter(r.URL.Query().Get("filter"))
		if !ok {
			writeJSON(w, 400, map[string]any{"status": 400, "message": "Invalid filter parameters.", "data": map[string]any{}})
			return
		}
		items := []map[string]any{}
		for i, title := range titles {
			if match(title) {
				items = append(items, map[string]any{"id": "note" + string(rune('a'+i)), "collectionName": "notes", "title": title})
			}
		}
		writeJSON(w, 200, map[string]any{"page": 1, "perPage": 20, "totalItems": len(items), "totalPages": 1, "items": items})
	})
}

// parseFilter reads a filter of conditions on title.
func parseFilter(f string) (func(string) bool, bool) {
	s := strings.TrimSpace(f)
	var match func(string) bool
	join := ""
	for s != "" {
		var field, op, text string
		field, s, _ = strings.Cut(s, " ")
		s = strings.TrimLeft(s, " ")
		op, s, _ = strings.Cut(s, " ")
		s = strings.TrimLeft(s, " ")
		if field != "title" || s == "" || s[0] != '"' {
			return nil, false
		}
		end, prev := -1, rune(0)
		for i, c := range s[1:] {
			if c == '"' && prev != '\\' {
				end = i + 1
				break
			}
			prev = c
		}
		if end < 0 {
			return nil, false
		}
		text, s = strings.ReplaceAll(s[1:end], `\"`, `"`), strings.TrimLeft(s[end+1:], " ")
		var cond func(string) bool
		switch op {
		case "~":
			cond = func(t string) bool { return strings.Contains(t, text) }
		case "=":
			cond = func(t string) bool { return t == text }
		case "!=":
			cond = func(t string) bool { return t != text }
		default:
			return nil, false
		}
		switch prev := match; join {
		case "":
			match = cond
		case "&&":
			match = func(t string) bool { return prev(t) && cond(t) }
		case "||":
			match = func(t string) bool { return prev(t) || cond(t) }
		}
		if s == "" {
			break
		}
		join, s, _ = strings.Cut(s, " ")
		if join != "&&" && join != "||" {
			return nil, false
		}
		s = strings.TrimLeft(s, " ")
	}
	return match, match != nil
}

// TestPocketBaseFilterFromFreeText is test/apis's case against the fake:
// docs/policy.md's search_notes finds the note whose title holds the text,
// quotes and backslashes included, and a text that closes the string and
// adds a condition finds nothing; pasted without the escape, the same text
// would have listed every note.
func TestPocketBaseFilterFromFreeText(t *testing.T) {
	titles := []string{`say "hi" \ o/`, `say hi o/`, `plain note`, `a \"quoted\" path C:\temp\`}
	pb := httptest.NewServer(fakePocketBase(titles))
	t.Cleanup(pb.Close)
	page, err := os.ReadFile("../../docs/policy.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(page)
	at := strings.Index(doc, "**Building a filter from free text.**")
	if at < 0 {
		t.Fatal("docs/policy.md has no filter example")
	}
	doc = doc[at:]
	block := doc[strings.Index(doc, "```yaml\n")+len("```yaml\n"):]
	block = block[:strings.Index(block, "```")]
	naive := strings.Replace(strings.Replace(block, "search_notes:", "search_notes_naively:", 1), `args.text.replace('"', '\\"')`, "args.text", 1)
	naive = strings.Replace(naive, `, pattern: '[^\\]$'`, "", 1)
	policy := "version: 1\nupstreams:\n  pocketbase: {url: \"" + pb.URL + "\"}\ntools:\n  " +
		strings.ReplaceAll(strings.TrimRight(block, "\n"), "\n", "\n  ") + "\n  " + strings.ReplaceAll(strings.TrimRight(naive, "\n"), "\n", "\n  ") + "\n"
	srv := serve(t, policy, nil)
	for _, c := range []struct {
		name, tool, text, status string
		titles                   []string
	}{
		{"quotes and a backslash", "search_notes", `say "hi" \ o/`, "ok", []string{`say "hi" \ o/`}},
		{"an escaped quote in the text", "search_notes", `\"quoted\"`, "ok", []string{`a \"quoted\" path C:\temp\`}},
		{"a backslash inside", "search_notes", `C:\temp`, "ok", []string{`a \"quoted\" path C:\temp\`}},
		{"a text that closes the string and adds a condition", "search_notes", `x" || title != "`, "empty", nil},
		{"a text that ends in a backslash is refused before PocketBase", "search_notes", `C:\temp\`, "bad_args", nil},
		{"pasted without the escape, the same text adds its condition", "search_notes_naively", `x" || title != "`, "ok", titles},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := tool(t, srv, c.tool, map[string]string{"text": c.text}, "")
			if e.Status != c.status {
				t.Fatalf("status %s, want %s: %s", e.Status, c.status, e.raw)
			}
			if c.status != "ok" {
				return
			}
			var notes []struct{ Title string }
			if err := json.Unmarshal(e.Data, &notes); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, n := range notes {
				got = append(got, n.Title)
			}
			if strings.Join(got, "\n") != strings.Join(c.titles, "\n") {
				t.Errorf("found %q, want %q", got, c.titles)
			}
		})
	}
}
