package proxy

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/testkit/proxytest"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/examples"
	"github.com/toolgate/toolgate/policy"
)

// BenchmarkAnswerSize is the search call through the handler against a
// canned backend answer of 1 KiB, 64 KiB and 1 MiB (the corpus repeated as
// results, as bench/backend -size serves it): the cost of an answer whose
// data does not fit the observation.
func BenchmarkAnswerSize(b *testing.B) { benchmarkAnswerSize(b, "") }

// BenchmarkAnswerSizeEveryRecord is BenchmarkAnswerSize with a data rule
// that reads into every record ('{"items": body.results.map(r, r.title),
// "total": body.total}'): the cost of a rule that walks a large answer.
func BenchmarkAnswerSizeEveryRecord(b *testing.B) {
	benchmarkAnswerSize(b, `{"items": body.results.map(r, r.title), "total": body.total}`)
}

// benchmarkAnswerSize runs the search call with the example's policy, its
// data rule replaced by data when given.
func benchmarkAnswerSize(b *testing.B, data string) {
	for _, size := range []int{1 << 10, 64 << 10, 1 << 20} {
		b.Run(strconv.Itoa(size>>10)+"KiB", func(b *testing.B) {
			body := examples.PaddedSearchAnswer(size)
			// The default 1 MiB bound would refuse the 1 MiB answer.
			doc := strings.Replace(string(examples.Policy()), "server:\n", "server:\n  max_response_bytes: 2097152\n", 1)
			if data != "" {
				rule := `data: '{"items": body.results, "total": body.total}'`
				if !strings.Contains(doc, rule) {
					b.Fatal("the example's data rule changed")
				}
				doc = strings.Replace(doc, rule, "data: '"+data+"'", 1)
			}
			snap, err := config.CompileSource("policy.yaml", []byte(doc), config.Options{})
			if err != nil {
				b.Fatal(err)
			}
			core, err := NewCore(snap, Options{Registry: prometheus.NewRegistry(), Transport: func(*policy.Upstream) http.RoundTripper { return proxytest.CannedTransport{Body: body} }})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(core.Close)
			w := httptest.NewRecorder()
			args := []byte(`{"q":"go","limit":5}`)
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				res := core.Call(context.Background(), &Request{Tool: "search_articles", Body: args, CallID: "bench"})
				if res.Envelope.Status != "ok" {
					b.Fatal(res.Envelope.Status, res.Envelope.Message)
				}
				w.Body.Reset()
				writeResult(w, res)
			}
		})
	}
}
