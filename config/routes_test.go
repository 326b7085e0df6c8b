package config

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/contracts"
)

// TestAmbiguousPairsComparesEveryPair holds ambiguousPairs, which compares
// literal routes through a map, to comparing every pair of routes.
func TestAmbiguousPairsComparesEveryPair(t *testing.T) {
	for _, c := range []struct {
		name   string
		routes []string
	}{
		{"distinct literals", []string{"GET /a", "GET /b", "POST /a", "GET /a/b"}},
		{"equal literals", []string{"GET /a/b", "GET /c", "GET /a/b", "GET /a/b"}},
		{"escaped literals", []string{"GET /a%20b", "GET /%61%20b", "GET /a%2Fb"}},
		{"placeholders", []string{"GET /docs/{id}", "GET /docs/{n}", "GET /docs/latest", "GET /docs/{id}.json", "GET /docs/x.json"}},
		{"mixed segments", []string{"GET /f/v{n}", "GET /f/v1", "GET /f/{a}", "GET /f/w1", "POST /f/{a}", "GET /f/{a}/{b}", "GET /f/g/{b}", "GET /f/{a}/h"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var doc strings.Builder
			doc.WriteString("version: 1\nupstreams:\n  svc: {url: \"http://127.0.0.1:1\"}\ntools:\n")
			for i, r := range c.routes {
				method, path, _ := strings.Cut(r, " ")
				var args []string
				for _, part := range strings.Split(path, "{")[1:] {
					name, _, _ := strings.Cut(part, "}")
					args = append(args, name+": {type: string}")
				}
				fmt.Fprintf(&doc, "  t%d:\n    description: T.\n    upstream: svc\n    args: {type: object, properties: {%s}}\n    request: {method: %s, path: %q}\n",
					i, strings.Join(args, ", "), method, path)
			}
			snap, err := CompileSource("p.yaml", []byte(doc.String()), Options{})
			if err != nil {
				t.Fatal(err)
			}
			var want [][2]int
			for i := range snap.ToolNames {
				for j := i + 1; j < len(snap.ToolNames); j++ {
					if contracts.Ambiguous(snap.Tools[snap.ToolNames[i]].Binding, snap.Tools[snap.ToolNames[j]].Binding) {
						want = append(want, [2]int{i, j})
					}
				}
			}
			if got := ambiguousPairs(snap); !slices.Equal(got, want) {
				t.Errorf("ambiguousPairs = %v, comparing every pair = %v", got, want)
			}
			if c.name != "distinct literals" && len(want) == 0 {
				t.Error("no ambiguous pair: the case tests nothing")
			}
		})
	}
}
