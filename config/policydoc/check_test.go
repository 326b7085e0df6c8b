package policydoc

import (
	"errors"
	"reflect"
	"testing"

	"github.com/toolgate/toolgate/config"
)

func TestDropUncompiledLeavesOutTheToolsAnErrorIsAbout(t *testing.T) {
	tools := []string{"a", "a.b", "c"}
	name := func(s string) string { return s }
	errAt := func(pairs ...string) error {
		var errs config.Errors
		for i := 0; i+1 < len(pairs); i += 2 {
			errs = append(errs, &config.Error{Path: pairs[i], Msg: pairs[i+1]})
		}
		return errs
	}
	tests := []struct {
		name        string
		err         error
		wantKept    []string
		wantDropped []Uncompiled[string]
		wantOK      bool
	}{
		{"an error about a field names the field",
			errAt("tools.c.request.path", "placeholder {x} is not an argument"),
			[]string{"a", "a.b"}, []Uncompiled[string]{{"c", "request.path: placeholder {x} is not an argument"}}, true},
		{"an error about the tool itself is its message alone",
			errAt("tools.c", "must be a mapping"),
			[]string{"a", "a.b"}, []Uncompiled[string]{{"c", "must be a mapping"}}, true},
		{"the longest name wins when names contain dots",
			errAt("tools.a.b.timeout", "must be positive"),
			[]string{"a", "c"}, []Uncompiled[string]{{"a.b", "timeout: must be positive"}}, true},
		{"the first error about a tool is its reason",
			errAt("tools.a.args", "first", "tools.a.request", "second"),
			[]string{"a.b", "c"}, []Uncompiled[string]{{"a", "args: first"}}, true},
		{"an error about no tool cannot be helped",
			errAt("tools.c.args", "bad", "upstreams.api.url", "bad"), nil, nil, false},
		{"an error that is not a policy error cannot be helped",
			errors.New("disk full"), nil, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kept, dropped, ok := DropUncompiled(tools, name, tt.err)
			if ok != tt.wantOK || !reflect.DeepEqual(kept, tt.wantKept) || !reflect.DeepEqual(dropped, tt.wantDropped) {
				t.Errorf("DropUncompiled = %q, %q, %v; want %q, %q, %v", kept, dropped, ok, tt.wantKept, tt.wantDropped, tt.wantOK)
			}
		})
	}
}
