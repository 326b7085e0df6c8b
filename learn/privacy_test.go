package learn

import (
	"net/http"
	"testing"

	"github.com/toolgate/toolgate/policy"
)

func TestCodeLikeValues(t *testing.T) {
	for _, c := range []struct {
		v    string
		want bool
	}{
		{"E_NOPERM", true},
		{"not_found", true},
		{"RateLimited", true},
		{"ERR-429", true},
		{"error", true},
		{"E1001", false},                // a run of four digits: an id
		{"user 42 not found", false},    // a sentence
		{"", false},                     // nothing
		{"42", false},                   // starts with a digit
		{"sk_live_abcdef123", false},    // a key's prefix
		{"AKIAIOSFODNN7EXAMPLE", false}, // an AWS key
		{"aB3dE5gH7jK9", false},         // a random token
		{"PERMISSION_DENIED_FOR_THIS_RESOURCE_X", false}, // too long
		{"alice@example.com", false},                     // an address
	} {
		t.Run(c.v, func(t *testing.T) {
			if got := codeLike(c.v); got != c.want {
				t.Errorf("codeLike(%q) = %v, want %v", c.v, got, c.want)
			}
		})
	}
}

func TestWhatIsKeptOfAnAnswer(t *testing.T) {
	for _, c := range []struct {
		name, body string
		coded      bool   // the 2xx answer is an error
		field      string // the error field
	}{
		{"a page of results is data", `{"results":[],"total":0}`, false, ""},
		{"a legacy error code on 200 is an error", `{"code":"E_NOPERM","msg":"no"}`, true, "code"},
		{"a success code is data", `{"code":"OK","data":{}}`, false, ""},
		{"a numeric code is data: its meaning is unknown", `{"code":0,"data":{}}`, false, ""},
		{"an error object is an error", `{"error":{"message":"bad"}}`, true, "error"},
		{"a null error is data", `{"error":null,"items":[]}`, false, ""},
		{"a status in plain words is data", `{"status":"active"}`, false, ""},
		{"a failed status is an error", `{"status":"failed","reason":"x"}`, true, "status"},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := New(policy.DefaultLearnSettings(), Options{})
			x := exchange(http.MethodGet, "/x", 200)
			x.ResponseBody = []byte(c.body)
			l.Observe(x)
			r := l.Summary().Routes[0]
			if got := r.Coded == 1; got != c.coded {
				t.Fatalf("coded = %v, want %v (answer %+v, errors %+v)", got, c.coded, r.Answer, r.ErrorCodes)
			}
			if c.coded && r.ErrorCodes[c.field] == nil {
				t.Errorf("error codes %v lack %s", r.ErrorCodes, c.field)
			}
			if !c.coded && (r.Answer == nil || r.Answer.Seen != 1) {
				t.Errorf("the answer's shape was not learned: %+v", r.Answer)
			}
		})
	}
}

func TestTypesOfValues(t *testing.T) {
	for _, c := range []struct{ v, want string }{
		{"10", "integer"}, {"-3", "integer"}, {"0", "integer"}, {"007", "string"}, {"1.5", "number"},
		{"1e3", "number"}, {"true", "boolean"}, {"go", "string"}, {"", "string"}, {"1.", "string"},
	} {
		if got := valueType(c.v); got != c.want {
			t.Errorf("valueType(%q) = %s, want %s", c.v, got, c.want)
		}
	}
}
