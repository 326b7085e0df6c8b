package learn

import (
	"container/heap"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"time"
)

// Reading a summary. A summary file is read token by token, and what the
// learner's bounds do not allow is never kept: a file is cut to every
// bound the learner enforces while it runs, so continuing a summary costs
// no more memory than learning it did, however large or hand-edited the
// file (a summary of 1.5 million answer signatures once took over a GiB
// when decoded whole). The bounds cut:
//
//   - routes beyond max_routes (the fewest calls first; their calls are
//     counted as dropped), upstream URLs beyond 256;
//   - per route, answer signatures beyond max_shapes (counted as other
//     shapes), media types beyond 8 (counted as "other"), error-code
//     fields beyond 8, statuses outside 100-599, failure reasons the
//     learner does not name (counted as "other"), headers it does not
//     count, latency histograms that are not its 64 buckets (refused);
//   - per request summary, query parameters beyond max_keys or named like
//     ids or secrets (counted as other parameters), path parameters that
//     are not the route's placeholders;
//   - per body shape, keys beyond max_keys per object and max_fields per
//     body (counted as other keys), nesting beyond max_depth, keys named
//     like ids or secrets (merged into "{key}"), types that are not JSON
//     types;
//   - kept code values: beyond max_values, or not code-like, a field keeps
//     none; with enum_values off, none at all; only code-named fields of
//     answers keep any;
//   - strings longer than the learner writes them (signatures, media
//     types, upstream names and URLs) are not kept.

// Bounds of strings a summary keeps, beyond what the settings bound.
const (
	maxSignatureBytes = 1024
	maxMediaTypeBytes = 255
	maxNameBytes      = 2048
)

// summaryReader reads one summary, keeping what its learner's bounds
// allow.
type summaryReader struct {
	dec *json.Decoder
	l   *Learner
	// cut counts the entries the bounds left out; dropped the calls of
	// the routes they left out.
	cut, dropped int64
}

// errFormat marks errors of the file's form, which read as "not a
// learning summary".
var errFormat = errors.New("not a learning summary")

func formatError(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errFormat}, args...)...)
}

// read reads a summary as Save writes it, refusing unknown fields,
// another version and routes a policy could not hold, and keeping what
// l's bounds allow (see the comment above).
func (l *Learner) read(r io.Reader) (*Summary, *summaryReader, error) {
	sr := &summaryReader{dec: json.NewDecoder(r), l: l}
	sr.dec.UseNumber()
	sum, err := sr.summary()
	if err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			err = formatError("%v", err)
		}
		return nil, nil, err
	}
	return sum, sr, nil
}

// token reads the next token; a delimiter other than want (0 for a
// scalar) is an error naming what was wanted.
func (r *summaryReader) token() (json.Token, error) {
	t, err := r.dec.Token()
	if errors.Is(err, io.EOF) {
		return nil, io.ErrUnexpectedEOF
	}
	return t, err
}

// object reads an object, calling field for each key (field reads the
// value). present is false for null.
func (r *summaryReader) object(what string, field func(key string) error) (present bool, err error) {
	t, err := r.token()
	if err != nil || t == nil {
		return false, err
	}
	if d, ok := t.(json.Delim); !ok || d != '{' {
		return false, formatError("%s: want an object", what)
	}
	for r.dec.More() {
		k, err := r.token()
		if err != nil {
			return false, err
		}
		key, _ := k.(string)
		if err := field(key); err != nil {
			return false, err
		}
	}
	_, err = r.token()
	return true, err
}

// array reads an array (null is empty), calling item for each element.
func (r *summaryReader) array(what string, item func() error) error {
	t, err := r.token()
	if err != nil || t == nil {
		return err
	}
	if d, ok := t.(json.Delim); !ok || d != '[' {
		return formatError("%s: want an array", what)
	}
	for r.dec.More() {
		if err := item(); err != nil {
			return err
		}
	}
	_, err = r.token()
	return err
}

// int reads an integer; null is 0.
func (r *summaryReader) int(what string) (int64, error) {
	t, err := r.token()
	if err != nil || t == nil {
		return 0, err
	}
	n, ok := t.(json.Number)
	if !ok {
		return 0, formatError("%s: want an integer", what)
	}
	v, err := strconv.ParseInt(string(n), 10, 64)
	if err != nil {
		return 0, formatError("%s: want an integer", what)
	}
	return v, nil
}

