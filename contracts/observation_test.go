package contracts

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/toolgate/toolgate/internal/jsontape"
)

// markerRE matches the end of every observation that was cut.
var markerRE = regexp.MustCompile(`(\n…\[truncated(: | 已截断：)[^\n]+\]|…\[truncated\])$`)

func TestObservationRendersExactly(t *testing.T) {
	tests := []struct {
		name     string
		status   Status
		message  string
		data     string
		maxChars int
		want     string
	}{
		{
			name:    "short data follows the message on its own line",
			status:  StatusOK,
			message: "Found 1 article.",
			data:    `{"id":1,"title":"Go"}`,
			want:    "[OK] Found 1 article.\n{\"id\":1,\"title\":\"Go\"}",
		},
		{
			name:    "no data leaves the message alone",
			status:  StatusNotFound,
			message: "No such article.",
			want:    "[NOT_FOUND] No such article.",
		},
		{
			name:    "indented data is compacted",
			status:  StatusEmpty,
			message: "Nothing matched.",
			data:    "{\n  \"items\": [ ],\n  \"hint\": \"try synonyms\"\n}\n",
			want:    "[EMPTY] Nothing matched.\n{\"items\":[],\"hint\":\"try synonyms\"}",
		},
		{
			name:    "keys keep the order the backend sent",
			status:  StatusOK,
			message: "m",
			data:    `{"z": 1, "a": 2, "m": {"y": true, "b": null}}`,
			want:    "[OK] m\n{\"z\":1,\"a\":2,\"m\":{\"y\":true,\"b\":null}}",
		},
		{
			name:    "numbers keep their literal form",
			status:  StatusOK,
			message: "m",
			data:    `[1.50e+10, -0.0, 12345678901234567890]`,
			want:    "[OK] m\n[1.50e+10,-0.0,12345678901234567890]",
		},
		{
			name:    "data null is left out",
			status:  StatusEmpty,
			message: "Nothing.",
			data:    "null",
			want:    "[EMPTY] Nothing.",
		},
		{
			name:    "data null with spaces is left out",
			status:  StatusEmpty,
			message: "Nothing.",
			data:    " null\n",
			want:    "[EMPTY] Nothing.",
		},
		{
			name:    "blank data is left out",
			status:  StatusOK,
			message: "Done.",
			data:    "  \n",
			want:    "[OK] Done.",
		},
		{
			name:    "data that is not JSON is shown as a string",
			status:  StatusUpstream,
			message: "The backend answered oddly.",
			data:    `<html>"oops"`,
			want:    "[UPSTREAM] The backend answered oddly.\n\"<html>\\\"oops\\\"\"",
		},
		{
			name:    "invalid UTF-8 in the message becomes U+FFFD",
			status:  StatusBadArgs,
			message: "bad \xff\xfe byte",
			want:    "[BAD_ARGS] bad \uFFFD\uFFFD byte",
		},
		{
			name:    "invalid UTF-8 inside data strings becomes U+FFFD",
			status:  StatusOK,
			message: "m",
			data:    "{\"a\":\"x\xffy\"}",
			want:    "[OK] m\n{\"a\":\"x\uFFFDy\"}",
		},
		{
			name:     "Chinese text that fits in code points is kept though its bytes do not",
			status:   StatusOK,
			message:  "找到",
			data:     `{"t":"量子计算入门"}`,
			maxChars: 22,
			want:     "[OK] 找到\n{\"t\":\"量子计算入门\"}",
		},
		{
			name:     "escaped Chinese that fits once decoded is shown whole and decoded",
			status:   StatusOK,
			message:  "m",
			data:     `{"t":"\u91cf\u5b50\u8ba1\u7b97"}`,
			maxChars: 20,
			want:     "[OK] m\n{\"t\":\"量子计算\"}",
		},
		{
			name:     "a message too long is cut and marked",
			status:   StatusBadArgs,
			message:  "The argument limit must be between 1 and 20.",
			maxChars: 40,
			want:     "[BAD_ARGS] The argument limi…[truncated]",
		},
		{
			name:     "a message too long drops the data and is marked",
			status:   StatusOK,
			message:  "The argument limit must be between 1 and 20.",
			data:     `{"allowed":[1,20]}`,
			maxChars: 30,
			want:     "[OK] The argument …[truncated]",
		},
		{
			name:     "data with no room left is replaced by the marker",
			status:   StatusOK,
			message:  "Found many.",
			data:     `[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20]`,
			maxChars: 30,
			want:     "[OK] Found many.\n…[truncated]",
		},
		{
			name:     "a long array keeps its first items and says how many more",
			status:   StatusOK,
			message:  "m",
			data:     `[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20]`,
			maxChars: 50,
			want:     "[OK] m\n[1,2,3,4,5,6,7,\"…(+13 more)\"]\n…[truncated]",
		},
		{
			name:     "a long string is shortened with an ellipsis",
			status:   StatusOK,
			message:  "m",
			data:     `{"id":7,"abstract":"` + strings.Repeat("lorem ipsum ", 20) + `"}`,
			maxChars: 100,
			want:     "[OK] m\n{\"id\":7,\"abstract\":\"lorem ipsum lorem ipsum lorem ips…\"}\n…[truncated: long strings shortened]",
		},
		{
			name:     "a wide object keeps its first keys and counts the rest",
			status:   StatusOK,
			message:  "m",
			data:     `{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10}`,
			maxChars: 60,
			want:     "[OK] m\n{\"a\":1,\"b\":2,\"…\":\"(+8 more keys)\"}\n…[truncated]",
		},
		{
			name:     "a bound below the tag and marker still holds",
			status:   StatusNotFound,
			message:  "No such article.",
			maxChars: 8,
			want:     "[NOT_FOU",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := plainObservation(tt.status, tt.message, json.RawMessage(tt.data), tt.maxChars)
			if got != tt.want {
				t.Errorf("observation() =\n%q\nwant\n%q", got, tt.want)
			}
			checkBound(t, got, tt.maxChars)
		})
	}
}

