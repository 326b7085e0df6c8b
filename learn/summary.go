package learn

import (
	"math"
	"time"
)

// SummaryVersion is the version of the summary file format.
const SummaryVersion = 1

// Summary is what learning mode knows: per route (upstream, method, path
// template), counts and shapes, never values. It is what Save writes and
// ReadSummary reads, as JSON.
type Summary struct {
	Version int `json:"version"`
	// Since is when learning began (the first start with this file).
	Since time.Time `json:"since"`
	// EnumValues says whether code-like string values were kept.
	EnumValues bool `json:"enum_values"`
	// Exchanges counts every exchange observed; Dropped those not learned
	// (the route limit was reached, or the method or path was not one a
	// policy can bind).
	Exchanges int64 `json:"exchanges"`
	Dropped   int64 `json:"dropped"`
	// Upstreams maps upstream names to their base URLs.
	Upstreams map[string]string `json:"upstreams"`
	// Routes are sorted by upstream, path and method.
	Routes []*Route `json:"routes"`
}

// Route is what was learned about one backend route.
type Route struct {
	Upstream string `json:"upstream"`
	Method   string `json:"method"`
	// Path is the template, escaped, with {name} placeholders where
	// segments vary.
	Path string `json:"path"`
	// Tool is set when the route is an existing tool's.
	Tool  string `json:"tool,omitempty"`
	Calls int64  `json:"calls"`
	// Statuses counts answers by HTTP status; Failures counts exchanges
	// without an answer, by reason.
	Statuses map[int]int64    `json:"statuses,omitempty"`
	Failures map[string]int64 `json:"failures,omitempty"`
	// ContentTypes counts answers by media type ("" for none).
	ContentTypes map[string]int64 `json:"content_types,omitempty"`
	// Latency is the distribution of answered exchanges' latencies.
	Latency Latency `json:"latency"`
	// Accepted summarizes the requests answered 2xx, Rejected the others:
	// arguments are learned from what the backend accepted.
	Accepted Request `json:"accepted"`
	Rejected Request `json:"rejected"`
	// Answer is the shape of the JSON bodies of 2xx answers that carry no
	// error code; Errors that of every other JSON answer.
	Answer *Shape `json:"answer,omitempty"`
	Errors *Shape `json:"errors,omitempty"`
	// ErrorCodes describes, by top-level field, the 2xx answers whose
	// body carries an error code (a legacy API's 200 {"code":"E_..."}).
	ErrorCodes map[string]*CodeStat `json:"error_codes,omitempty"`
	// Coded counts the 2xx answers that carried an error code.
	Coded int64 `json:"coded,omitempty"`
	// Shapes counts answers by signature ("200 {results,total}",
	// "500 text/html"); OtherShapes those beyond max_shapes.
	Shapes      map[string]int64 `json:"shapes,omitempty"`
	OtherShapes int64            `json:"other_shapes,omitempty"`
	// Headers counts the answer headers that matter to a contract
	// (Retry-After, pagination, rate limits), by canonical name.
	Headers map[string]*HeaderStat `json:"headers,omitempty"`
	// Auth says which credentials the answered requests carried, by
	// name, and how those without one were answered.
	Auth AuthStat `json:"auth,omitzero"`
}

// Request summarizes the requests of a route.
type Request struct {
	Count int64 `json:"count"`
	// Path and Query describe placeholder values and query parameters by
	// name; OtherQuery counts parameters not tracked (beyond max_keys, or
	// with a name that looks like an id or a secret).
	Path       map[string]*Param `json:"path,omitempty"`
	Query      map[string]*Param `json:"query,omitempty"`
	OtherQuery int64             `json:"other_query,omitempty"`
	// ContentTypes counts request bodies by media type; Body is the shape
	// of the JSON ones.
	ContentTypes map[string]int64 `json:"content_types,omitempty"`
	Body         *Shape           `json:"body,omitempty"`
	// IdempotencyKey counts requests that carried an Idempotency-Key.
	IdempotencyKey int64 `json:"idempotency_key,omitempty"`
}

// Param is a path placeholder or a query parameter: how often it was sent
// and the types of its values (integer, number, boolean, string, or array
// when repeated).
type Param struct {
	Seen  int64            `json:"seen"`
	Types map[string]int64 `json:"types"`
}