// str reads a string; null is "".
func (r *summaryReader) str(what string) (string, error) {
	t, err := r.token()
	if err != nil || t == nil {
		return "", err
	}
	s, ok := t.(string)
	if !ok {
		return "", formatError("%s: want a string", what)
	}
	return s, nil
}

// boolean reads a boolean; null is false.
func (r *summaryReader) boolean(what string) (bool, error) {
	t, err := r.token()
	if err != nil || t == nil {
		return false, err
	}
	b, ok := t.(bool)
	if !ok {
		return false, formatError("%s: want true or false", what)
	}
	return b, nil
}

// skip reads one value and keeps nothing of it.
func (r *summaryReader) skip() error {
	depth := 0
	for {
		t, err := r.token()
		if err != nil {
			return err
		}
		if d, ok := t.(json.Delim); ok {
			if d == '{' || d == '[' {
				depth++
			} else {
				depth--
			}
		}
		if depth == 0 {
			return nil
		}
	}
}

// counts reads an object of counts, calling add for each.
func (r *summaryReader) counts(what string, add func(key string, n int64)) error {
	_, err := r.object(what, func(key string) error {
		n, err := r.int(what)
		if err == nil {
			add(key, n)
		}
		return err
	})
	return err
}

func unknownField(what, key string) error {
	return formatError("%s: unknown field %q", what, key)
}

