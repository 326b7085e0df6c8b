package jsontape

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestAppendStringRepairsInvalidUTF8(t *testing.T) {
	got := AppendString(nil, "ok \xff\xfe end")
	if string(got) != `"ok \ufffd\ufffd end"` {
		t.Errorf("got %s", got)
	}
}

// FuzzAppendString: the hand-written string encoders write what
// encoding/json writes, without HTML escaping (AppendString) and with it
// (AppendHTMLString, as json.Marshal), for any bytes.
func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"plain", "<b>&amp;</b>", "量子 \u2028\u2029 é", "a\"b\\c\n\t\x01", "bad \xff\xfe utf8", "\xe2\x80", "\xe2\x80\xa8"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(s); err != nil {
			t.Fatal(err)
		}
		if got := string(AppendString(nil, s)); got != strings.TrimSuffix(want.String(), "\n") {
			t.Fatalf("AppendString(%q) = %s, encoding/json %s", s, got, want.String())
		}
		html, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := string(AppendHTMLString(nil, s)); got != string(html) {
			t.Fatalf("AppendHTMLString(%q) = %s, json.Marshal %s", s, got, html)
		}
	})
}
