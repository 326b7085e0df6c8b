package contracts

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/toolgate/toolgate/examples"
	"github.com/toolgate/toolgate/internal/jsontape"
)

// The observation and the envelope are byte for byte what the reference
// (observation_ref_test.go, the code before the large-answer work) gave,
// for any data: these tests compare them.

// sameObservation fails unless observe and the reference agree on data,
// trusted or not, for each language, hint and bound given.
func sameObservation(t *testing.T, status Status, m Message, data []byte, maxChars int, trusted bool) {
	t.Helper()
	for _, lang := range []string{"en", "zh"} {
		for _, hint := range []string{"", "请换更具体的关键词，或调小 limit"} {
			got, gotCut := observe(status, m, data, maxChars, trusted, markerWordsFor(lang), hint)
			want, wantCut := refObserve(status, m, data, maxChars, trusted, markerWordsFor(lang), hint)
			if got != want || gotCut != wantCut {
				t.Fatalf("observation of %.300q (bound %d, trusted %v, %s, hint %q):\n got %q (cut %d)\nwant %q (cut %d)",
					data, maxChars, trusted, lang, hint, got, gotCut, want, wantCut)
			}
			if !trusted {
				continue
			}
			// So is the envelope that carries it, as the proxy writes
			// it.
			env := Envelope{Status: status, Message: m.Text, Data: data, SideEffect: SideEffectNone, Tool: "search_articles", CallID: "01J", Observation: got}
			ref := env
			ref.Observation = want
			if a, b := env.AppendJSON(nil), ref.AppendJSON(nil); !bytes.Equal(a, b) {
				t.Fatalf("envelope of %.300q:\n got %.500s\nwant %.500s", data, a, b)
			}
		}
	}
}

// checkAgainstReference compares observe with the reference on data as
// untrusted bytes and, when it is compact valid UTF-8 JSON as an
// envelope's data is, as trusted data, at bounds around its length.
func checkAgainstReference(t *testing.T, status Status, m Message, data []byte, bounds []int) {
	t.Helper()
	valid, compact := jsontape.Check(data)
	trusted := valid && compact && utf8.Valid(data)
	for _, maxChars := range bounds {
		sameObservation(t, status, m, data, maxChars, false)
		if trusted {
			sameObservation(t, status, m, data, maxChars, true)
		}
	}
}

// randomJSON writes a random JSON value: nested containers, long and short
// strings of ASCII, CJK, escapes (lone surrogates included) and, unless
// valid is set, invalid UTF-8, numbers of every form, and white space when
// spaced is set.
type randomJSON struct {
	r              *rand.Rand
	valid, spaced  bool
	maxLen, maxArr int
	budget         int // values left to write; containers past it are empty
}

func (g *randomJSON) value(b []byte, depth int) []byte {
	switch k := g.r.IntN(10); {
	case depth < 6 && k < 3:
		return g.container(b, depth, '[')
	case depth < 6 && k < 6:
		return g.container(b, depth, '{')
	case k < 8:
		return g.str(b)
	default:
		return g.scalar(b)
	}
}

func (g *randomJSON) space(b []byte) []byte {
	if g.spaced && g.r.IntN(4) == 0 {
		return append(b, " \n\t\r"[g.r.IntN(4)])
	}
	return b
}

func (g *randomJSON) container(b []byte, depth int, open byte) []byte {
	b = append(b, open)
	n := g.r.IntN(4)
	switch g.r.IntN(8) {
	case 0:
		n = g.r.IntN(g.maxArr + 1)
	case 1:
		n = 0
	}
	for i := range n {
		if g.budget--; g.budget < 0 {
			break
		}
		if i > 0 {
			b = append(g.space(b), ',')
		}
		b = g.space(b)
		if open == '{' {
			b = append(g.space(g.str(b)), ':')
			b = g.space(b)
		}
		b = g.value(b, depth+1)
	}
	if open == '{' {
		return append(g.space(b), '}')
	}
	return append(g.space(b), ']')
}

