package mcpfront

import (
	"mime"
	"strings"
	"testing"
)

// acceptsJSONByParsing is acceptsJSON as it was before its shortcut for
// bare types: every part through mime.ParseMediaType.
func acceptsJSONByParsing(values []string) bool {
	if len(values) == 0 {
		return true
	}
	for _, v := range values {
		for part := range strings.SplitSeq(v, ",") {
			mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
			if err != nil || params["q"] == "0" {
				continue
			}
			switch mt {
			case "application/json", "application/*", "*/*":
				return true
			}
		}
	}
	return false
}

// TestAcceptsJSONAsTheMediaTypeParser: acceptsJSON compares the common
// bare types as they are, without parsing; it answers as parsing every
// part does, for the headers clients send and for the edges of the
// shortcut (case, parameters, q=0, spaces, several values).
func TestAcceptsJSONAsTheMediaTypeParser(t *testing.T) {
	for _, values := range [][]string{
		nil,
		{sdkAccept},
		{"application/json"},
		{" application/json "},
		{"Application/JSON"},
		{"application/json;q=0"},
		{"application/json; q=0, text/event-stream"},
		{"text/event-stream, application/json"},
		{"text/event-stream"},
		{"*/*"},
		{"*/*;q=0"},
		{"application/*"},
		{"application/json;", "text/html"},
		{"text/html", "application/json"},
		{"application/jsonx"},
		{"application/json; charset=utf-8"},
		{""},
		{",,"},
	} {
		if got, want := acceptsJSON(values), acceptsJSONByParsing(values); got != want {
			t.Errorf("acceptsJSON(%q) = %v, parsing every part says %v", values, got, want)
		}
	}
}
