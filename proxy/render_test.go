package proxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/contracts"
)

// TestWriteResultWritesWhatRenderEncodes: whether the data is copied into
// the envelope's buffer or written where it lies (from splitDataBytes on),
// the agent reads Render's bytes, under a Content-Length that counts them.
func TestWriteResultWritesWhatRenderEncodes(t *testing.T) {
	tests := []struct {
		name string
		data string
	}{
		{"no data", ""},
		{"small data", `{"items":[1,2],"total":2}`},
		{"data just below the split", `"` + strings.Repeat("x", splitDataBytes-3) + `"`},
		{"data at the split", `"` + strings.Repeat("x", splitDataBytes-2) + `"`},
		{"data of a megabyte", `{"items":["` + strings.Repeat("文", 1<<20/3) + `"],"total":1}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := &Result{Envelope: contracts.Envelope{
				Status: contracts.StatusOK, Message: "ok", SideEffect: contracts.SideEffectNone,
				RetryAfterMS: 5, Tool: "t", CallID: "c", Observation: "[OK] ok", Data: []byte(tt.data),
			}}
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { writeResult(w, res) }))
			defer srv.Close()
			resp, err := srv.Client().Get(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			got, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			want := res.Render()
			if string(got) != string(want.Body) {
				t.Errorf("body of %d bytes differs from Render's %d", len(got), len(want.Body))
			}
			if cl := resp.Header.Get("Content-Length"); cl != strconv.Itoa(len(want.Body)) || cl != want.Header.Get("Content-Length") {
				t.Errorf("Content-Length %s, want %d", cl, len(want.Body))
			}
		})
	}
}