var randomPieces = []string{
	"a", "kb-1001", "Go concurrency patterns", " ", "量", "子", "计算", "é", "🙂", "\u2028", "\u2029",
	`\n`, `\"`, `\\`, `\/`, `\t`, `\u0001`, `\u91cf`, `\ud83d\ude42`, `\ud800`, `\udc00x`, `\u2028`, "\x7f",
}

func (g *randomJSON) str(b []byte) []byte {
	b = append(b, '"')
	n := g.r.IntN(12)
	switch g.r.IntN(6) {
	case 0:
		n = g.r.IntN(g.maxLen + 1)
	case 1:
		n = 0
	}
	// Some strings are long plain ASCII, the common case.
	plain := g.r.IntN(2) == 0
	for range n {
		switch {
		case plain:
			b = append(b, byte('a'+g.r.IntN(26)))
		case !g.valid && g.r.IntN(20) == 0:
			b = append(b, []byte{0xff, 0xc3, 0xe9, 0x80}[g.r.IntN(4)])
		default:
			b = append(b, randomPieces[g.r.IntN(len(randomPieces))]...)
		}
	}
	return append(b, '"')
}

func (g *randomJSON) scalar(b []byte) []byte {
	return append(b, []string{"0", "-1", "12345678901234567890", "3.25", "-0.5E-3", "1e9", "true", "false", "null", "1.0e+2"}[g.r.IntN(10)]...)
}

// TestObservationMatchesReference compares observe, the shrink tree and
// the envelope with the reference on random data of every kind, at bounds
// from the smallest to past the data's length.
func TestObservationMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(19, 2026))
	statuses := Statuses()
	messages := []Message{
		{Text: "命中 300 条。", ActionAt: len("命中 300 条。")},
		{Text: "Found articles. Ask again.", ActionAt: len("Found articles. ")},
		{Text: "bad \xff message", ActionAt: 3},
		{Text: strings.Repeat("long message ", 40), ActionAt: 200},
	}
	for i := range 400 {
		g := randomJSON{r: r, valid: i%3 != 0, spaced: i%5 == 0, maxLen: 120, maxArr: 40, budget: 80}
		if i%100 == 0 {
			g.maxLen, g.maxArr, g.budget = 2000, 400, 600
		}
		data := g.value(nil, 0)
		runes := utf8.RuneCount(data)
		bounds := []int{0, 1 + r.IntN(64), MinObservationMaxChars, 300 + r.IntN(1500), runes, runes + 40, runes/2 + 20}
		checkAgainstReference(t, statuses[r.IntN(len(statuses))], messages[r.IntN(len(messages))], data, bounds)
	}
}

// TestObservationMatchesReferenceOnRecords: arrays of records, the shape
// of most large answers, where the shrink tree keeps a later record only
// while it could be shown with all its keys: records of few and many keys,
// nested records, at bounds from tight to loose.
func TestObservationMatchesReferenceOnRecords(t *testing.T) {
	r := rand.New(rand.NewPCG(64, 1024))
	record := func(b []byte, keys int, nested bool) []byte {
		b = append(b, '{')
		for k := range keys {
			if k > 0 {
				b = append(b, ',')
			}
			b = append(b, `"`+[]string{"id", "title", "snippet_of_the_article", "url", "k", "量子"}[r.IntN(6)]+strconv.Itoa(k)+`":`...)
			switch r.IntN(5) {
			case 0:
				b = strconv.AppendInt(b, int64(r.IntN(100000)), 10)
			case 1:
				if nested {
					b = append(b, `[{"a":1,"b":"x"},{"a":2}]`...)
					continue
				}
				fallthrough
			default:
				b = append(b, '"')
				for range r.IntN(60) {
					b = append(b, []string{"a", "b", "c", "d", " ", "量", `\n`, "é"}[r.IntN(8)]...)
				}
				b = append(b, '"')
			}
		}
		return append(b, '}')
	}
	m := Message{Text: "Found them.", ActionAt: len("Found them.")}
	for range 80 {
		n, keys, nested := 1+r.IntN(150), 1+r.IntN(20), r.IntN(3) == 0
		b := []byte(`{"items":[`)
		for i := range n {
			if i > 0 {
				b = append(b, ',')
			}
			b = record(b, 1+r.IntN(keys), nested)
		}
		b = append(b, `],"total":`...)
		b = strconv.AppendInt(b, int64(n), 10)
		b = append(b, '}')
		checkAgainstReference(t, StatusOK, m, b, []int{30 + r.IntN(200), 200 + r.IntN(2000), 1800})
	}
}