func (r *summaryReader) summary() (*Summary, error) {
	sum := &Summary{Upstreams: map[string]string{}}
	kept := &routeHeap{}
	index := 0
	_, err := r.object("summary", func(key string) error {
		var err error
		switch key {
		case "version":
			var v int64
			if v, err = r.int(key); err == nil && v != SummaryVersion {
				return fmt.Errorf("summary version %d, want %d", v, SummaryVersion)
			}
			sum.Version = int(v)
		case "since":
			var s string
			if s, err = r.str(key); err == nil && s != "" {
				if sum.Since, err = time.Parse(time.RFC3339Nano, s); err != nil {
					return formatError("since: %v", err)
				}
			}
		case "enum_values":
			sum.EnumValues, err = r.boolean(key)
		case "exchanges":
			sum.Exchanges, err = r.int(key)
		case "dropped":
			var n int64
			n, err = r.int(key)
			sum.Dropped += n
		case "upstreams":
			_, err = r.object(key, func(name string) error {
				u, err := r.str(key)
				switch {
				case err != nil:
				case len(sum.Upstreams) < maxUpstreams && len(name) <= maxNameBytes && len(u) <= maxNameBytes:
					sum.Upstreams[name] = u
				default:
					r.cut++
				}
				return err
			})
		case "routes":
			sum.Routes = []*Route{} // [] reads back as [], null as null
			err = r.array(key, func() error {
				i := index
				index++
				route, err := r.route(i)
				if err != nil || route == nil {
					return err
				}
				heap.Push(kept, keptRoute{route, i})
				if kept.Len() > r.l.settings.MaxRoutes {
					out := heap.Pop(kept).(keptRoute)
					r.dropped += out.Calls
					r.cut++
				}
				return nil
			})
		default:
			return unknownField("summary", key)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	if sum.Version != SummaryVersion {
		return nil, fmt.Errorf("summary version %d, want %d", sum.Version, SummaryVersion)
	}
	sort.Slice(*kept, func(i, j int) bool { return (*kept)[i].index < (*kept)[j].index })
	for _, k := range *kept {
		sum.Routes = append(sum.Routes, k.Route)
	}
	sum.Dropped += r.dropped
	if !r.l.settings.EnumValues {
		sum.EnumValues = false
	}
	return sum, nil
}

// keptRoute is a route read, with its place in the file.
type keptRoute struct {
	*Route
	index int
}

// routeHeap holds the routes kept so far, the first to leave on top: the
// fewest calls, and of those the latest in the file.
type routeHeap []keptRoute

func (h routeHeap) Len() int { return len(h) }
func (h routeHeap) Less(i, j int) bool {
	if h[i].Calls != h[j].Calls {
		return h[i].Calls < h[j].Calls
	}
	return h[i].index > h[j].index
}
func (h routeHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *routeHeap) Push(x any)   { *h = append(*h, x.(keptRoute)) }
func (h *routeHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// route reads routes[i]; nil for null.
func (r *summaryReader) route(i int) (*Route, error) {
	rt := &Route{}
	what := fmt.Sprintf("routes[%d]", i)
	s := &r.l.settings
	present, err := r.object(what, func(key string) error {
		var err error
		at := what + "." + key
		switch key {
		case "upstream":
			rt.Upstream, err = r.str(at)
		case "method":
			rt.Method, err = r.str(at)
		case "path":
			rt.Path, err = r.str(at)
		case "tool":
			rt.Tool, err = r.str(at)
		case "calls":
			rt.Calls, err = r.int(at)
		case "statuses":
			err = r.statuses(at, &rt.Statuses)
		case "failures":
			err = r.counts(at, func(reason string, n int64) {
				if !failures[reason] {
					reason = "other"
				}
				add(&rt.Failures, reason, n)
			})
		case "content_types":
			err = r.mediaTypes(at, &rt.ContentTypes)
		case "latency":
			err = r.latency(at, &rt.Latency)
		case "accepted":
			err = r.request(at, &rt.Accepted)
		case "rejected":
			err = r.request(at, &rt.Rejected)
		case "answer":
			rt.Answer, err = r.body(at, &r.l.answers, rt.Answer)
		case "errors":
			rt.Errors, err = r.body(at, &r.l.answers, rt.Errors)
		case "error_codes":
			_, err = r.object(at, func(field string) error {
				if errorFields[normalizeField(field)] && !idLike(field) {
					if cs := entry(&rt.ErrorCodes, field, maxErrorFields); cs != nil {
						return r.codeStat(at, cs)
					}
				}
				r.cut++
				return r.skip()
			})
		case "coded":
			rt.Coded, err = r.int(at)
		case "shapes":
			err = r.counts(at, func(sig string, n int64) {
				if _, ok := rt.Shapes[sig]; ok || len(rt.Shapes) < s.MaxShapes && len(sig) <= maxSignatureBytes {
					add(&rt.Shapes, sig, n)
					return
				}
				rt.OtherShapes += n
				r.cut++
			})
		case "other_shapes":
			var n int64
			n, err = r.int(at)
			rt.OtherShapes += n
		case "auth":
			err = r.authStat(at, &rt.Auth)
		case "headers":
			_, err = r.object(at, func(name string) error {
				name = http.CanonicalHeaderKey(name)
				if !slices.Contains(answerHeaders, name) {
					r.cut++
					return r.skip()
				}
				return r.headerStat(at, entry(&rt.Headers, name, len(answerHeaders)))
			})
		default:
			return unknownField(what, key)
		}
		return err
	})
	if err != nil || !present {
		return nil, err
	}
	if !methods[rt.Method] || rt.Upstream == "" || len(rt.Upstream) > maxNameBytes || len(rt.Path) > maxPathBytes || !validTemplate(rt.Path) {
		return nil, fmt.Errorf("%s: not a route a policy can bind", what)
	}
	// Path parameters are the template's placeholders.
	placeholders := map[string]bool{}
	for _, seg := range parseTemplate(rt.Path) {
		if seg.wild && seg.raw == "" {
			placeholders[seg.name] = true
		}
	}
	for _, req := range []*Request{&rt.Accepted, &rt.Rejected} {
		for name := range req.Path {
			if !placeholders[name] {
				delete(req.Path, name)
				r.cut++
			}
		}
	}
	return rt, nil
}

// statuses reads counts by HTTP status, keeping 100-599.
func (r *summaryReader) statuses(what string, m *map[int]int64) error {
	return r.counts(what, func(key string, n int64) {
		if code, err := strconv.Atoi(key); err == nil && code >= 100 && code <= 599 {
			add(m, code, n)
			return
		}
		r.cut++
	})
}

// mediaTypes reads counts by media type, as addBounded keeps them.
func (r *summaryReader) mediaTypes(what string, m *map[string]int64) error {
	return r.counts(what, func(mt string, n int64) {
		if len(mt) > maxMediaTypeBytes {
			mt = "other"
		}
		addBounded(m, mt, n)
	})
}

func (r *summaryReader) latency(what string, l *Latency) error {
	_, err := r.object(what, func(key string) error {
		if key != "buckets" {
			return unknownField(what, key)
		}
		var buckets []int64
		err := r.array(what+".buckets", func() error {
			if len(buckets) == latencyBuckets {
				return fmt.Errorf("%s: latency has more than %d buckets", what[:len(what)-len(".latency")], latencyBuckets)
			}
			n, err := r.int(what + ".buckets")
			buckets = append(buckets, n)
			return err
		})
		if err == nil && len(buckets) != 0 && len(buckets) != latencyBuckets {
			return fmt.Errorf("%s: latency has %d buckets, want %d", what[:len(what)-len(".latency")], len(buckets), latencyBuckets)
		}
		if len(buckets) != 0 {
			l.Buckets = buckets
		}
		return err
	})
	return err
}

func (r *summaryReader) request(what string, req *Request) error {
	s := &r.l.settings
	_, err := r.object(what, func(key string) error {
		var err error
		at := what + "." + key
		switch key {
		case "count":
			var n int64
			n, err = r.int(at)
			req.Count += n
		case "path":
			_, err = r.object(at, func(name string) error {
				var p Param
				if err := r.param(at, &p); err != nil {
					return err
				}
				if dst := entry(&req.Path, name, maxSegments); dst != nil {
					mergeCounted(dst, &p)
				} else {
					r.cut++
				}
				return nil
			})
		case "query":
			_, err = r.object(at, func(name string) error {
				var p Param
				if err := r.param(at, &p); err != nil {
					return err
				}
				if name == "" || idLike(name) || req.Query[name] == nil && len(req.Query) >= s.MaxKeys {
					req.OtherQuery += p.Seen
					r.cut++
					return nil
				}
				mergeCounted(entry(&req.Query, name, s.MaxKeys), &p)
				return nil
			})
		case "other_query":
			var n int64
			n, err = r.int(at)
			req.OtherQuery += n
		case "content_types":
			err = r.mediaTypes(at, &req.ContentTypes)
		case "body":
			req.Body, err = r.body(at, &r.l.requests, req.Body)
		case "idempotency_key":
			var n int64
			n, err = r.int(at)
			req.IdempotencyKey += n
		default:
			return unknownField(what, key)
		}
		return err
	})
	return err
}

// paramTypes are the types valueType names, and array.
var paramTypes = map[string]bool{"boolean": true, "integer": true, "number": true, "string": true, "array": true}

// jsonTypes are the types jsonType names.
var jsonTypes = map[string]bool{"object": true, "array": true, "string": true, "boolean": true, "null": true, "number": true, "integer": true}

func (r *summaryReader) param(what string, p *Param) error {
	_, err := r.object(what, func(key string) error {
		var err error
		switch key {
		case "seen":
			p.Seen, err = r.int(what)
		case "types":
			err = r.counts(what, func(t string, n int64) {
				if paramTypes[t] {
					add(&p.Types, t, n)
				}
			})
		default:
			return unknownField(what, key)
		}
		return err
	})
	return err
}

func mergeCounted(dst, src *Param) {
	dst.Seen += src.Seen
	for t, n := range src.Types {
		add(&dst.Types, t, n)
	}
}

// body reads a body shape into dst (a new one when nil); nil for null.
func (r *summaryReader) body(what string, sh *shaper, dst *Shape) (*Shape, error) {
	s := dst
	if s == nil {
		s = &Shape{}
	}
	present, _, err := r.shape(what, sh, s, s, 0, false)
	if err != nil || !present && dst == nil {
		return dst, err
	}
	return s, nil
}

// shape reads a shape at depth under root and adds it into dst, within
// sh's bounds, as shaper.add adds a value; codeName says dst is the place
// of a code-named field. With dst nil, the shape is only read for its
// count, seen. present is false for null.
func (r *summaryReader) shape(what string, sh *shaper, root, dst *Shape, depth int, codeName bool) (present bool, seen int64, err error) {
	present, err = r.object(what, func(key string) error {
		var err error
		at := what + "." + key
		if dst == nil {
			switch key {
			case "seen":
				seen, err = r.int(at)
			case "types", "fields", "other_keys", "items", "empty_arrays", "values", "values_dropped":
				err = r.skip()
			default:
				return unknownField(what, key)
			}
			return err
		}
		switch key {
		case "seen":
			var n int64
			n, err = r.int(at)
			dst.Seen += n
			seen += n
		case "types":
			err = r.counts(at, func(t string, n int64) {
				if jsonTypes[t] {
					add(&dst.Types, t, n)
				}
			})
		case "fields":
			if depth >= sh.maxDepth {
				r.cut++
				return r.skip()
			}
			_, err = r.object(at, func(k string) error {
				name := k
				if k != "" && idLike(k) {
					name = "{key}"
				}
				var child *Shape
				if k != "" {
					child = sh.field(root, dst, name)
				}
				_, n, err := r.shape(at, sh, root, child, depth+1, name != "{key}" && codeFields[normalizeField(k)])
				if child == nil {
					dst.OtherKeys += n
					r.cut++
				}
				return err
			})
		case "other_keys":
			var n int64
			n, err = r.int(at)
			dst.OtherKeys += n
		case "items":
			if depth >= sh.maxDepth {
				r.cut++
				return r.skip()
			}
			child := sh.items(root, dst)
			_, _, err = r.shape(at, sh, root, child, depth+1, false)
			if child == nil {
				r.cut++
			}
		case "empty_arrays":
			var n int64
			n, err = r.int(at)
			dst.EmptyArrays += n
		case "values":
			if !sh.values || !codeName {
				return r.skip()
			}
			err = r.values(at, &dst.Values, &dst.ValuesDropped, sh.maxValues)
		case "values_dropped":
			var dropped bool
			if dropped, err = r.boolean(at); dropped {
				dst.Values, dst.ValuesDropped = nil, true
			}
		default:
			return unknownField(what, key)
		}
		return err
	})
	return present, seen, err
}

// values reads kept code values as keepValue keeps them: a value that is
// not code-like, or one too many, drops them all.
func (r *summaryReader) values(what string, values *map[string]int64, dropped *bool, limit int) error {
	return r.counts(what, func(v string, n int64) {
		if *dropped {
			return
		}
		if _, ok := (*values)[v]; !ok && (!codeLike(v) || len(*values) >= limit) {
			*values, *dropped = nil, true
			r.cut++
			return
		}
		add(values, v, n)
	})
}

func (r *summaryReader) codeStat(what string, cs *CodeStat) error {
	s := &r.l.settings
	_, err := r.object(what, func(key string) error {
		var err error
		at := what + "." + key
		switch key {
		case "answers":
			var n int64
			n, err = r.int(at)
			cs.Answers += n
		case "statuses":
			err = r.statuses(at, &cs.Statuses)
		case "types":
			err = r.counts(at, func(t string, n int64) {
				if jsonTypes[t] {
					add(&cs.Types, t, n)
				}
			})
		case "values":
			if !s.EnumValues {
				return r.skip()
			}
			err = r.values(at, &cs.Values, &cs.ValuesDropped, s.MaxValues)
		case "values_dropped":
			var dropped bool
			if dropped, err = r.boolean(at); dropped {
				cs.Values, cs.ValuesDropped = nil, true
			}
		default:
			return unknownField(what, key)
		}
		return err
	})
	return err
}

func (r *summaryReader) headerStat(what string, hs *HeaderStat) error {
	_, err := r.object(what, func(key string) error {
		var err error
		at := what + "." + key
		switch key {
		case "seen":
			var n int64
			n, err = r.int(at)
			hs.Seen += n
		case "statuses":
			err = r.statuses(at, &hs.Statuses)
		case "max_seconds":
			var n int64
			n, err = r.int(at)
			hs.MaxSeconds = max(hs.MaxSeconds, min(max(n, 0), 86400))
		default:
			return unknownField(what, key)
		}
		return err
	})
	return err
}

func (r *summaryReader) authStat(what string, a *AuthStat) error {
	_, err := r.object(what, func(key string) error {
		var err error
		var n int64
		at := what + "." + key
		switch key {
		case "credentials":
			err = r.counts(at, func(name string, n int64) {
				if !validCredentialName(name) {
					r.cut++
					return
				}
				a.count(name, n)
			})
		case "without":
			n, err = r.int(at)
			a.Without += n
		case "denied_without":
			n, err = r.int(at)
			a.DeniedWithout += n
		case "denied_with":
			n, err = r.int(at)
			a.DeniedWith += n
		default:
			return unknownField(what, key)
		}
		return err
	})
	return err
}
