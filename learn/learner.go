// Package learn is toolgate's learning mode: it watches the requests
// toolgate forwards to backends (passthrough routes in transparent mode,
// and the backend calls of existing tools) and keeps, per route template
// and method, a bounded summary of what it saw, from which a draft policy
// can be written (package learn/draft).
//
// What is kept. Status codes and their counts, failures without an answer,
// media types, latency as a histogram, the answer headers that matter to a
// contract (Retry-After, pagination, rate limits) as counts, query and
// path parameters by name with the types of their values, and the JSON
// shape of request and answer bodies: keys, types and how often each key
// is present. Requests are summarized apart by whether the backend
// accepted them (2xx), so arguments are learned from valid calls.
//
// What is never kept. Values: no query, path, header or body value, no
// number, no string, with one exception that can be turned off
// (enum_values: false): the strings of code-named fields (code, error,
// status, ...) of answers, and only while every value of that field looks
// like a code (short, a letter first, no run of more than three digits,
// nothing secret- or token-like) and there are at most max_values of
// them; otherwise the field keeps none. Keys, parameter names and path
// segments that look like ids or secrets are not kept either (see idLike):
// such a key counts as "{key}", such a segment becomes a placeholder.
//
// Bounds. Routes (max_routes; exchanges on further routes are counted as
// dropped), distinct answer signatures per route (max_shapes), keys per
// object (max_keys), nesting (max_depth), fields per body summary
// (max_fields), values per field (max_values), array elements looked at
// (32) and body bytes parsed (max_body_bytes): memory stays bounded
// whatever the traffic. A summary file continued at start is held to the
// same bounds while it is read (read.go), and is not read at all past
// max_file_bytes.
//
// Cost. Observe parses the bodies outside the lock and adds them to the
// summary under it, on the request's goroutine after the answer was
// written; learning mode is meant for a while, not for the hot path.
package learn

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"maps"
	"math"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/toolgate/toolgate/policy"
)

// Options are a Learner's collaborators. The zero value uses time.Now and
// logs nothing.
type Options struct {
	Now func() time.Time
	// Logger gets what Open has to say about the summary file it reads.
	Logger *slog.Logger
}

// Learner keeps the summary. It is safe for concurrent use.
type Learner struct {
	settings  policy.LearnSettings
	now       func() time.Time
	logger    *slog.Logger
	answers   shaper
	requests  shaper
	mu        sync.Mutex
	sum       Summary
	routes    []*routeState
	toolIndex map[toolKey]*routeState
}

type toolKey struct {
	upstream, tool, method, route string
}

// maxContentTypes bounds the media types counted per route; others count
// as "other".
const maxContentTypes = 8

// maxErrorFields bounds the error-code fields tracked per route.
const maxErrorFields = 8

// maxUpstreams bounds the upstream URLs recorded.
const maxUpstreams = 256

// answerHeaders are the answer headers learning mode counts: what a
// contract may care about (retry hints, pagination, rate limits, where a
// created resource is, replays). Their values are never kept, except the
// largest Retry-After in seconds.
var answerHeaders = []string{
	"Retry-After", "Link", "X-Total-Count", "X-Total", "X-Next-Page", "X-Next-Cursor", "X-Page", "X-Per-Page",
	"X-Pagination", "X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset", "Ratelimit",
	"Ratelimit-Policy", "Location", "Idempotent-Replayed", "Deprecation", "Sunset",
}

// failures are the reasons of exchanges without an answer that are kept;
// others count as "other".
var failures = map[string]bool{"timeout": true, "reset": true, "connect": true, "canceled": true, "tls": true}

// methods are the methods a policy can bind.
var methods = map[string]bool{
	http.MethodGet: true, http.MethodHead: true, http.MethodPost: true, http.MethodPut: true,
	http.MethodPatch: true, http.MethodDelete: true, http.MethodOptions: true,
}