func TestObservationUsesTheDefaultBound(t *testing.T) {
	data := json.RawMessage(`"` + strings.Repeat("x", 5000) + `"`)
	for _, maxChars := range []int{0, -1} {
		t.Run("a bound of "+strconv.Itoa(maxChars)+" means the default", func(t *testing.T) {
			got := plainObservation(StatusOK, "m", data, maxChars)
			if n := utf8.RuneCountInString(got); n > defaultObservationMaxChars || n < defaultObservationMaxChars-10 {
				t.Errorf("got %d chars, want close to %d", n, defaultObservationMaxChars)
			}
			if !markerRE.MatchString(got) {
				t.Errorf("no marker at the end of %q", got[len(got)-60:])
			}
		})
	}
}

func TestObservationCountsChineseInCodePoints(t *testing.T) {
	data := json.RawMessage(`{"title":"量子计算的基础与应用","abstract":"` + strings.Repeat("量子纠缠与量子叠加是量子计算的核心。", 10) + `"}`)
	got := plainObservation(StatusOK, "找到一篇文章。", data, 50)
	if n := utf8.RuneCountInString(got); n > 50 || n < 45 {
		t.Errorf("got %d code points, want close to the bound of 50: %q", n, got)
	}
	if len(got) <= 50 {
		t.Errorf("got %d bytes; a bound in bytes would have cut more than code points do", len(got))
	}
	// Cut after the last whole value that fits: never inside a string.
	if want := "[OK] 找到一篇文章。\n{\"title\":\"量子计算的基础与应用\"\n"; !strings.HasPrefix(got, want) {
		t.Errorf("got %q, want it to start with %q", got, want)
	}
	if !markerRE.MatchString(got) {
		t.Errorf("no marker at the end of %q", got)
	}

	t.Run("a shrunk Chinese document keeps whole runes", func(t *testing.T) {
		got, cut := observation(StatusOK, "找到一篇文章。", data, 100, false)
		checkBound(t, got, 100)
		if cut != cutShrunk {
			t.Fatalf("cut = %d, want the shrink path: %q", cut, got)
		}
		part := dataPart(t, got, "[OK] 找到一篇文章。")
		if !strings.HasPrefix(part, `{"title":"量子计算的基础与应用","abstract":"量子纠缠`) || !json.Valid([]byte(part)) {
			t.Errorf("data part %q is not the title and a shortened abstract", part)
		}
	})
}

