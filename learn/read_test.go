package learn

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/jsontape"
	"github.com/toolgate/toolgate/policy"
)

// summaryWriter writes a summary file as JSON straight to disk, so a test
// can make one far larger than it could hold.
type summaryWriter struct {
	w     *bufio.Writer
	comma []bool // per open object or array: a member was written
	buf   []byte
}

func (sw *summaryWriter) sep() {
	if n := len(sw.comma); n > 0 {
		if sw.comma[n-1] {
			sw.w.WriteByte(',')
		}
		sw.comma[n-1] = true
	}
}

func (sw *summaryWriter) open(key string, delim byte) {
	sw.key(key)
	sw.w.WriteByte(delim)
	sw.comma = append(sw.comma, false)
}

func (sw *summaryWriter) close(delim byte) {
	sw.w.WriteByte(delim)
	sw.comma = sw.comma[:len(sw.comma)-1]
}

// key writes the separator and, inside an object, the key ("" in arrays).
func (sw *summaryWriter) key(key string) {
	sw.sep()
	if key != "" {
		sw.w.Write(jsontape.AppendString(sw.buf[:0], key))
		sw.w.WriteByte(':')
	}
}

func (sw *summaryWriter) value(key string, v any) {
	sw.key(key)
	b, _ := json.Marshal(v)
	sw.w.Write(b)
}

func (sw *summaryWriter) int(key string, n int) {
	sw.key(key)
	sw.w.Write(strconv.AppendInt(sw.buf[:0], int64(n), 10))
}

// counts writes an object of n counts, keyed by name(i).
func (sw *summaryWriter) counts(key string, n int, name func(i int) string) {
	sw.open(key, '{')
	for i := range n {
		sw.int(name(i), i+1)
	}
	sw.close('}')
}

// wideShape writes a body shape over every bound: width keys per object
// (beyond max_keys), a chain of depth objects (beyond max_depth), id-like and secret-like keys,
// non-code values in code fields, and types that are not JSON types.
func (sw *summaryWriter) wideShape(key string, depth, width int) {
	sw.open(key, '{')
	sw.value("seen", 10)
	sw.counts("types", 3, func(i int) string { return []string{"object", "weird", "integer"}[i] })
	if depth > 0 {
		sw.open("fields", '{')
		for i := range width {
			sw.wideShape(fmt.Sprintf("field_%d", i), 0, 0)
		}
		sw.wideShape("deep", depth-1, width)
		sw.wideShape("user_48213977", 0, 0)
		sw.wideShape("sk_live_4eC39HqLyjWDarjtT1zdp7dc", 0, 0)
		sw.open("code", '{')
		sw.value("seen", 5)
		sw.counts("values", 40, func(i int) string {
			if i == 39 {
				return "customer alice@example.com not found"
			}
			return fmt.Sprintf("E_CODE_%c%c", 'A'+i%26, 'A'+i/26)
		})
		sw.close('}')
		sw.close('}')
		sw.wideShape("items", 0, 0)
	}
	sw.close('}')
}