// New returns a learner with an empty summary. Bounds left zero take
// policy.DefaultLearnSettings; EnumValues is taken as given.
func New(s policy.LearnSettings, opts Options) *Learner {
	d := policy.DefaultLearnSettings()
	for _, f := range []struct{ v, def *int }{
		{&s.MaxRoutes, &d.MaxRoutes}, {&s.MaxShapes, &d.MaxShapes}, {&s.MaxKeys, &d.MaxKeys},
		{&s.MaxDepth, &d.MaxDepth}, {&s.MaxFields, &d.MaxFields}, {&s.MaxValues, &d.MaxValues},
	} {
		if *f.v <= 0 {
			*f.v = *f.def
		}
	}
	if s.MaxBodyBytes <= 0 {
		s.MaxBodyBytes = d.MaxBodyBytes
	}
	if s.MaxFileBytes <= 0 {
		s.MaxFileBytes = d.MaxFileBytes
	}
	if s.SaveInterval <= 0 {
		s.SaveInterval = d.SaveInterval
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	l := &Learner{
		settings:  s,
		now:       opts.Now,
		logger:    opts.Logger,
		answers:   shaper{maxKeys: s.MaxKeys, maxDepth: s.MaxDepth, maxFields: s.MaxFields, maxValues: s.MaxValues, values: s.EnumValues},
		requests:  shaper{maxKeys: s.MaxKeys, maxDepth: s.MaxDepth, maxFields: s.MaxFields, maxValues: s.MaxValues},
		toolIndex: map[toolKey]*routeState{},
	}
	l.sum = Summary{Version: SummaryVersion, Since: opts.Now().UTC().Truncate(time.Second), EnumValues: s.EnumValues, Upstreams: map[string]string{}}
	return l
}

// Settings returns the settings the learner runs with, defaults applied.
func (l *Learner) Settings() policy.LearnSettings { return l.settings }

// prepared is what Observe works out of an exchange before taking the
// lock: the path split, the query parsed, the bodies decoded.
type prepared struct {
	segs     []string
	pathOK   bool
	query    url.Values
	queryOK  bool
	reqMT    string
	reqBody  any
	reqJSON  bool
	respMT   string
	respBody any
	respJSON bool
	status   int
}

// Observe adds an exchange to the summary.
func (l *Learner) Observe(x *Exchange) {
	p := l.prepare(x)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sum.Exchanges++
	r := l.route(x, &p)
	if r == nil {
		l.sum.Dropped++
		return
	}
	if _, ok := l.sum.Upstreams[x.Upstream]; !ok && len(l.sum.Upstreams) < maxUpstreams && x.UpstreamURL != "" {
		l.sum.Upstreams[x.Upstream] = x.UpstreamURL
	}
	l.record(r, x, &p)
}

func (l *Learner) prepare(x *Exchange) prepared {
	p := prepared{status: x.Status}
	if p.status != 0 && (p.status < 100 || p.status > 599) {
		p.status = 0
	}
	p.segs, p.pathOK = splitPath(x.EscapedPath)
	if x.RawQuery != "" && len(x.RawQuery) <= maxPathBytes {
		q, err := url.ParseQuery(x.RawQuery)
		p.query, p.queryOK = q, err == nil
	}
	if len(x.RequestBody) > 0 || x.RequestTruncated {
		p.reqMT = mediaType(x.RequestHeader.Get("Content-Type"))
		if !x.RequestTruncated {
			p.reqBody, p.reqJSON = l.decode(p.reqMT, x.RequestBody)
		}
	}
	if p.status != 0 {
		p.respMT = mediaType(x.ResponseHeader.Get("Content-Type"))
		if !x.ResponseTruncated {
			p.respBody, p.respJSON = l.decode(p.respMT, x.ResponseBody)
		}
	}
	return p
}

// decode parses a JSON body: one declared JSON, or an undeclared or
// text/plain one that starts like JSON (legacy APIs mislabel theirs).
func (l *Learner) decode(mt string, body []byte) (any, bool) {
	if len(body) == 0 || int64(len(body)) > l.settings.MaxBodyBytes {
		return nil, false
	}
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	if !isJSONMedia(mt) && !((mt == "" || mt == "text/plain") && len(trimmed) > 0 && (trimmed[0] == '{' || trimmed[0] == '[')) {
		return nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, false
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, false
	}
	return v, true
}

// route finds or makes the route of an exchange; nil when it cannot be
// learned (limit reached, or not a method and path a policy can bind).
func (l *Learner) route(x *Exchange, p *prepared) *routeState {
	if !methods[x.Method] || x.Upstream == "" {
		return nil
	}
	if x.Tool != "" {
		k := toolKey{x.Upstream, x.Tool, x.Method, x.Route}
		if r := l.toolIndex[k]; r != nil {
			return r
		}
		if len(l.routes) >= l.settings.MaxRoutes || len(x.Route) > maxPathBytes || !validTemplate(x.Route) {
			return nil
		}
		r := l.newRoute(x.Upstream, x.Method, parseTemplate(x.Route))
		r.Tool = x.Tool
		l.toolIndex[k] = r
		return r
	}
	if !p.pathOK {
		return nil
	}
	var best *routeState
	bestLiterals := -1
	for _, r := range l.routes {
		if r.Upstream != x.Upstream || r.Method != x.Method {
			continue
		}
		if n, ok := matches(r.segs, p.segs); ok && n > bestLiterals {
			best, bestLiterals = r, n
		}
	}
	if best != nil {
		return best
	}
	cand := templateOf(p.segs)
	if r := l.merge(x, cand); r != nil {
		return r
	}
	if len(l.routes) >= l.settings.MaxRoutes {
		return nil
	}
	return l.newRoute(x.Upstream, x.Method, cand)
}

func validTemplate(path string) bool {
	if len(path) == 0 || path[0] != '/' {
		return false
	}
	segs := parseTemplate(path)
	return len(segs) <= maxSegments
}

func (l *Learner) newRoute(upstream, method string, segs []segment) *routeState {
	r := &routeState{Route: &Route{Upstream: upstream, Method: method, Path: templateString(segs)}, segs: segs}
	l.routes = append(l.routes, r)
	return r
}

// merge makes one route of the routes that differ from cand only in one
// literal position, once that position has taken enough literals (see
// mergeInner, mergeLast). It returns the merged route, or nil.
func (l *Learner) merge(x *Exchange, cand []segment) *routeState {
	groups := map[int][]*routeState{}
	for _, r := range l.routes {
		if r.Upstream != x.Upstream || r.Method != x.Method || r.Tool != "" {
			continue
		}
		if pos, ok := sameExcept(r.segs, cand); ok {
			groups[pos] = append(groups[pos], r)
		}
	}
	positions := make([]int, 0, len(groups))
	for pos := range groups {
		positions = append(positions, pos)
	}
	sort.Ints(positions)
	for _, pos := range positions {
		group := groups[pos]
		threshold := mergeInner
		if pos == len(cand)-1 {
			threshold = mergeLast
		}
		if len(group)+1 < threshold {
			continue
		}
		segs := make([]segment, len(cand))
		for i, s := range cand {
			segs[i] = segment{literal: s.literal, wild: s.wild}
		}
		segs[pos] = segment{wild: true}
		nameAll(segs)
		merged := &routeState{Route: &Route{Upstream: x.Upstream, Method: x.Method, Path: templateString(segs)}, segs: segs}
		absorbed := map[*routeState]bool{}
		for _, g := range group {
			l.absorb(merged, g, pos)
			absorbed[g] = true
		}
		kept := l.routes[:0]
		for _, r := range l.routes {
			if !absorbed[r] {
				kept = append(kept, r)
			}
		}
		clear(l.routes[len(kept):])
		l.routes = append(kept, merged)
		return merged
	}
	return nil
}

// record adds an exchange to its route.
func (l *Learner) record(r *routeState, x *Exchange, p *prepared) {
	r.Calls++
	accepted := p.status >= 200 && p.status < 300
	req := &r.Rejected
	if accepted {
		req = &r.Accepted
	}
	req.Count++
	if p.pathOK && len(p.segs) == len(r.segs) {
		for i, s := range r.segs {
			if s.wild && s.raw == "" {
				addParam(&req.Path, s.name, valueType(unescape(p.segs[i])), 1)
			}
		}
	}
	if p.queryOK {
		for _, name := range slices.Sorted(maps.Keys(p.query)) {
			if name == "" || idLike(name) || CredentialParam(name) || req.Query[name] == nil && len(req.Query) >= l.settings.MaxKeys {
				req.OtherQuery++
				continue
			}
			vals := p.query[name]
			t := "array"
			if len(vals) == 1 {
				t = valueType(vals[0])
			}
			addParam(&req.Query, name, t, 1)
		}
	}
	if len(x.RequestBody) > 0 || x.RequestTruncated {
		addBounded(&req.ContentTypes, p.reqMT, 1)
	}
	if p.reqJSON {
		if req.Body == nil {
			req.Body = &Shape{}
		}
		l.requests.observe(req.Body, p.reqBody)
	}
	if x.RequestHeader.Get("Idempotency-Key") != "" {
		req.IdempotencyKey++
	}
	if p.status == 0 {
		reason := x.Failure
		if !failures[reason] {
			reason = "other"
		}
		inc(&r.Failures, reason)
		return
	}
	inc(&r.Statuses, p.status)
	r.Auth.observe(credentials(x.RequestHeader, p.query), p.status)
	r.Latency.add(x.Latency, 1)
	addBounded(&r.ContentTypes, p.respMT, 1)
	for _, h := range answerHeaders {
		v := x.ResponseHeader.Get(h)
		if v == "" {
			continue
		}
		hs := entry(&r.Headers, h, math.MaxInt)
		hs.Seen++
		inc(&hs.Statuses, p.status)
		if h == "Retry-After" {
			if secs, err := strconv.ParseInt(v, 10, 64); err == nil && secs >= 0 {
				hs.MaxSeconds = max(hs.MaxSeconds, min(secs, 86400))
			}
		}
	}
	sig := signature(p.status, p.respMT, p.respJSON, p.respBody, len(x.ResponseBody) == 0 && !x.ResponseTruncated)
	if _, ok := r.Shapes[sig]; ok || len(r.Shapes) < l.settings.MaxShapes {
		inc(&r.Shapes, sig)
	} else {
		r.OtherShapes++
	}
	if !p.respJSON {
		return
	}
	coded := accepted && l.errorCodes(r, p)
	if coded {
		r.Coded++
	}
	if accepted && !coded {
		if r.Answer == nil {
			r.Answer = &Shape{}
		}
		l.answers.observe(r.Answer, p.respBody)
		return
	}
	if r.Errors == nil {
		r.Errors = &Shape{}
	}
	l.answers.observe(r.Errors, p.respBody)
}

// errorCodes records the error codes a 2xx answer carries in its top-level
// error fields, and reports whether it carries any: such an answer is a
// legacy API's error, not data.
func (l *Learner) errorCodes(r *routeState, p *prepared) bool {
	obj, ok := p.respBody.(map[string]any)
	if !ok {
		return false
	}
	coded := false
	for _, k := range slices.Sorted(maps.Keys(obj)) {
		field := normalizeField(k)
		if !errorFields[field] || idLike(k) {
			continue
		}
		v := obj[k]
		isErr := false
		switch v := v.(type) {
		case string:
			isErr = errorValue(k, v)
		case map[string]any:
			isErr = len(v) > 0 && (field == "error" || field == "err")
		case []any:
			isErr = len(v) > 0 && (field == "error" || field == "err")
		case bool:
			isErr = v && (field == "error" || field == "err")
		}
		if !isErr {
			continue
		}
		coded = true
		cs := entry(&r.ErrorCodes, k, maxErrorFields)
		if cs == nil {
			continue
		}
		cs.Answers++
		inc(&cs.Statuses, p.status)
		inc(&cs.Types, jsonType(v))
		if s, ok := v.(string); ok && l.settings.EnumValues {
			keepValue(&cs.Values, &cs.ValuesDropped, s, l.settings.MaxValues)
		} else if ok {
			cs.ValuesDropped = true
		}
	}
	return coded
}

func addParam(m *map[string]*Param, name, typ string, n int64) {
	p := entry(m, name, math.MaxInt)
	p.Seen += n
	add(&p.Types, typ, n)
}

// addBounded counts a media type, or "other" once maxContentTypes are
// counted.
func addBounded(m *map[string]int64, mt string, n int64) {
	if _, ok := (*m)[mt]; !ok && len(*m) >= maxContentTypes {
		mt = "other"
	}
	add(m, mt, n)
}