func TestObservationShrinksByStructure(t *testing.T) {
	var items []string
	for i := range 20 {
		items = append(items, fmt.Sprintf(`{"id":%d,"title":"Article number %d about tool calling","score":0.%d5}`, i+1, i+1, i))
	}
	list := json.RawMessage(`{"items":[` + strings.Join(items, ",") + `],"total":20}`)

	t.Run("an array keeps its first items and says how many more", func(t *testing.T) {
		got, cut := observation(StatusOK, "Found 20 articles.", list, 300, false)
		if cut != cutShrunk {
			t.Fatalf("cut = %d, want the shrink path: %q", cut, got)
		}
		var v struct {
			Items []json.RawMessage `json:"items"`
			Total int               `json:"total"`
		}
		part := dataPart(t, got, "[OK] Found 20 articles.")
		if err := json.Unmarshal([]byte(part), &v); err != nil {
			t.Fatalf("data part %q: %v", part, err)
		}
		if len(v.Items) < 2 {
			t.Fatalf("kept %d items, want some and a count: %s", len(v.Items), part)
		}
		if !strings.HasPrefix(string(v.Items[0]), `{"id":1,`) {
			t.Errorf("first item is %s, want id 1 first", v.Items[0])
		}
		var more string
		if err := json.Unmarshal(v.Items[len(v.Items)-1], &more); err != nil {
			t.Fatalf("last item %s is not the count", v.Items[len(v.Items)-1])
		}
		m := regexp.MustCompile(`^…\(\+(\d+) more\)$`).FindStringSubmatch(more)
		if m == nil {
			t.Fatalf("last item %q is not the count", more)
		}
		if n, _ := strconv.Atoi(m[1]); n+len(v.Items)-1 != 20 {
			t.Errorf("kept %d items and counted %d more, want 20 in all", len(v.Items)-1, n)
		}
		if v.Total != 20 {
			t.Errorf("total = %d, want the key after the array kept", v.Total)
		}
	})

	t.Run("keys keep their order when shrunk", func(t *testing.T) {
		data := json.RawMessage(`{"zeta":"` + strings.Repeat("z", 300) + `","alpha":"` + strings.Repeat("a", 300) + `","mid":[` + strings.Repeat("1,", 100) + `1]}`)
		got, cut := observation(StatusOK, "m", data, 120, false)
		if cut != cutShrunk {
			t.Fatalf("cut = %d, want the shrink path: %q", cut, got)
		}
		part := dataPart(t, got, "[OK] m")
		if keys := objectKeys(t, part); strings.Join(keys, ",") != "zeta,alpha,mid" {
			t.Errorf("keys = %v in %s, want zeta,alpha,mid", keys, part)
		}
	})

	t.Run("numbers keep their literal form when shrunk", func(t *testing.T) {
		data := json.RawMessage(`{"n":1.50e+10,"big":12345678901234567890,"s":"` + strings.Repeat("s", 500) + `"}`)
		got, cut := observation(StatusOK, "m", data, 100, false)
		if cut != cutShrunk {
			t.Fatalf("cut = %d, want the shrink path: %q", cut, got)
		}
		if !strings.Contains(got, `"n":1.50e+10,"big":12345678901234567890,`) {
			t.Errorf("numbers changed: %q", got)
		}
	})

	t.Run("a top-level string is shortened, not cut blindly", func(t *testing.T) {
		got, cut := observation(StatusUpstream, "m", json.RawMessage(`"`+strings.Repeat("é", 1000)+`"`), 100, false)
		if cut != cutShrunk {
			t.Fatalf("cut = %d, want the shrink path: %q", cut, got)
		}
		part := dataPart(t, got, "[UPSTREAM] m")
		if !strings.HasSuffix(part, `é…"`) || !json.Valid([]byte(part)) {
			t.Errorf("data part %q is not a shortened string", part)
		}
	})

	t.Run("deep nesting that cannot shrink is cut hard", func(t *testing.T) {
		deep := json.RawMessage(strings.Repeat("[", 200) + strings.Repeat("]", 200))
		got, cut := observation(StatusOK, "m", deep, 60, false)
		if cut != cutHard && cut != cutShrunk {
			t.Fatalf("cut = %d: %q", cut, got)
		}
		checkBound(t, got, 60)
		if !markerRE.MatchString(got) {
			t.Errorf("no marker at the end of %q", got)
		}
	})
}