// writeHugeSummary writes a summary of about 50 MB that breaks every
// bound of the default settings: 1,000 routes (the busiest 200 fit
// max_routes), a route with 1.5 million answer signatures, and routes
// whose statuses, failures, media types, headers, query and path
// parameters, error codes and body shapes go far beyond what the learner
// keeps. It returns the busiest routes' paths, which must be kept.
func writeHugeSummary(t *testing.T, path string) (busiest []string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	sw := &summaryWriter{w: bufio.NewWriterSize(f, 1<<20)}
	sw.open("", '{')
	sw.value("version", 1)
	sw.value("since", time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	sw.value("enum_values", true)
	sw.value("exchanges", 123456789)
	sw.value("dropped", 7)
	sw.open("upstreams", '{')
	for i := range 5000 {
		sw.value(fmt.Sprintf("up%d", i), fmt.Sprintf("http://10.0.%d.%d:8080", i/256, i%256))
	}
	sw.close('}')
	sw.open("routes", '[')
	for i := range 1000 {
		calls := 1 + i%1000
		if i%5 == 0 {
			calls = 100000 + i // the busiest 200
			busiest = append(busiest, fmt.Sprintf("/r%d/{id}", i))
		}
		sw.open("", '{')
		sw.value("upstream", fmt.Sprintf("up%d", i%50))
		sw.value("method", "GET")
		sw.value("path", fmt.Sprintf("/r%d/{id}", i))
		sw.value("calls", calls)
		sw.counts("statuses", 300, func(i int) string { return fmt.Sprint(i * 2) })
		sw.counts("failures", 20, func(i int) string { return fmt.Sprintf("reason-%d", i) })
		sw.counts("content_types", 40, func(i int) string { return fmt.Sprintf("application/x-%d", i) })
		sw.open("latency", '{')
		sw.value("buckets", make([]int, latencyBuckets))
		sw.close('}')
		sw.open("accepted", '{')
		sw.value("count", calls)
		sw.open("path", '{')
		for _, name := range []string{"id", "other", "third"} {
			sw.open(name, '{')
			sw.value("seen", 3)
			sw.counts("types", 2, func(i int) string { return []string{"integer", "galaxy"}[i] })
			sw.close('}')
		}
		sw.close('}')
		sw.open("query", '{')
		for q := range 100 {
			sw.open(fmt.Sprintf("param_%d", q), '{')
			sw.value("seen", 2)
			sw.counts("types", 1, func(int) string { return "string" })
			sw.close('}')
		}
		sw.close('}')
		if i < 20 {
			sw.wideShape("body", 12, 100)
		}
		sw.close('}')
		switch {
		case i == 10:
			// The file that took 1.1 GB: 1.5 million answer signatures.
			sw.open("shapes", '{')
			for s := range 1_500_000 {
				sw.int("200 {f"+strconv.Itoa(s)+"}", 1)
			}
			sw.close('}')
		case i < 20:
			sw.wideShape("answer", 12, 100)
			sw.wideShape("errors", 12, 100)
		default:
			sw.counts("shapes", 100, func(i int) string { return fmt.Sprintf("200 {k%d}", i) })
		}
		sw.open("error_codes", '{')
		for c := range 30 {
			name := []string{"code", "error", "status", "errcode", "result_code"}[c%5] + strings.Repeat("_", c/5)
			sw.open(name, '{')
			sw.value("answers", 2)
			sw.counts("statuses", 2, func(i int) string { return []string{"200", "999"}[i] })
			sw.counts("values", 30, func(i int) string { return fmt.Sprintf("E_%c", 'A'+i) })
			sw.close('}')
		}
		sw.close('}')
		sw.open("headers", '{')
		for h := range 30 {
			sw.open([]string{"Retry-After", "X-Secret-Token", "Link"}[h%3]+strings.Repeat("-x", h/3), '{')
			sw.value("seen", 1)
			sw.value("max_seconds", 1<<40)
			sw.close('}')
		}
		sw.close('}')
		sw.close('}')
	}
	sw.close(']')
	sw.close('}')
	if err := sw.w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return busiest
}

// checkSummaryBounds fails t for anything in sum beyond the learner's
// bounds s.
func checkSummaryBounds(t *testing.T, sum *Summary, s policy.LearnSettings) {
	t.Helper()
	if len(sum.Routes) > s.MaxRoutes {
		t.Errorf("%d routes, max %d", len(sum.Routes), s.MaxRoutes)
	}
	if len(sum.Upstreams) > maxUpstreams {
		t.Errorf("%d upstreams, max %d", len(sum.Upstreams), maxUpstreams)
	}
	var shape func(where string, sh *Shape, depth int, values bool)
	shape = func(where string, sh *Shape, depth int, values bool) {
		if sh == nil {
			return
		}
		if len(sh.Fields) > s.MaxKeys {
			t.Errorf("%s: %d keys, max %d", where, len(sh.Fields), s.MaxKeys)
		}
		if depth > s.MaxDepth {
			t.Errorf("%s: depth %d, max %d", where, depth, s.MaxDepth)
		}
		for typ := range sh.Types {
			if !jsonTypes[typ] {
				t.Errorf("%s: type %q", where, typ)
			}
		}
		if len(sh.Values) > 0 && (!values || !s.EnumValues || len(sh.Values) > s.MaxValues) {
			t.Errorf("%s: %d values kept", where, len(sh.Values))
		}
		for v := range sh.Values {
			if !codeLike(v) {
				t.Errorf("%s: value %q kept", where, v)
			}
		}
		for k, c := range sh.Fields {
			if k != "{key}" && idLike(k) {
				t.Errorf("%s: id-like key %q", where, k)
			}
			shape(where+"."+k, c, depth+1, values)
		}
		shape(where+"[]", sh.Items, depth+1, values)
	}
	for _, r := range sum.Routes {
		if len(r.Shapes) > s.MaxShapes {
			t.Errorf("%s: %d shapes, max %d", r.Path, len(r.Shapes), s.MaxShapes)
		}
		if len(r.ContentTypes) > maxContentTypes+1 || len(r.ErrorCodes) > maxErrorFields {
			t.Errorf("%s: %d media types, %d error fields", r.Path, len(r.ContentTypes), len(r.ErrorCodes))
		}
		for code := range r.Statuses {
			if code < 100 || code > 599 {
				t.Errorf("%s: status %d", r.Path, code)
			}
		}
		for reason := range r.Failures {
			if !failures[reason] && reason != "other" {
				t.Errorf("%s: failure %q", r.Path, reason)
			}
		}
		for h, hs := range r.Headers {
			if !slices.Contains(answerHeaders, h) || hs.MaxSeconds > 86400 {
				t.Errorf("%s: header %q %+v", r.Path, h, hs)
			}
		}
		for f, cs := range r.ErrorCodes {
			if len(cs.Values) > s.MaxValues || !errorFields[normalizeField(f)] {
				t.Errorf("%s: error field %q keeps %d values", r.Path, f, len(cs.Values))
			}
		}
		for _, req := range []Request{r.Accepted, r.Rejected} {
			if len(req.Query) > s.MaxKeys {
				t.Errorf("%s: %d query parameters, max %d", r.Path, len(req.Query), s.MaxKeys)
			}
			for name := range req.Path {
				if !strings.Contains(r.Path, "{"+name+"}") {
					t.Errorf("%s: path parameter %q", r.Path, name)
				}
			}
		}
		for _, b := range []struct {
			name   string
			sh     *Shape
			values bool
		}{{"answer", r.Answer, true}, {"errors", r.Errors, true}, {"accepted", r.Accepted.Body, false}, {"rejected", r.Rejected.Body, false}} {
			if n := countNodes(b.sh); n > s.MaxFields {
				t.Errorf("%s %s: %d fields, max %d", r.Path, b.name, n, s.MaxFields)
			}
			shape(r.Path+" "+b.name, b.sh, 0, b.values)
		}
	}
}

// heapBytes is the live heap as the runtime counts it.
func heapBytes() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// TestAHugeSummaryFileIsReadWithinTheBounds: a 50 MB summary file (1.5
// million answer signatures in one route, 1,000 routes, every other bound
// broken) is continued cut to every bound of the settings, and reading it
// takes little memory: decoded whole, such a file took over a GiB.
func TestAHugeSummaryFileIsReadWithinTheBounds(t *testing.T) {
	if testing.Short() {
		t.Skip("writes and reads a 50 MB file")
	}
	s := policy.DefaultLearnSettings()
	s.File = filepath.Join(t.TempDir(), "learned.json")
	busiest := writeHugeSummary(t, s.File)
	st, err := os.Stat(s.File)
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() < 45<<20 || st.Size() > s.MaxFileBytes {
		t.Fatalf("the file is %d bytes, want about 50 MB and under max_file_bytes", st.Size())
	}

	runtime.GC()
	before := heapBytes()
	var peak uint64
	stop, sampled := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			peak = max(peak, heapBytes())
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	var logs bytes.Buffer
	start := time.Now()
	l, err := Open(s, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	close(stop)
	<-sampled
	if err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	after := heapBytes()
	t.Logf("read %d MB in %v; heap %d MB before, %d MB at the peak sampled, %d MB after", st.Size()>>20, time.Since(start).Round(time.Millisecond), before>>20, peak>>20, after>>20)
	if grown := int64(after) - int64(before); grown > 64<<20 {
		t.Errorf("the summary takes %d MB of heap after loading, want under 64 MB", grown>>20)
	}
	if grown := int64(peak) - int64(before); grown > 256<<20 {
		t.Errorf("reading took %d MB of heap at its peak, want under 256 MB", grown>>20)
	}
	if !strings.Contains(logs.String(), "cut to them") || !strings.Contains(logs.String(), "entries_cut=") {
		t.Errorf("no log line says the file was cut: %s", logs.String())
	}

	sum := l.Summary()
	checkSummaryBounds(t, sum, s)
	t.Run("the busiest routes are kept, the others counted as dropped", func(t *testing.T) {
		var got []string
		for _, r := range sum.Routes {
			got = append(got, r.Path)
		}
		slices.Sort(got)
		slices.Sort(busiest)
		if !slices.Equal(got, busiest) {
			t.Errorf("kept %d routes, not the %d busiest", len(got), len(busiest))
		}
		if sum.Dropped < 7+800 || sum.Exchanges != 123456789 {
			t.Errorf("dropped %d, exchanges %d", sum.Dropped, sum.Exchanges)
		}
	})
	t.Run("the route of 1.5 million signatures keeps max_shapes of them and counts the others", func(t *testing.T) {
		i := slices.IndexFunc(sum.Routes, func(r *Route) bool { return r.Path == "/r10/{id}" })
		if i < 0 {
			t.Fatal("the route is gone")
		}
		if r := sum.Routes[i]; len(r.Shapes) != s.MaxShapes || r.OtherShapes != 1_500_000-int64(s.MaxShapes) {
			t.Errorf("%d shapes, %d other", len(r.Shapes), r.OtherShapes)
		}
	})
	t.Run("the learner goes on within its bounds", func(t *testing.T) {
		l.Observe(exchange(http.MethodGet, "/r10/42", 200))
		if err := l.Save(); err != nil {
			t.Fatal(err)
		}
		again, err := ReadSummary(s.File)
		if err != nil {
			t.Fatal(err)
		}
		checkSummaryBounds(t, again, s)
		if st, _ := os.Stat(s.File); st.Size() > 8<<20 {
			t.Errorf("the saved summary is %d bytes", st.Size())
		}
	})
}

// TestASummaryFileOverTheSizeLimitIsNotRead: a file larger than
// max_file_bytes is not read at all: the learner starts afresh, a warning
// says why, and the next save replaces the file.
func TestASummaryFileOverTheSizeLimitIsNotRead(t *testing.T) {
	for _, c := range []struct {
		name  string
		limit int64
		size  int64
	}{
		{"the default limit, 64 MiB", 0, 64<<20 + 1},
		{"a configured limit", 4096, 4097},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := policy.DefaultLearnSettings()
			if c.limit > 0 {
				s.MaxFileBytes = c.limit
			}
			s.File = filepath.Join(t.TempDir(), "learned.json")
			// A file of that size that is not even JSON: never opened for
			// reading, so never refused as broken either.
			f, err := os.Create(s.File)
			if err != nil {
				t.Fatal(err)
			}
			if err := f.Truncate(c.size); err != nil {
				t.Fatal(err)
			}
			f.Close()
			var logs bytes.Buffer
			l, err := Open(s, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			if err != nil {
				t.Fatalf("Open = %v, want a fresh learner", err)
			}
			line := logs.String()
			if !strings.Contains(line, "level=WARN") || !strings.Contains(line, "larger than max_file_bytes") ||
				!strings.Contains(line, fmt.Sprintf("bytes=%d", c.size)) || !strings.Contains(line, "file="+s.File) {
				t.Errorf("log: %s", line)
			}
			if sum := l.Summary(); sum.Exchanges != 0 || len(sum.Routes) != 0 {
				t.Errorf("not a fresh summary: %s", sum)
			}
			l.Observe(exchange(http.MethodGet, "/api/search", 200))
			if err := l.Save(); err != nil {
				t.Fatal(err)
			}
			if sum, err := ReadSummary(s.File); err != nil || sum.Exchanges != 1 {
				t.Errorf("the next save did not replace the file: %v", err)
			}
		})
	}
}

// TestAReadSummaryIsCutToEveryBound: a small hand-made file over each
// bound is cut to it, entry by entry.
func TestAReadSummaryIsCutToEveryBound(t *testing.T) {
	s := policy.LearnSettings{MaxRoutes: 2, MaxShapes: 2, MaxKeys: 2, MaxDepth: 2, MaxFields: 4, MaxValues: 2, EnumValues: true}
	var buf bytes.Buffer
	sw := &summaryWriter{w: bufio.NewWriter(&buf)}
	sw.open("", '{')
	sw.value("version", 1)
	sw.open("routes", '[')
	for i, calls := range []int{5, 50, 1, 40} {
		sw.open("", '{')
		sw.value("upstream", "api")
		sw.value("method", "GET")
		sw.value("path", fmt.Sprintf("/r%d/{id}", i))
		sw.value("calls", calls)
		sw.counts("shapes", 5, func(i int) string { return fmt.Sprintf("200 {s%d}", i) })
		sw.wideShape("answer", 6, 5)
		sw.close('}')
	}
	sw.value("", nil)
	sw.close(']')
	sw.close('}')
	sw.w.Flush()
	l := New(s, Options{})
	sum, sr, err := l.read(&buf)
	if err != nil {
		t.Fatal(err)
	}
	checkSummaryBounds(t, sum, l.settings)
	if len(sum.Routes) != 2 || sum.Routes[0].Path != "/r1/{id}" || sum.Routes[1].Path != "/r3/{id}" || sum.Dropped != 6 || sr.cut == 0 {
		t.Fatalf("routes %v, dropped %d, cut %d", routePaths(sum), sum.Dropped, sr.cut)
	}
	r := sum.Routes[0]
	if len(r.Shapes) != 2 || r.OtherShapes != 3+4+5 {
		t.Errorf("shapes %v, other %d", r.Shapes, r.OtherShapes)
	}
	// max_keys 2 keeps field_0 and field_1 at the top; the items are the
	// third node; every other key (field_2-4, an id, a secret, code and
	// deep, by their seen) is counted, not kept.
	if len(r.Answer.Fields) != 2 || r.Answer.Items == nil || countNodes(r.Answer) != 3 || r.Answer.OtherKeys != 3*10+10+10+5+10 {
		t.Errorf("answer keeps %v and %d fields, %d other keys", slices.Sorted(maps.Keys(r.Answer.Fields)), countNodes(r.Answer), r.Answer.OtherKeys)
	}
}

// TestSavedSummariesReadBackWhole: whatever the learner saves reads back
// as it was: the reader cuts nothing the learner keeps.
func TestSavedSummariesReadBackWhole(t *testing.T) {
	s := policy.LearnSettings{MaxRoutes: 20, MaxShapes: 4, MaxKeys: 8, MaxDepth: 3, MaxFields: 30, MaxValues: 4, MaxBodyBytes: 1 << 20, EnumValues: true}
	l := New(s, Options{})
	for i := range 300 {
		x := exchange(http.MethodGet, fmt.Sprintf("/v%d/items/%d", i%30, i), 200+i%3*100)
		x.RawQuery = fmt.Sprintf("q=%d&limit=%d&page_%d=1", i, i%5, i%12)
		x.ResponseBody = []byte(fmt.Sprintf(`{"code":"E_%c","items":[{"id":%d,"tags":["a"],"deep":{"a":{"b":{"c":1}}}}],"k%d":true}`, 'A'+i%6, i, i%15))
		x.ResponseHeader.Set("Retry-After", fmt.Sprint(i))
		x.ResponseHeader.Set("X-Total-Count", "9")
		if i%7 == 0 {
			x.Status, x.Failure = 0, "timeout"
		}
		l.Observe(x)
	}
	data, err := l.encode()
	if err != nil {
		t.Fatal(err)
	}
	again := New(s, Options{})
	sum, sr, err := again.read(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	again.adopt(sum)
	back, _ := again.encode()
	if sr.cut != 0 || !bytes.Equal(back, data) {
		t.Errorf("cut %d; read back differs:\n%s\nwant:\n%s", sr.cut, back, data)
	}
}
