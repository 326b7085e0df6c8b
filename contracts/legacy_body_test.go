package contracts

import (
	"bytes"
	"errors"
	"mime/multipart"
	"strings"
	"testing"
	"unicode/utf8"
)

// legacyFormContract is a JSON tool whose body a legacy client may post
// as a form: a scalar, an integer, an array and a nested member.
func legacyFormContract(t testing.TB) *Contract {
	return legacyContract(t, "")
}

// legacyContract is that tool, sending its body in encoding.
func legacyContract(t testing.TB, encoding Encoding) *Contract {
	t.Helper()
	ct, err := Compile(nil, ContractSpec{
		Name: "push", Upstream: "u", SideEffect: true,
		Args: map[string]any{"type": "object", "properties": map[string]any{
			"message": map[string]any{"type": "string"}, "priority": map[string]any{"type": "integer"},
			"tags": map[string]any{"type": "array", "items": map[string]any{"type": "string"}}, "note": map[string]any{"type": "string"},
		}},
		Request: BindingSpec{Method: "POST", Path: "/message", Encoding: encoding,
			Body: obj("message", arg("message"), "priority", arg("priority"), "tags", arg("tags"), "meta", obj("note", arg("note")))},
	})
	if err != nil {
		t.Fatal(err)
	}
	return ct
}

// TestMultipartCutShortIsRefused: multipart.Reader ends cleanly on a body
// cut off inside a part's headers; a body without its close delimiter is
// still refused, wherever it was cut.
func TestMultipartCutShortIsRefused(t *testing.T) {
	ct := legacyFormContract(t)
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for _, f := range [][2]string{{"message", "hello"}, {"tags", "a"}, {"meta[note]", "n"}} {
		w, _ := mw.CreateFormField(f[0])
		_, _ = w.Write([]byte(f[1]))
	}
	_ = mw.Close()
	body := buf.Bytes()
	header := map[string][]string{"Content-Type": {mw.FormDataContentType()}}
	if _, err := ct.ReadArgs(LegacyRequest{Header: header, Body: body}, MaxArgsDepth); err != nil {
		t.Fatalf("the whole body: %v", err)
	}
	closeAt := bytes.LastIndex(body, []byte("--"+mw.Boundary()+"--")) + len("--"+mw.Boundary()+"--")
	for cut := 1; cut < closeAt; cut++ {
		_, err := ct.ReadArgs(LegacyRequest{Header: header, Body: body[:cut]}, MaxArgsDepth)
		var ae *ArgError
		if !errors.As(err, &ae) || ae.Problem != ProblemFormSyntax {
			t.Fatalf("cut after %d of %d bytes (%q): %v, want %s", cut, len(body), body[max(0, cut-16):cut], err, ProblemFormSyntax)
		}
	}
}

// FuzzLegacyBody: whatever the body and its Content-Type, reading it back
// never panics, fails only with an *ArgError, and yields text arguments
// that are valid UTF-8, within the field bound.
func FuzzLegacyBody(f *testing.F) {
	contracts := []*Contract{legacyContract(f, EncodingJSON), legacyContract(f, EncodingForm)}
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	w, _ := mw.CreateFormField("message")
	_, _ = w.Write([]byte("hi"))
	_ = mw.Close()
	seeds := []struct{ contentType, body string }{
		{"application/x-www-form-urlencoded", "message=hi&priority=3&tags=a&tags=b&meta%5Bnote%5D=n"},
		{"application/x-www-form-urlencoded", `{"message":"hi"}`},
		{"application/x-www-form-urlencoded", "message=%FF&idempotency_key=k"},
		{mw.FormDataContentType(), buf.String()},
		{"multipart/form-data; boundary=x", "--x\r\nContent-Disposition: form-data; name=\"f\"; filename=\"a\"\r\n\r\nz\r\n--x--"},
		{"multipart/form-data", "--x--"},
		{"application/json", `{"message":"hi","meta":{"note":"n"}}`},
		{"text/plain", "message=hi"},
		{"", "message=hi"},
	}
	for _, s := range seeds {
		f.Add(s.contentType, []byte(s.body))
	}
	f.Fuzz(func(t *testing.T, contentType string, body []byte) {
		for _, ct := range contracts {
			checkLegacyArgs(t, ct, contentType, body)
		}
	})
}

func checkLegacyArgs(t *testing.T, ct *Contract, contentType string, body []byte) {
	args, err := ct.ReadArgs(LegacyRequest{Header: map[string][]string{"Content-Type": {contentType}}, Body: body}, MaxArgsDepth)
	if err != nil {
		var ae *ArgError
		if !errors.As(err, &ae) {
			t.Fatalf("error %T %v, not an *ArgError", err, err)
		}
		return
	}
	{
		values := 0
		for name, v := range args {
			if !utf8.ValidString(name) {
				t.Errorf("argument name %q is not UTF-8", name)
			}
			items, isList := v.([]any)
			if !isList {
				items = []any{v}
			}
			for _, item := range items {
				values++
				if s, ok := item.(string); ok && !utf8.ValidString(s) {
					t.Errorf("argument %s: %q is not UTF-8", name, s)
				}
			}
		}
		jsonBody := strings.Contains(contentType, "json") || bytes.HasPrefix(bytes.TrimSpace(body), []byte("{"))
		if values > MaxFormFields+1 && (!jsonBody || ct.Binding.Encoding() == EncodingForm) {
			t.Errorf("%d values read, past the bound", values)
		}
	}
}