func TestObservationRespectsTheBoundAtEverySize(t *testing.T) {
	var records []string
	for i := range 30 {
		records = append(records, fmt.Sprintf(`{"id":"kb-%04d","title":"标题 %d: tool calling","tags":["a","b","c"],"url":"https://example.com/%d"}`, i, i, i))
	}
	fixtures := []struct {
		name    string
		message string
		data    string
	}{
		{"a list of records", "Found 30 articles.", `{"items":[` + strings.Join(records, ",") + `],"total":30}`},
		{"a long Chinese string", "查询成功。", `{"text":"` + strings.Repeat("量子计算，", 200) + `"}`},
		{"an indented document", "Loaded.", "{\n  \"config\": {\n    \"name\": \"x\",\n    \"values\": [" + strings.Repeat("1.5, ", 100) + "2]\n  }\n}"},
		{"a long message", strings.Repeat("The backend said something long. ", 10), `{"a":1}`},
		{"invalid JSON", "Odd.", strings.Repeat("<p>not json</p>", 40)},
		{"deep nesting", "Deep.", strings.Repeat(`{"a":[`, 60) + "1" + strings.Repeat("]}", 60)},
		{"invalid UTF-8", "bad\xffmessage", "{\"k\xff\":\"" + strings.Repeat("\xfe", 300) + "\"}"},
	}
	for _, fx := range fixtures {
		for _, status := range []Status{StatusOK, StatusNotFound} {
			t.Run(fx.name+" stays within every bound as "+string(status), func(t *testing.T) {
				head := status.Tag() + " " + validUTF8(fx.message)
				for maxChars := 10; maxChars <= 400; maxChars++ {
					got, cut := observation(status, fx.message, json.RawMessage(fx.data), maxChars, false)
					checkBound(t, got, maxChars)
					if maxChars < MinObservationMaxChars {
						continue
					}
					if !strings.HasPrefix(got, status.Tag()+" ") {
						t.Fatalf("maxChars %d: %q lacks the tag", maxChars, got)
					}
					if cut != cutNone && cut != cutReencoded && !markerRE.MatchString(got) {
						t.Fatalf("maxChars %d: cut %d but no marker at the end of %q", maxChars, cut, got)
					}
					if cut == cutShrunk {
						if part := dataPart(t, got, head); !json.Valid([]byte(part)) {
							t.Fatalf("maxChars %d: shrunk data %q is not valid JSON", maxChars, part)
						}
					}
				}
			})
		}
	}
}

func TestMinObservationMaxCharsFitsTheLongestTag(t *testing.T) {
	longest := 0
	for _, s := range Statuses() {
		longest = max(longest, utf8.RuneCountInString(s.Tag()))
	}
	if want := longest + 1 + utf8.RuneCountInString(shortMarker); MinObservationMaxChars < want {
		t.Errorf("MinObservationMaxChars = %d, want at least %d", MinObservationMaxChars, want)
	}
}

