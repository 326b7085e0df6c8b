package learn

import (
	"bytes"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/toolgate/toolgate/policy"
)

// FuzzObserve: no exchange, however malformed its path, query or bodies,
// panics the learner, breaks its bounds, or makes a summary that does not
// read back.
func FuzzObserve(f *testing.F) {
	f.Add("GET", "/api/search", "q=go&limit=5", "application/json", `{"a":1}`, 200, "application/json", `{"results":[],"total":0}`)
	f.Add("POST", "/v1/users/alice/notifications", "", "application/json", `{"text":"hi"}`, 201, "", `{"code":"E_NOPERM"}`)
	f.Add("GET", "/a/%zz/../b", "%%%", "text/plain", `[`, 500, "text/html", `<html>`)
	f.Add("DELETE", "//x//", "a=1&a=2", "application/json; charset=utf-8", `[{"a":[{"b":null}]}]`, 0, "", "")
	s := policy.LearnSettings{MaxRoutes: 4, MaxShapes: 2, MaxKeys: 3, MaxDepth: 3, MaxFields: 10, MaxValues: 2, MaxBodyBytes: 4096, EnumValues: true}
	f.Fuzz(func(t *testing.T, method, path, query, reqType, reqBody string, status int, respType, respBody string) {
		l := New(s, Options{})
		for i := range 3 {
			x := &Exchange{Upstream: "u", Method: method, EscapedPath: path, RawQuery: query, Status: status + i,
				RequestHeader: http.Header{"Content-Type": {reqType}}, RequestBody: []byte(reqBody),
				ResponseHeader: http.Header{"Content-Type": {respType}, "Retry-After": {query}}, ResponseBody: []byte(respBody)}
			l.Observe(x)
		}
		sum := l.Summary()
		if len(sum.Routes) > s.MaxRoutes {
			t.Fatalf("%d routes", len(sum.Routes))
		}
		for _, r := range sum.Routes {
			for _, sh := range []*Shape{r.Answer, r.Errors, r.Accepted.Body, r.Rejected.Body} {
				if countNodes(sh) > s.MaxFields {
					t.Fatalf("%d fields", countNodes(sh))
				}
			}
		}
		data, err := json.Marshal(sum)
		if err != nil {
			t.Fatal(err)
		}
		back, err := DecodeSummary(data)
		if err != nil {
			t.Fatalf("the summary does not read back: %v\n%s", err, data)
		}
		// Reading cuts nothing the learner kept.
		again := New(s, Options{})
		read, sr, err := again.read(bytes.NewReader(data))
		if err != nil || sr.cut != 0 {
			t.Fatalf("read within the learner's own bounds: %v, %d cut\n%s", err, sr.cut, data)
		}
		for _, sum := range []*Summary{back, read} {
			if got, _ := json.Marshal(sum); !bytes.Equal(got, data) {
				t.Fatalf("read back differs:\n%s\nwant:\n%s", got, data)
			}
		}
	})
}

// FuzzDecodeSummary: no summary file, however broken, panics the reader
// or a learner continuing it.
func FuzzDecodeSummary(f *testing.F) {
	l := New(policy.DefaultLearnSettings(), Options{})
	l.Observe(codedExchange("E_NOPERM"))
	for _, u := range []string{"alice", "bob", "carol"} {
		l.Observe(exchange(http.MethodPost, "/users/"+u+"/notify", 201))
	}
	seed, _ := json.Marshal(l.Summary())
	f.Add(seed)
	f.Add([]byte(`{"version":1,"routes":[null,{"upstream":"a","method":"GET","path":"/x","answer":{"fields":{"a":null}}}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		sum, err := DecodeSummary(data)
		if err != nil {
			return
		}
		small := policy.LearnSettings{MaxRoutes: 2, MaxShapes: 2, MaxKeys: 2, MaxDepth: 2, MaxFields: 3, MaxValues: 1, EnumValues: true}
		cut, _, err := New(small, Options{}).read(bytes.NewReader(data))
		if err != nil {
			t.Fatalf("a summary DecodeSummary reads does not read within small bounds: %v", err)
		}
		checkSummaryBounds(t, cut, New(small, Options{}).settings)
		l := New(policy.LearnSettings{MaxRoutes: 2, EnumValues: false}, Options{})
		l.adopt(sum)
		l.Observe(exchange(http.MethodGet, "/x", 200))
		_ = l.Summary()
	})
}
