package learn

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/policy"
)

// word is a random lower-case word: letters only, so it never looks like
// an id and every path made of words is a new route.
func word(rng *rand.Rand) string {
	b := make([]byte, 5+rng.IntN(6))
	for i := range b {
		b[i] = byte('a' + rng.IntN(26))
	}
	return string(b)
}

func shapeDepth(s *Shape) int {
	if s == nil {
		return 0
	}
	d := 0
	for _, c := range s.Fields {
		d = max(d, shapeDepth(c))
	}
	return 1 + max(d, shapeDepth(s.Items))
}

func maxKeysPerObject(s *Shape) int {
	if s == nil {
		return 0
	}
	n := len(s.Fields)
	for _, c := range s.Fields {
		n = max(n, maxKeysPerObject(c))
	}
	return max(n, maxKeysPerObject(s.Items))
}

func TestBoundsHoldUnderHighCardinality(t *testing.T) {
	s := policy.LearnSettings{MaxRoutes: 20, MaxShapes: 4, MaxKeys: 8, MaxDepth: 3, MaxFields: 30, MaxValues: 4, MaxBodyBytes: 1 << 20, EnumValues: true}
	l := New(s, Options{})
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 2000
	for i := range n {
		var x *Exchange
		switch {
		case i%10 == 9:
			// A new route every time, under no common prefix.
			x = exchange(http.MethodGet, "/"+word(rng)+"/"+word(rng), 200)
		case i%2 == 0:
			// One route, whatever the id.
			x = exchange(http.MethodGet, fmt.Sprintf("/items/%d/parts", i), 200)
		default:
			// One route whose answers have ever new keys, deep nesting,
			// long arrays, a code-named field with ever new codes, and
			// ever new query parameters.
			x = exchange(http.MethodGet, "/wide", 200)
			obj := map[string]any{"code": "E_" + strings.ToUpper(word(rng))}
			for range 50 {
				obj[word(rng)] = map[string]any{word(rng): []any{1, "x", map[string]any{word(rng): true}}}
			}
			deep := any("bottom")
			for range 100 {
				deep = map[string]any{"d": deep}
			}
			obj["deep"] = deep
			obj["list"] = make([]any, 1000)
			x.ResponseBody, _ = json.Marshal(obj)
			x.ResponseHeader.Set("Content-Type", "application/json")
			x.RawQuery = word(rng) + "=1&" + word(rng) + "=2"
		}
		l.Observe(x)
	}
	sum := l.Summary()
	t.Run("routes stop at max_routes and the rest are counted as dropped", func(t *testing.T) {
		if len(sum.Routes) > s.MaxRoutes || sum.Dropped == 0 || sum.Exchanges != n {
			t.Errorf("%d routes (max %d), %d dropped, %d exchanges", len(sum.Routes), s.MaxRoutes, sum.Dropped, sum.Exchanges)
		}
	})
	var wide, items *Route
	for _, r := range sum.Routes {
		switch r.Path {
		case "/wide":
			wide = r
		case "/items/{item_id}/parts":
			items = r
		}
	}
	t.Run("ids in paths make one route", func(t *testing.T) {
		if items == nil || items.Calls != n/2 {
			t.Fatalf("routes %v", routePaths(sum))
		}
	})
	if wide == nil {
		t.Fatalf("no /wide route among %v", routePaths(sum))
	}
	t.Run("keys per object, depth and fields per body are bounded", func(t *testing.T) {
		if wide.Answer != nil {
			t.Fatalf("answers with an error code went to the data shape: %+v", wide.Answer)
		}
		if got := maxKeysPerObject(wide.Errors); got > s.MaxKeys {
			t.Errorf("an object tracks %d keys, max %d", got, s.MaxKeys)
		}
		if got := shapeDepth(wide.Errors); got > s.MaxDepth+1 {
			t.Errorf("depth %d, max %d", got, s.MaxDepth+1)
		}
		if got := countNodes(wide.Errors); got > s.MaxFields {
			t.Errorf("%d fields, max %d", got, s.MaxFields)
		}
		if wide.Errors.OtherKeys == 0 {
			t.Error("keys beyond the bound were not counted")
		}
	})
	t.Run("query parameters and answer shapes are bounded", func(t *testing.T) {
		if len(wide.Accepted.Query) > s.MaxKeys || wide.Accepted.OtherQuery == 0 {
			t.Errorf("%d parameters tracked, %d other", len(wide.Accepted.Query), wide.Accepted.OtherQuery)
		}
		if len(wide.Shapes) > s.MaxShapes || wide.OtherShapes == 0 {
			t.Errorf("%d shapes, %d other", len(wide.Shapes), wide.OtherShapes)
		}
	})
	t.Run("a field with too many values keeps none", func(t *testing.T) {
		for field, c := range wide.ErrorCodes {
			if len(c.Values) != 0 || !c.ValuesDropped {
				t.Errorf("%s keeps %d values", field, len(c.Values))
			}
		}
		if code := wide.Errors.Fields["code"]; code == nil || len(code.Values) != 0 || !code.ValuesDropped {
			t.Errorf("code = %+v", code)
		}
	})
	t.Run("the whole summary stays small", func(t *testing.T) {
		data, _ := json.Marshal(sum)
		if len(data) > 256<<10 {
			t.Errorf("the summary is %d bytes", len(data))
		}
	})
}