func FuzzObservation(f *testing.F) {
	f.Add(uint8(0), "Found 1 article.", []byte(`{"id":1,"title":"Go"}`), 0)
	f.Add(uint8(1), "没有匹配的文章。", []byte(`{"items":[],"hint":"换个关键词"}`), 30)
	f.Add(uint8(2), "bad \xff", []byte("{\n \"a\": [1, 2, 3]\n}"), 12)
	f.Add(uint8(3), strings.Repeat("long message ", 20), []byte(`[1,2,3]`), 40)
	f.Add(uint8(4), "m", []byte(`"`+strings.Repeat("量", 300)+`"`), 100)
	f.Add(uint8(5), "m", []byte(strings.Repeat("[", 50)+strings.Repeat("]", 50)), 35)
	f.Add(uint8(6), "m", []byte(`{"a":"\u91cf\u5b50","b":[true,false,null,1e9]}`), 25)
	f.Add(uint8(0), "m", []byte("not json \xff"), 20)
	f.Add(uint8(1), "", []byte("null"), 1)
	f.Fuzz(func(t *testing.T, statusIndex uint8, message string, data []byte, maxChars int) {
		statuses := Statuses()
		status := statuses[int(statusIndex)%len(statuses)]
		if maxChars > 4000 {
			maxChars %= 4000
		}
		got, cut := observation(status, message, json.RawMessage(data), maxChars, false)
		checkBound(t, got, maxChars)
		// With an action clause (from the middle of the message), Chinese
		// words and a hint, the bound holds all the same.
		at := len(message) / 2
		for at > 0 && !utf8.RuneStart(message[at]) {
			at--
		}
		zh, _ := observe(status, Message{Text: message, ActionAt: at}, json.RawMessage(data), maxChars, false, markerWordsFor("zh"), "如需更多，请缩小范围")
		checkBound(t, zh, maxChars)
		if valid, compact := jsontape.Check(data); valid && compact && utf8.Valid(data) {
			// Data the envelope vouches for takes the trusted paths.
			if trusted, tcut := observation(status, message, json.RawMessage(data), maxChars, true); trusted != got || tcut != cut {
				t.Fatalf("trusted %q (cut %d), untrusted %q (cut %d)", trusted, tcut, got, cut)
			}
		}
		bound := maxChars
		if bound <= 0 {
			bound = defaultObservationMaxChars
		}
		if bound < MinObservationMaxChars {
			return
		}
		if !strings.HasPrefix(got, status.Tag()+" ") {
			t.Fatalf("%q lacks the tag %s", got, status.Tag())
		}
		head := status.Tag() + " " + validUTF8(message)
		switch cut {
		case cutNone:
			var want bytes.Buffer
			if json.Compact(&want, data) == nil && want.String() != "null" && utf8.Valid(want.Bytes()) {
				if got != head+"\n"+want.String() {
					t.Fatalf("got %q, want %q", got, head+"\n"+want.String())
				}
			}
		case cutReencoded:
			if part := got[len(head)+1:]; !json.Valid([]byte(part)) {
				t.Fatalf("re-encoded data %q is not valid JSON", part)
			}
		case cutShrunk:
			if part := dataPart(t, got, head); !json.Valid([]byte(part)) {
				t.Fatalf("shrunk data %q is not valid JSON", part)
			}
			fallthrough
		default:
			if !markerRE.MatchString(got) {
				t.Fatalf("cut %d but no marker at the end of %q", cut, got)
			}
		}
	})
}

func BenchmarkObservation(b *testing.B) {
	small := json.RawMessage(`{"items":[{"id":"kb-1","title":"Tool calling"}],"total":1}`)
	var records []string
	for i := range 200 {
		records = append(records, fmt.Sprintf(`{"id":"kb-%04d","title":"Article %d about tool calling","score":0.5}`, i, i))
	}
	large := json.RawMessage(`{"items":[` + strings.Join(records, ",") + `],"total":200}`)
	b.Run("data that fits", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			plainObservation(StatusOK, "Found 1 article.", small, 0)
		}
	})
	b.Run("data that is shrunk", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			plainObservation(StatusOK, "Found 200 articles.", large, 0)
		}
	})
}

// checkBound fails unless s is valid UTF-8 within the bound.
func checkBound(t *testing.T, s string, maxChars int) {
	t.Helper()
	if maxChars <= 0 {
		maxChars = defaultObservationMaxChars
	}
	if !utf8.ValidString(s) {
		t.Fatalf("not valid UTF-8: %q", s)
	}
	if n := utf8.RuneCountInString(s); n > maxChars {
		t.Fatalf("%d chars, want at most %d: %q", n, maxChars, s)
	}
}