// Shape is one position in JSON bodies: the types seen there and, for
// objects and arrays, what they hold.
type Shape struct {
	// Seen counts the values at this position; Types counts them by JSON
	// type ("integer" for whole numbers).
	Seen  int64            `json:"seen"`
	Types map[string]int64 `json:"types"`
	// Fields are the keys of objects here. A key that looks like an id or
	// a secret is counted under "{key}"; OtherKeys counts keys not tracked
	// beyond max_keys or max_fields.
	Fields    map[string]*Shape `json:"fields,omitempty"`
	OtherKeys int64             `json:"other_keys,omitempty"`
	// Items is the shape of array elements; EmptyArrays counts the
	// arrays here that were empty.
	Items       *Shape `json:"items,omitempty"`
	EmptyArrays int64  `json:"empty_arrays,omitempty"`
	// Values counts the code-like strings of a code-named field
	// (code, error, status, ...); ValuesDropped says some value was not
	// code-like or there were more than max_values, so none is kept.
	Values        map[string]int64 `json:"values,omitempty"`
	ValuesDropped bool             `json:"values_dropped,omitempty"`

	// nodes counts, on the root of a body's shape, the shapes under it
	// (bounded by max_fields).
	nodes int
}

// Presence is the share of the objects at s's parent that had this key.
func (s *Shape) Presence(parent *Shape) float64 {
	if s == nil || parent == nil || parent.Types["object"] == 0 {
		return 0
	}
	return math.Min(1, float64(s.Seen)/float64(parent.Types["object"]))
}

// CodeStat describes the 2xx answers carrying an error code in one
// top-level field.
type CodeStat struct {
	Answers  int64         `json:"answers"`
	Statuses map[int]int64 `json:"statuses"`
	// Types counts the field's JSON types (a number code, an error object).
	Types map[string]int64 `json:"types"`
	// Values counts the code-like string values; ValuesDropped says some
	// value was not code-like or there were too many, so none is kept.
	Values        map[string]int64 `json:"values,omitempty"`
	ValuesDropped bool             `json:"values_dropped,omitempty"`
}

// HeaderStat counts the answers that carried a header, by status;
// MaxSeconds is the longest Retry-After given in seconds.
type HeaderStat struct {
	Seen       int64         `json:"seen"`
	Statuses   map[int]int64 `json:"statuses"`
	MaxSeconds int64         `json:"max_seconds,omitempty"`
}

// Latency is a histogram of latencies over fixed buckets that grow by a
// quarter from half a millisecond (the last bucket is everything over
// about five minutes), so two histograms merge by adding.
type Latency struct {
	Buckets []int64 `json:"buckets"`
}

// latencyBuckets is the number of buckets; bucket i holds latencies up to
// latencyBound(i), the last one everything longer.
const latencyBuckets = 64

func latencyBound(i int) time.Duration {
	return time.Duration(float64(500*time.Microsecond) * math.Pow(1.25, float64(i)))
}

func (l *Latency) add(d time.Duration, n int64) {
	if len(l.Buckets) != latencyBuckets {
		l.Buckets = make([]int64, latencyBuckets)
	}
	i := 0
	for i < latencyBuckets-1 && d > latencyBound(i) {
		i++
	}
	l.Buckets[i] += n
}

func (l *Latency) merge(o Latency) {
	if len(o.Buckets) != latencyBuckets {
		return
	}
	if len(l.Buckets) != latencyBuckets {
		l.Buckets = make([]int64, latencyBuckets)
	}
	for i, n := range o.Buckets {
		l.Buckets[i] += n
	}
}

// Count is the number of latencies recorded.
func (l Latency) Count() int64 {
	var n int64
	for _, c := range l.Buckets {
		n += c
	}
	return n
}

// Quantile returns the upper bound of the bucket holding the q-quantile
// (0 < q ≤ 1), at most a quarter above the true value; 0 when empty.
func (l Latency) Quantile(q float64) time.Duration {
	total := l.Count()
	if total == 0 {
		return 0
	}
	rank := int64(math.Ceil(q * float64(total)))
	var seen int64
	for i, c := range l.Buckets {
		seen += c
		if seen >= rank {
			return latencyBound(i)
		}
	}
	return latencyBound(latencyBuckets - 1)
}
