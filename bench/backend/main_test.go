package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/toolgate/toolgate/examples"
)

func TestPaddedAnswerIsASearchAnswerOfAtLeastTheSize(t *testing.T) {
	for _, size := range []int{1, 65536, 1 << 20} {
		body := examples.PaddedSearchAnswer(size)
		if len(body) < size {
			t.Errorf("size %d: answer of %d bytes", size, len(body))
		}
		var answer struct {
			Results []examples.Article `json:"results"`
			Total   int                `json:"total"`
		}
		if err := json.Unmarshal(body, &answer); err != nil {
			t.Fatalf("size %d: %v", size, err)
		}
		if answer.Total != len(answer.Results) || answer.Total == 0 || answer.Results[0].ID == "" {
			t.Errorf("size %d: total %d, %d results", size, answer.Total, len(answer.Results))
		}
	}
}

func TestHandlerServesSizedSearchesNotificationsAndHeldCounts(t *testing.T) {
	h, err := newHandler(4096, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	get := func(path string) (int, string) {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/api/search?q=anything"); code != 200 || len(body) < 4096 {
		t.Errorf("search: %d, %d bytes", code, len(body))
	}
	if code, body := get("/bench/inflight"); code != 200 || body != `{"now":0,"max":1}`+"\n" {
		t.Errorf("inflight: %d %q", code, body)
	}
	if code, _ := get("/nope"); code != 404 {
		t.Errorf("unknown path: %d", code)
	}
	resp, err := http.Post(srv.URL+"/v1/users/alice/notifications", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode == 404 {
		t.Error("notifications are not served")
	}
}