// dataPart returns the data between the head's newline and the marker.
func dataPart(t *testing.T, s, head string) string {
	t.Helper()
	end := strings.LastIndexByte(s, '\n')
	if !strings.HasPrefix(s, head+"\n") || end < len(head) {
		t.Fatalf("%q does not start with %q and end with a marker line", s, head)
	}
	return s[len(head)+1 : end]
}

// objectKeys returns the top-level keys of a JSON object, in order.
func objectKeys(t *testing.T, s string) []string {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(s))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("%q is not an object", s)
	}
	var keys []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, tok.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			t.Fatal(err)
		}
	}
	return keys
}

// TestTruncationMarkerSaysWhatWasCut pins the marker's words: what was
// cut, by path, and how to get more (the tool's hint, or the catalogue's),
// in the catalogue's language; never data cut inside a value.
func TestTruncationMarkerSaysWhatWasCut(t *testing.T) {
	var items []string
	for i := range 14 {
		items = append(items, fmt.Sprintf(`{"id":"kb-%d","title":"Article %d"}`, 1000+i, i))
	}
	list := `{"items":[` + strings.Join(items, ",") + `],"total":14}`
	en := Message{Text: "m", ActionAt: 1}
	tests := []struct {
		name    string
		message Message
		data    string
		opt     ObservationOptions
		status  Status
		want    string
	}{
		{
			name:    "an array says how many items it shows, with the generic hint",
			message: en, data: list, opt: ObservationOptions{MaxChars: 300}, status: StatusOK,
			want: "[OK] m\n{\"items\":[{\"id\":\"kb-1000\",\"title\":\"Article 0\"},{\"id\":\"kb-1001\",\"title\":\"Article 1\"},{\"id\":\"kb-1002\",\"title\":\"Article 2\"},{\"id\":\"kb-1003\",\"title\":\"Article 3\"},\"…(+10 more)\"],\"total\":14}\n…[truncated: items shows 4 of 14; ask for fewer or narrower results to see the rest]",
		},
		{
			name:    "the tool's hint replaces the generic one",
			message: en, data: list, opt: ObservationOptions{MaxChars: 300, Hint: "ask for fewer articles with a smaller limit"}, status: StatusOK,
			want: "[OK] m\n{\"items\":[{\"id\":\"kb-1000\",\"title\":\"Article 0\"},{\"id\":\"kb-1001\",\"title\":\"Article 1\"},{\"id\":\"kb-1002\",\"title\":\"Article 2\"},{\"id\":\"kb-1003\",\"title\":\"Article 3\"},\"…(+10 more)\"],\"total\":14}\n…[truncated: items shows 4 of 14; ask for fewer articles with a smaller limit]",
		},
		{
			name:    "in Chinese",
			message: Message{Text: "命中 14 条。", ActionAt: len("命中 14 条。")}, data: list, opt: ObservationOptions{MaxChars: 300, Lang: "zh", Hint: "如需其余文章，请调小 limit"}, status: StatusOK,
			want: "[OK] 命中 14 条。\n{\"items\":[{\"id\":\"kb-1000\",\"title\":\"Article 0\"},{\"id\":\"kb-1001\",\"title\":\"Article 1\"},{\"id\":\"kb-1002\",\"title\":\"Article 2\"},{\"id\":\"kb-1003\",\"title\":\"Article 3\"},{\"id\":\"kb-1004\",\"title\":\"Article 4\"},\"…(+9 more)\"],\"total\":14}\n…[truncated 已截断：items 仅显示 14 项中的 5 项；如需其余文章，请调小 limit]",
		},
		{
			name:    "nested arrays and shortened strings are named",
			message: en, data: `{"items":[{"id":1,"tags":["` + strings.Repeat(`tag","`, 40) + `tag"],"text":"` + strings.Repeat("word ", 60) + `"}]}`,
			opt: ObservationOptions{MaxChars: 200}, status: StatusOK,
			want: "[OK] m\n{\"items\":[{\"id\":1,\"tags\":[\"tag\",\"tag\",\"tag\",\"tag\",\"…(+37 more)\"],\"text\":\"word word word word word word word word word word…\"}]}\n…[truncated: items[0].tags shows 4 of 41, long strings shortened]",
		},
		{
			name:    "an object says how many keys it shows",
			message: en, data: `{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"k":11,"l":12,"m":13,"n":14,"o":15,"p":16,"q":17,"r":18,"s":19,"t":20}`,
			opt: ObservationOptions{MaxChars: 100}, status: StatusOK,
			want: "[OK] m\n{\"a\":1,\"b\":2,\"c\":3,\"d\":4,\"…\":\"(+16 more keys)\"}\n…[truncated: the data shows 4 of 20 keys]",
		},
		{
			name:    "the data of a failure gets no hint",
			message: en, data: list, opt: ObservationOptions{MaxChars: 300, Hint: "ask for fewer articles"}, status: StatusBadArgs,
			want: "[BAD_ARGS] m\n{\"items\":[{\"id\":\"kb-1000\",\"title\":\"Article 0\"},{\"id\":\"kb-1001\",\"title\":\"Article 1\"},{\"id\":\"kb-1002\",\"title\":\"Article 2\"},{\"id\":\"kb-1003\",\"title\":\"Article 3\"},{\"id\":\"kb-1004\",\"title\":\"Article 4\"},\"…(+9 more)\"],\"total\":14}\n…[truncated: items shows 5 of 14]",
		},
		{
			name:    "data too deep to shrink is cut after a whole value, never inside a string",
			message: en, data: `[[[[[[[[[[{"message_id":"ntf_000001","x":1}]]]]]]]]]]`,
			opt: ObservationOptions{MaxChars: 40}, status: StatusOK,
			want: "[OK] m\n[[[[[[[[[[{\n…[truncated]",
		},
		{
			name:    "a message that does not fit keeps its action clause whole",
			message: Message{Text: strings.Repeat("The service said many things. ", 12) + "; do not repeat it.", ActionAt: 12 * len("The service said many things. ")},
			data:    `{"message_id":"ntf_1"}`, opt: ObservationOptions{MaxChars: 80}, status: StatusOK,
			want: "[OK] The service said many things. The service …; do not repeat it.\n…[truncated]",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := EnvelopeObservation(tt.status, tt.message, json.RawMessage(tt.data), tt.opt)
			if got != tt.want {
				t.Errorf("got\n%q\nwant\n%q", got, tt.want)
			}
			checkBound(t, got, tt.opt.MaxChars)
		})
	}
}

