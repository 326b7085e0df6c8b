package learn

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/toolgate/toolgate/policy"
)

func TestPathTemplates(t *testing.T) {
	for _, c := range []struct{ path, want string }{
		{"/", "/"},
		{"/api/search", "/api/search"},
		{"/v2/health", "/v2/health"},
		{"/v1/users/42/orders", "/v1/users/{user_id}/orders"},
		{"/items/3f2504e0-4f89-11d3-9a0c-0305e82c3301", "/items/{item_id}"},
		{"/objects/507f1f77bcf86cd799439011", "/objects/{object_id}"},
		{"/categories/a1b2c3d4/children", "/categories/{category_id}/children"},
		{"/kb/kb-1001", "/kb/{kb_id}"},
		{"/orders/ord_a1b2c3", "/orders/{order_id}"},
		{"/files/report%20final.pdf", "/files/{file_id}"},
		{"/users/alice%40example.com", "/users/{user_id}"},
		{"/a/1/2", "/a/{a_id}/{id}"},
		{"/boxes/7/boxes/8", "/boxes/{box_id}/boxes/{box_id_2}"},
		{"/reset/sk_live_abcdefghijkl", "/reset/{reset_id}"},
		{"/tokens/eyJhbGciOiJIUzI1NiJ9", "/tokens/{token_id}"},
		{"/search/%E9%87%8F%E5%AD%90", "/search/{search_id}"},
		{"/hash/sha256", "/hash/sha256"},
	} {
		t.Run(c.path+" becomes "+c.want, func(t *testing.T) {
			segs, ok := splitPath(c.path)
			if !ok {
				t.Fatal("path refused")
			}
			if got := templateString(templateOf(segs)); got != c.want {
				t.Errorf("template %s, want %s", got, c.want)
			}
		})
	}
}

func exchange(method, path string, status int) *Exchange {
	return &Exchange{Upstream: "api", UpstreamURL: "http://127.0.0.1:1", Method: method, EscapedPath: path, Status: status,
		RequestHeader: http.Header{}, ResponseHeader: http.Header{"Content-Type": {"application/json"}}, ResponseBody: []byte(`{"ok":true}`)}
}

func routePaths(s *Summary) []string {
	var out []string
	for _, r := range s.Routes {
		out = append(out, r.Method+" "+r.Path)
	}
	return out
}

func TestVaryingLiteralsMergeIntoAPlaceholder(t *testing.T) {
	t.Run("three names in an inner segment become one route", func(t *testing.T) {
		l := New(policy.DefaultLearnSettings(), Options{})
		for _, u := range []string{"alice", "bob"} {
			l.Observe(exchange(http.MethodPost, "/v1/users/"+u+"/notifications", 201))
		}
		if got := len(l.Summary().Routes); got != 2 {
			t.Fatalf("%d routes after two names, want 2", got)
		}
		l.Observe(exchange(http.MethodPost, "/v1/users/carol/notifications", 201))
		l.Observe(exchange(http.MethodPost, "/v1/users/dave/notifications", 201))
		sum := l.Summary()
		if got := fmt.Sprint(routePaths(sum)); got != "[POST /v1/users/{user_id}/notifications]" {
			t.Fatalf("routes %s", got)
		}
		r := sum.Routes[0]
		if p := r.Accepted.Path["user_id"]; r.Calls != 4 || p == nil || p.Seen != 4 || p.Types["string"] != 4 {
			t.Errorf("calls %d, user_id %+v", r.Calls, p)
		}
	})
	t.Run("the last segment takes eight names before it is merged", func(t *testing.T) {
		l := New(policy.DefaultLearnSettings(), Options{})
		words := []string{"alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"}
		for _, w := range words[:7] {
			l.Observe(exchange(http.MethodGet, "/docs/"+w, 200))
		}
		if got := len(l.Summary().Routes); got != 7 {
			t.Fatalf("%d routes after seven names, want 7", got)
		}
		l.Observe(exchange(http.MethodGet, "/docs/hotel", 200))
		if got := fmt.Sprint(routePaths(l.Summary())); got != "[GET /docs/{doc_id}]" {
			t.Fatalf("routes %s", got)
		}
	})
	t.Run("each method merges on its own", func(t *testing.T) {
		l := New(policy.DefaultLearnSettings(), Options{})
		for _, u := range []string{"alice", "bob", "carol"} {
			l.Observe(exchange(http.MethodGet, "/users/"+u+"/x", 200))
			l.Observe(exchange(http.MethodPost, "/users/"+u+"/y", 200))
		}
		if got := fmt.Sprint(routePaths(l.Summary())); got != "[GET /users/{user_id}/x POST /users/{user_id}/y]" {
			t.Errorf("routes %s", got)
		}
	})
	t.Run("a tool's route keeps its template and takes passthrough requests that match it", func(t *testing.T) {
		l := New(policy.DefaultLearnSettings(), Options{})
		x := exchange(http.MethodPost, "/v1/users/alice/notifications", 201)
		x.Tool, x.Route = "send_notification", "/v1/users/{user_id}/notifications"
		l.Observe(x)
		l.Observe(exchange(http.MethodPost, "/v1/users/bob/notifications", 201))
		sum := l.Summary()
		if len(sum.Routes) != 1 || sum.Routes[0].Tool != "send_notification" || sum.Routes[0].Calls != 2 {
			t.Errorf("routes %+v", sum.Routes)
		}
	})
}