// TestObservationMatchesReferenceAtEveryBound: small answers of records at
// every bound up to past their length, so that each lower bound the shrink
// tree keeps by is met exactly somewhere.
func TestObservationMatchesReferenceAtEveryBound(t *testing.T) {
	docs := []string{
		`{"items":[{"id":"kb-1","title":"Go"},{"id":"kb-2","title":"Tool calling for agents"},{"id":"kb-3"},{"id":"kb-4","t":"x","u":"y"},{"id":"kb-5","title":"量子计算入门"}],"total":5}`,
		`[{"a":1},{"a":2,"b":[{"c":"d"},{"c":"e","f":"g"}]},{"a":3},{"bbbbbbbbbbbbbbbbbbbbbbbbb":"x"},[1,2],"s",{"a":4}]`,
		`[[{"k":"v","w":"x"},{"k":"v2"}],[{"k":"v3","w":"x"}],{"z":{"y":{"x":"w"}}},{"long key of more than sixteen runes":1,"k":2}]`,
	}
	for _, doc := range docs {
		bounds := make([]int, 0, len(doc)+40)
		for b := 1; b <= len(doc)+40; b++ {
			bounds = append(bounds, b)
		}
		checkAgainstReference(t, StatusOK, Message{Text: "ok", ActionAt: 2}, []byte(doc), bounds)
	}
}