// TestValuePrefixNeverCutsAValue: the hard cut ends after a whole value or
// an opening bracket, so no string, number or literal is ever partial.
func TestValuePrefixNeverCutsAValue(t *testing.T) {
	data := []byte(`{"message_id":"ntf_0001","n":12345,"ok":true,"l":["a,b","c"]}`)
	for room := 0; room <= len(data)+1; room++ {
		p := valuePrefix(data, room)
		if len(p) > room {
			t.Fatalf("room %d: %q is longer", room, p)
		}
		if p == "" {
			continue
		}
		// A prefix of whole values closes into valid JSON.
		if !json.Valid([]byte(closeJSON(p))) {
			t.Errorf("room %d: %q cuts a value", room, p)
		}
	}
}

// closeJSON closes the brackets a prefix left open.
func closeJSON(p string) string {
	var stack []byte
	inString, escaped := false, false
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '[':
			stack = append(stack, ']')
		case c == '{':
			stack = append(stack, '}')
		case c == ']' || c == '}':
			stack = stack[:len(stack)-1]
		}
	}
	for i := len(stack) - 1; i >= 0; i-- {
		p += string(stack[i])
	}
	return p
}

// plainObservation is the observation of a message without an action
// clause and of data that may need compacting, in English.
func plainObservation(status Status, message string, data json.RawMessage, maxChars int) string {
	s, _ := observation(status, message, data, maxChars, false)
	return s
}