// TestObservationsAtOnce: observations made at the same time, on shrink
// trees from the shared arenas, are each what the reference makes.
func TestObservationsAtOnce(t *testing.T) {
	m := Message{Text: "命中。", ActionAt: len("命中。")}
	opt := ObservationOptions{MaxChars: 600, Lang: "zh"}
	var docs [][]byte
	var want []string
	for i := range 8 {
		doc := largeSearchData(2000 + 3000*i)
		docs = append(docs, doc)
		want = append(want, refEnvelopeObservation(StatusOK, m, doc, opt))
	}
	var wg sync.WaitGroup
	errs := make(chan string, len(docs))
	for i := range docs {
		wg.Go(func() {
			for range 400 {
				if got := EnvelopeObservation(StatusOK, m, docs[i], opt); got != want[i] {
					errs <- got
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for got := range errs {
		t.Errorf("an observation made alongside others differs from the reference: %.200q", got)
	}
}

// TestObservationMatchesReferenceOnEdges: nesting at and past MaxDepth,
// huge strings, long arrays of numbers, and cut or broken documents.
func TestObservationMatchesReferenceOnEdges(t *testing.T) {
	m := Message{Text: "命中 3 条。", ActionAt: len("命中 3 条。")}
	docs := []string{
		strings.Repeat("[", jsontape.MaxDepth) + strings.Repeat("]", jsontape.MaxDepth),
		strings.Repeat("[", jsontape.MaxDepth+1) + strings.Repeat("]", jsontape.MaxDepth+1),
		strings.Repeat(`{"a":`, 300) + "1" + strings.Repeat("}", 300),
		`"` + strings.Repeat("x", 100000) + `"`,
		`"` + strings.Repeat("量", 30000) + `"`,
		`{"s":"` + strings.Repeat(`\u91cf`, 5000) + `"}`,
		`{"s":"` + strings.Repeat("a", 3000) + "\xff" + `"}`,
		`{"s":"` + strings.Repeat("abcdefg\u2028", 500) + `"}`,
		"[" + strings.Repeat("1.5e3,", 20000) + "0]",
		`{"items":[` + strings.Repeat(`{"id":"kb-1","t":"x"},`, 3000) + `{}],"total":3001}`,
		`{"items":[{"id":"kb-1"`, `{"a":"\x01"}`, `{"a":1}x`, "not json \xff", " null ", "",
	}
	for _, doc := range docs {
		runes := utf8.RuneCountInString(doc)
		checkAgainstReference(t, StatusOK, m, []byte(doc), []int{0, 40, MinObservationMaxChars, 1800, runes, runes + 1})
	}
}

// TestLargeAnswerObservationMatchesReference: the search answer of the
// answer-size benchmark (the corpus repeated as results), in English and
// in Chinese, at 64 KiB and 1 MiB.
func TestLargeAnswerObservationMatchesReference(t *testing.T) {
	for _, size := range []int{64 << 10, 1 << 20} {
		data := largeSearchData(size)
		for _, maxChars := range []int{0, 300, 1800, 8000} {
			sameObservation(t, StatusOK, Message{Text: "命中 4000 条。", ActionAt: len("命中 4000 条。")}, data, maxChars, true)
		}
	}
}

// largeSearchData is the data of the example policy's search_articles
// ({"items": body.results, "total": body.total}) for a backend answer of
// at least size bytes, as bench/backend -size pads it.
func largeSearchData(size int) []byte {
	answer := examples.PaddedSearchAnswer(size)
	return append([]byte(`{"items":`), answer[len(`{"results":`):]...)
}

// FuzzObservationMatchesReference: for any data, bound and message, the
// observation (and, for envelope data, the envelope) is byte for byte the
// reference's.
func FuzzObservationMatchesReference(f *testing.F) {
	f.Add([]byte(`{"items":[{"id":"kb-1","title":"Tool calling"},{"id":"kb-2"}],"total":2}`), 60, "Found 2.")
	f.Add([]byte(`{"a":"\u91cf\u5b50","b":[true,false,null,1e9,-0.5E-3]}`), 20, "命中")
	f.Add([]byte(`["`+strings.Repeat("量\"", 50)+`",{"k\"ey":{}}]`), 40, "m")
	f.Add([]byte("{\"s\":\"abc\xffdef\",\n \"t\": [1, 2]}"), 15, "bad \xff")
	f.Add([]byte(`{"s":"`+strings.Repeat("plain ascii text ", 40)+`"}`), 300, "")
	f.Fuzz(func(t *testing.T, data []byte, maxChars int, message string) {
		maxChars %= 5000
		m := Message{Text: message, ActionAt: len(message) / 2}
		for _, status := range []Status{StatusOK, StatusUpstream} {
			checkAgainstReference(t, status, m, data, []int{maxChars})
		}
	})
}

// BenchmarkLargeAnswerObservation is the observation of the example's
// search answer at 64 KiB and 1 MiB (its data does not fit), as the proxy
// makes it, next to the reference's.
func BenchmarkLargeAnswerObservation(b *testing.B) {
	m := Message{Text: "命中 300 条。", ActionAt: len("命中 300 条。")}
	opt := ObservationOptions{MaxChars: 1800, Lang: "zh", Hint: "请换更具体的关键词，或调小 limit"}
	for _, size := range []int{64 << 10, 1 << 20} {
		data := largeSearchData(size)
		for _, impl := range []struct {
			name    string
			observe func(Status, Message, json.RawMessage, ObservationOptions) string
		}{{"live", EnvelopeObservation}, {"reference", refEnvelopeObservation}} {
			b.Run(strconv.Itoa(size>>10)+"KiB/"+impl.name, func(b *testing.B) {
				b.SetBytes(int64(len(data)))
				b.ReportAllocs()
				for b.Loop() {
					impl.observe(StatusOK, m, data, opt)
				}
			})
		}
	}
}
