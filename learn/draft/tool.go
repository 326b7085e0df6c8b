package draft

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/toolgate/toolgate/config/policydoc"
	"github.com/toolgate/toolgate/learn"
)

// required is the share of accepted calls (or successful answers) in
// which an argument (or a field) must be present to be required (or
// read without has()).
const required = 0.99

// idempotencyKeyArg is the argument name toolgate reserves on
// side-effecting tools.
const idempotencyKeyArg = "idempotency_key"

// toolDraft is one learned route on its way to a tool.
type toolDraft struct {
	route        *learn.Route
	name         string
	sideEffect   bool
	req          *learn.Request // the requests arguments are learned from
	fromRejected bool

	args     []arg
	path     string
	query    [][2]string // backend name -> argument
	body     [][2]string
	bodyNote string

	timeout       time.Duration
	timeoutNote   string
	data, empty   string
	dataLeft      []string // fields left out of data: their names look like credentials
	detail        string   // response.error_detail
	detailNote    string
	responseNotes []string
	errors        []rule
	errorNotes    []string
}

// arg is one argument of a drafted tool.
type arg struct {
	name     string
	schema   map[string]any
	required bool
	note     string
}

// rule is one drafted errors rule.
type rule struct {
	when      string
	status    string
	retryable *bool
	note      string
}

// skipReason says why a route is not drafted, or "".
func skipReason(r *learn.Route) string {
	answered := int64(0)
	for _, n := range r.Statuses {
		answered += n
	}
	if answered == 0 {
		return "no answer was ever received"
	}
	if sideEffect(r.Method) {
		return ""
	}
	ok, json := int64(0), int64(0)
	for code, n := range r.Statuses {
		if code >= 200 && code < 300 {
			ok += n
		}
	}
	for _, c := range r.ErrorCodes {
		json += c.Answers
	}
	if r.Answer != nil {
		json += r.Answer.Seen
	}
	if ok > 0 && json == 0 {
		return fmt.Sprintf("its 2xx answers are %s, not JSON: toolgate would hand their text to the agent as data, but a route like this is usually a health check or a page, so it stays on server.passthrough; write its tool by hand if agents need it",
			strings.Join(mediaTypes(r), ", "))
	}
	return ""
}

// mediaTypes lists the media types of a route's answers, most frequent
// first.
func mediaTypes(r *learn.Route) []string {
	var out []string
	for _, mt := range byCount(r.ContentTypes) {
		if mt == "" {
			mt = "without a type"
		}
		out = append(out, mt)
	}
	return out
}

func sideEffect(method string) bool {
	switch method {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
		return true
	}
	return false
}

func newTool(r *learn.Route, names *policydoc.Namer) *toolDraft {
	t := &toolDraft{route: r, sideEffect: sideEffect(r.Method), req: &r.Accepted}
	if r.Accepted.Count == 0 {
		t.req, t.fromRejected = &r.Rejected, true
	}
	if r.Tool != "" {
		t.name = names.Take(r.Tool)
	} else {
		t.name = names.Take(policydoc.DerivedName(r.Method, r.Path))
	}
	t.arguments()
	t.timing()
	t.response()
	t.errorRules()
	t.errorDetail()
	return t
}

// detailFields are where error answers commonly put their words, in the
// order a draft prefers them: a path of object members.
var detailFields = [][]string{
	{"message"}, {"error", "message"}, {"errorDescription"}, {"error_description"}, {"detail"},
	{"error"}, {"msg"}, {"errmsg"}, {"description"}, {"title"},
}

// errorDetail drafts response.error_detail when the route's error answers
// (non-2xx, and 2xx with an error code) share a shape: every JSON one is a
// string, or has the same string member (message, error.message, …).
func (t *toolDraft) errorDetail() {
	e := t.route.Errors
	if e == nil || e.Seen == 0 {
		return
	}
	if e.Types["string"] == e.Seen {
		t.detail = `type(body) == string ? body : ""`
		t.detailNote = fmt.Sprintf("Every JSON error answer (%s) was a string: the message quotes it.", countWord(e.Seen, "answer"))
		return
	}
	if e.Types["object"] != e.Seen {
		return
	}
	for _, path := range detailFields {
		s, parent, ok := e, e, true
		for _, name := range path {
			if s.Types["object"] != s.Seen || s.Fields[name] == nil {
				ok = false
				break
			}
			parent, s = s, s.Fields[name]
		}
		if !ok || s.Types["string"] != s.Seen || s.Seen == 0 || ratio(s.Seen, e.Seen) < required || s.Presence(parent) < required {
			continue
		}
		get, cond := "body", `type(body) == map`
		for i, name := range path {
			if i > 0 {
				cond += " && type(" + get + ") == map"
			}
			cond += " && " + policydoc.CELHas(get, name)
			get = policydoc.CELGet(get, name)
		}
		t.detail = cond + " ? " + get + ` : ""`
		t.detailNote = fmt.Sprintf("Every JSON error answer (%s) had %s as a string: the message quotes it.", countWord(e.Seen, "answer"), strings.Join(path, "."))
		return
	}
}

// arguments makes the arguments and the binding: path placeholders, then
// query parameters, then the fields of JSON object bodies.
func (t *toolDraft) arguments() {
	var reserved []string
	if t.sideEffect {
		reserved = append(reserved, idempotencyKeyArg)
	}
	argNames := policydoc.NewNamer(reserved...)
	var segs []string
	for _, seg := range strings.Split(strings.TrimPrefix(t.route.Path, "/"), "/") {
		if !strings.Contains(seg, "{") {
			segs = append(segs, seg)
			continue
		}
		// Each {name} in the segment becomes a required argument.
		var out strings.Builder
		for seg != "" {
			open := strings.IndexByte(seg, '{')
			end := strings.IndexByte(seg, '}')
			if open < 0 || end < open {
				out.WriteString(seg)
				break
			}
			out.WriteString(seg[:open])
			name := seg[open+1 : end]
			a := arg{name: argNames.Take(name), required: true, schema: map[string]any{"type": paramType(t.req.Path[name])}}
			a.note = "path segment"
			t.args = append(t.args, a)
			out.WriteString("{" + a.name + "}")
			seg = seg[end+1:]
		}
		segs = append(segs, out.String())
	}
	t.path = "/" + strings.Join(segs, "/")
	for _, name := range slices.Sorted(maps.Keys(t.req.Query)) {
		p := t.req.Query[name]
		a := arg{name: argNames.Take(name, "query_"+name), schema: map[string]any{"type": paramType(p)}}
		if p.Types["array"] > 0 {
			a.schema = map[string]any{"type": "array", "items": map[string]any{"type": "string"}}
		}
		share := ratio(p.Seen, t.req.Count)
		a.required = share >= required && t.refusedWithout(func(r *learn.Request) int64 {
			if q := r.Query[name]; q != nil {
				return q.Seen
			}
			return 0
		})
		a.note = "query; " + percent(share) + " of " + t.callsWord() + t.requiredNote(share, a.required)
		t.args = append(t.args, a)
		t.query = append(t.query, [2]string{name, a.name})
	}
	t.bodyArguments(argNames)
}

// refusedWithout is the evidence that the backend requires a parameter
// or body field, not only that callers always sent it: the route refused
// some calls as invalid (400 or 422), and some of its refused calls lacked
// it (seen counts the refused calls that carried it). Learning keeps the
// refused calls apart from the accepted ones, but not by status, so a
// refused call without the field is taken as refused for its lack when
// the route refuses invalid calls at all.
func (t *toolDraft) refusedWithout(seen func(*learn.Request) int64) bool {
	r := t.route
	if t.fromRejected || r.Statuses[400]+r.Statuses[422] == 0 || r.Rejected.Count == 0 {
		return false
	}
	return seen(&r.Rejected) < r.Rejected.Count
}

// requiredNote says why an argument always sent is required or not.
func (t *toolDraft) requiredNote(share float64, req bool) string {
	switch {
	case req:
		return "; required: a call without it was refused (400/422)"
	case share >= required:
		return "; optional: no call without it was refused"
	}
	return ""
}

func (t *toolDraft) callsWord() string {
	if t.fromRejected {
		return "the calls"
	}
	return "accepted calls"
}

// bodyArguments binds the top-level fields of JSON object bodies.
func (t *toolDraft) bodyArguments(argNames *policydoc.Namer) {
	b := t.req.Body
	bodies := int64(0)
	for _, n := range t.req.ContentTypes {
		bodies += n
	}
	if bodies == 0 {
		return
	}
	if b == nil || b.Types["object"] == 0 {
		t.bodyNote = fmt.Sprintf("TODO: the request bodies were %s, not JSON objects: toolgate sends a JSON object of arguments, so this route needs a hand-written binding or an adapter.",
			strings.Join(byCount(t.req.ContentTypes), ", "))
		return
	}
	if b.Types["object"] < b.Seen {
		t.bodyNote = fmt.Sprintf("TODO: %d of %d JSON request bodies were not objects; only object fields are bound.", b.Seen-b.Types["object"], b.Seen)
	}
	for _, field := range slices.Sorted(maps.Keys(b.Fields)) {
		f := b.Fields[field]
		if field == "{key}" {
			t.bodyNote = "TODO: request bodies carried keys that look like ids or secrets; they are not bound."
			continue
		}
		a := arg{name: argNames.Take(field, "body_"+field), schema: schemaOf(f, 0)}
		share := f.Presence(b)
		a.required = share >= required && t.refusedWithout(func(r *learn.Request) int64 {
			if r.Body == nil || r.Body.Fields[field] == nil {
				return 0
			}
			return r.Body.Fields[field].Seen
		})
		a.note = "body; " + percent(share) + " of " + t.callsWord() + t.requiredNote(share, a.required)
		t.args = append(t.args, a)
		t.body = append(t.body, [2]string{field, a.name})
	}
}

// paramType is the schema type of a path or query parameter: integer or
// number only when every value sent was one, boolean likewise, string
// otherwise.
func paramType(p *learn.Param) string {
	if p == nil || len(p.Types) == 0 {
		return "string"
	}
	only := func(types ...string) bool {
		for t, n := range p.Types {
			if n > 0 && !slices.Contains(types, t) {
				return false
			}
		}
		return true
	}
	switch {
	case only("integer"):
		return "integer"
	case only("integer", "number"):
		return "number"
	case only("boolean"):
		return "boolean"
	}
	return "string"
}

// schemaDepth bounds the nesting of drafted argument schemas.
const schemaDepth = 3

// schemaOf is the JSON Schema of a body position: its types ("integer"
// and "number" make "number"; null makes a type list), and for objects
// and arrays what they hold, to schemaDepth.
func schemaOf(s *learn.Shape, depth int) map[string]any {
	var types []string
	nullable := false
	for _, t := range slices.Sorted(maps.Keys(s.Types)) {
		switch {
		case t == "null":
			nullable = true
		case t == "integer" && s.Types["number"] > 0:
		default:
			types = append(types, t)
		}
	}
	out := map[string]any{}
	switch {
	case len(types) == 1 && !nullable:
		out["type"] = types[0]
	case len(types) > 0:
		list := make([]any, 0, len(types)+1)
		for _, t := range types {
			list = append(list, t)
		}
		if nullable {
			list = append(list, "null")
		}
		out["type"] = list
	}
	if depth >= schemaDepth {
		return out
	}
	if s.Types["object"] > 0 && len(s.Fields) > 0 {
		props := map[string]any{}
		var req []any
		for _, name := range slices.Sorted(maps.Keys(s.Fields)) {
			if name == "{key}" {
				continue
			}
			f := s.Fields[name]
			props[name] = schemaOf(f, depth+1)
			if f.Presence(s) >= required {
				req = append(req, name)
			}
		}
		if len(props) > 0 {
			out["properties"] = props
		}
		if len(req) > 0 {
			out["required"] = req
		}
	}
	if s.Types["array"] > 0 && s.Items != nil {
		out["items"] = schemaOf(s.Items, depth+1)
	}
	return out
}

// niceTimeouts are the timeouts a draft proposes.
var niceTimeouts = []time.Duration{time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 20 * time.Second, 30 * time.Second, 60 * time.Second}

// timing proposes a timeout from the p99 latency.
func (t *toolDraft) timing() {
	l := t.route.Latency
	if l.Count() == 0 {
		return
	}
	p99 := l.Quantile(0.99)
	want := 4 * p99
	t.timeout = niceTimeouts[len(niceTimeouts)-1]
	for _, d := range niceTimeouts {
		if d >= want {
			t.timeout = d
			break
		}
	}
	t.timeoutNote = fmt.Sprintf("TODO: confirm: 4 × the p99 latency (%s), at least 1s", round(p99))
	if want > t.timeout {
		t.timeoutNote = fmt.Sprintf("TODO: the p99 latency is %s; a minute is the most a draft proposes", round(p99))
	}
}

func round(d time.Duration) string {
	switch {
	case d >= time.Second:
		return d.Round(100 * time.Millisecond).String()
	case d >= time.Millisecond:
		return d.Round(time.Millisecond).String()
	}
	return d.Round(10 * time.Microsecond).String()
}

// listNames are the field names that hold a page's items.
var listNames = []string{"items", "data", "results", "records", "entries", "values", "list"}

// maxDataFields bounds the fields a drafted data expression copies.
const maxDataFields = 16

// response drafts response.data and response.empty from the answers that
// succeeded.
func (t *toolDraft) response() {
	a := t.route.Answer
	if a == nil || a.Seen == 0 {
		if t.sideEffect {
			t.responseNotes = append(t.responseNotes, "The successful answers had no JSON body: a side-effecting call answered so is ok, side_effect done.")
		}
		return
	}
	if a.Types["object"] != a.Seen {
		if a.Types["array"] == a.Seen {
			if t.data, t.dataLeft = policydoc.SecretFreeData(dataNode(a, 0), "body"); t.data != "" {
				t.responseNotes = append(t.responseNotes, "The successful answers are JSON arrays: data is each item without the fields whose names look like credentials, and an empty array is empty.")
				t.noData()
				return
			}
			t.responseNotes = append(t.responseNotes, "The successful answers are JSON arrays: data is the array as it comes, and an empty one is empty.")
		} else {
			t.responseNotes = append(t.responseNotes, "TODO: response: the successful answers are not all JSON objects ("+strings.Join(byCount(a.Types), ", ")+"); data is the body as it comes.")
		}
		return
	}
	var always, mostly, rare []string
	for _, name := range slices.Sorted(maps.Keys(a.Fields)) {
		if name == "{key}" {
			continue
		}
		switch p := a.Fields[name].Presence(a); {
		case p >= 1:
			always = append(always, name)
		case p >= required:
			mostly = append(mostly, name)
		default:
			rare = append(rare, fmt.Sprintf("%s (%s)", name, percent(p)))
		}
	}
	if _, ok := a.Fields["{key}"]; ok || a.OtherKeys > 0 {
		t.responseNotes = append(t.responseNotes, "TODO: response: the answers carry keys that look like ids or more keys than were tracked; data is the body as it comes.")
		return
	}
	if n := len(always) + len(mostly); n == 0 || n > maxDataFields {
		t.responseNotes = append(t.responseNotes, fmt.Sprintf("TODO: response: %d fields are present in at least 99%% of the successful answers; choose the ones the agent needs.", n))
		return
	}
	var parts []string
	kept := &policydoc.DataNode{}
	for _, name := range slices.Sorted(slices.Values(slices.Concat(always, mostly))) {
		get := policydoc.CELGet("body", name)
		if !slices.Contains(always, name) {
			get = policydoc.CELHas("body", name) + " ? " + get + " : null"
		}
		parts = append(parts, strconv.Quote(name)+": "+get)
		kept.Fields = append(kept.Fields, policydoc.DataField{Name: name, Always: slices.Contains(always, name), Node: dataNode(a.Fields[name], 1)})
	}
	t.data = "{" + strings.Join(parts, ", ") + "}"
	if secretFree, left := policydoc.SecretFreeData(kept, "body"); secretFree != "" {
		// Fields whose names look like credentials, at any depth, stay
		// out of data: it goes to the model.
		t.data, t.dataLeft = secretFree, left
	}
	if len(rare) > 0 {
		t.responseNotes = append(t.responseNotes, "Left out of data, present in fewer than 99% of the successful answers: "+strings.Join(rare, ", ")+".")
	}
	if !t.sideEffect {
		t.empty = emptyRule(a, always, mostly)
	}
	ok := int64(0)
	for code, n := range t.route.Statuses {
		if code >= 200 && code < 300 {
			ok += n
		}
	}
	if ok > a.Seen+t.route.Coded {
		// Some successful answers had no JSON body (a 204): the rules
		// read body only when there is one.
		t.data = "body == null ? dyn(null) : " + t.data
		if t.empty != "" {
			t.empty = "body == null || " + t.empty
		}
	}
	t.numericCodes(a)
}

// noData drops the 204 adjustment a written data needs when some
// successful answers had no body (see response).
func (t *toolDraft) noData() {
	ok := int64(0)
	for code, n := range t.route.Statuses {
		if code >= 200 && code < 300 {
			ok += n
		}
	}
	if ok > t.route.Answer.Seen+t.route.Coded {
		t.data = "body == null ? dyn(null) : dyn(" + t.data + ")"
	}
}

// dataNode describes a learned body shape for policydoc.SecretFreeData:
// its fields, its items, whether it was ever null. Keys merged into
// "{key}" (ids or secrets) cannot be named: such an object is opaque.
func dataNode(s *learn.Shape, depth int) *policydoc.DataNode {
	if s == nil || depth > schemaDepth+8 {
		return nil
	}
	n := &policydoc.DataNode{Nullable: s.Types["null"] > 0}
	if s.Types["array"] > 0 && s.Types["object"] == 0 {
		n.Items = dataNode(s.Items, depth+1)
		return n
	}
	if s.Types["object"] == 0 || s.Types["array"] > 0 {
		return n
	}
	for _, name := range slices.Sorted(maps.Keys(s.Fields)) {
		if name == "{key}" {
			n.Fields, n.Opaque = nil, true
			return n
		}
		f := s.Fields[name]
		n.Fields = append(n.Fields, policydoc.DataField{Name: name, Always: f.Presence(s) >= 1, Node: dataNode(f, depth+1)})
	}
	return n
}

// emptyRule makes response.empty from the answer's list field: one of
// listNames, or the only field that is always an array.
func emptyRule(a *learn.Shape, always, mostly []string) string {
	isList := func(name string) bool {
		f := a.Fields[name]
		return f != nil && f.Types["array"] > 0 && f.Types["array"] == f.Seen
	}
	present := append(append([]string(nil), always...), mostly...)
	list := ""
	for _, name := range listNames {
		if slices.Contains(present, name) && isList(name) {
			list = name
			break
		}
	}
	if list == "" {
		var arrays []string
		for _, name := range present {
			if isList(name) {
				arrays = append(arrays, name)
			}
		}
		if len(arrays) == 1 {
			list = arrays[0]
		}
	}
	if list == "" {
		return ""
	}
	rule := "size(" + policydoc.CELGet("body", list) + ") == 0"
	if !slices.Contains(always, list) {
		rule = "!" + policydoc.CELHas("body", list) + " || " + rule
		if strings.Contains(rule, " in ") {
			rule = "!(" + policydoc.CELHas("body", list) + ") || size(" + policydoc.CELGet("body", list) + ") == 0"
		}
	}
	return rule
}

// numericCodes notes code-named fields that are numbers in successful
// answers: learning mode keeps no number, so it cannot tell an error code
// from success, but a person can.
func (t *toolDraft) numericCodes(a *learn.Shape) {
	for _, name := range slices.Sorted(maps.Keys(a.Fields)) {
		f := a.Fields[name]
		switch strings.NewReplacer("_", "", "-", "").Replace(strings.ToLower(name)) {
		case "code", "errcode", "errorcode", "retcode", "resultcode", "errno", "status":
		default:
			continue
		}
		if f.Types["integer"] == 0 {
			continue
		}
		t.errorNotes = append(t.errorNotes,
			fmt.Sprintf("TODO: errors: body.%s is a number in the successful answers; if some values mean an error (a legacy API's 200 {\"%s\": 40001}), add a rule, e.g.:", name, name),
			policydoc.Code("  - when: "+okStatus(nil)+" && "+policydoc.CELHas("body", name)+" && "+policydoc.CELGet("body", name)+" != 0"),
			policydoc.Code("    status: upstream"))
	}
}

// errorRules drafts a rule per error code seen on successful answers.
func (t *toolDraft) errorRules() {
	for _, field := range slices.Sorted(maps.Keys(t.route.ErrorCodes)) {
		c := t.route.ErrorCodes[field]
		cond := okStatus(c.Statuses) + " && " + policydoc.CELHas("body", field)
		if c.Types["string"] < c.Answers {
			// An error object or flag: its presence is the error.
			t.errorNotes = append(t.errorNotes,
				fmt.Sprintf("TODO: errors: %s carried an error in body.%s (%s); if its presence always means an error, add a rule, e.g.:", countWord(c.Answers, "successful answer"), field, strings.Join(byCount(c.Types), ", ")),
				policydoc.Code("  - when: "+cond),
				policydoc.Code("    status: upstream"))
			continue
		}
		if c.ValuesDropped || len(c.Values) == 0 {
			t.errorNotes = append(t.errorNotes,
				fmt.Sprintf("TODO: errors: %s carried an error code in body.%s, whose values were not kept (not all code-like, too many, or enum_values off); add a rule per code, e.g.:", countWord(c.Answers, "successful answer"), field),
				policydoc.Code("  - when: "+cond+" && "+policydoc.CELGet("body", field)+" == \"E_...\""),
				policydoc.Code("    status: upstream"))
			continue
		}
		for _, v := range byCount(c.Values) {
			status, retryable, why := guessStatus(v)
			r := rule{when: cond + " && " + policydoc.CELGet("body", field) + " == " + strconv.Quote(v), status: status}
			if retryable != (status == "upstream" || status == "timeout") {
				r.retryable = &retryable
			}
			r.note = fmt.Sprintf("TODO: confirm the status (%s): %s = %s was seen on %s.", why, field, v, countWord(c.Values[v], "successful answer"))
			t.errors = append(t.errors, r)
		}
	}
	// The answers the default table classifies, for the record.
	var lines []string
	for _, code := range slices.Sorted(maps.Keys(t.route.Statuses)) {
		if code >= 200 && code < 300 {
			continue
		}
		lines = append(lines, policydoc.Code(fmt.Sprintf("  %d ×%d -> %s", code, t.route.Statuses[code], policydoc.DefaultStatus(strconv.Itoa(code), t.sideEffect))))
	}
	if len(lines) > 0 {
		t.errorNotes = append([]string{"Error answers seen, and the status toolgate's default table gives them (add rules only where it is wrong):"}, append(lines, t.errorNotes...)...)
	}
}

// okStatus is the CEL condition on the status of the successful answers
// that carried a code: the one status seen, or any 2xx.
func okStatus(statuses map[int]int64) string {
	if len(statuses) == 1 {
		for code := range statuses {
			return "status == " + strconv.Itoa(code)
		}
	}
	if statuses == nil {
		return "status == 200"
	}
	return "status >= 200 && status < 300"
}

// guesses map words in an error code to the status a person would most
// likely choose; the first match wins.
var guesses = []struct {
	words     []string
	status    string
	retryable bool
}{
	{[]string{"PERM", "DENIED", "FORBID", "AUTH", "ACCESS", "PRIVILEGE"}, "forbidden", false},
	{[]string{"NOTFOUND", "NOT_FOUND", "NOSUCH", "NO_SUCH", "UNKNOWN"}, "not_found", false},
	{[]string{"TIMEOUT", "TIMED_OUT", "TIMEDOUT"}, "timeout", true},
	{[]string{"RATE", "LIMIT", "THROTTL", "BUSY", "UNAVAILABLE", "OVERLOAD", "TRY_AGAIN", "RETRY", "MAINTENANCE"}, "upstream", true},
	{[]string{"INVALID", "BAD", "PARAM", "MISSING", "REQUIRED", "FORMAT", "ILLEGAL", "MALFORMED", "TOO_LONG", "EXISTS", "DUPLICATE", "CONFLICT"}, "bad_args", false},
}

// guessStatus guesses the status of an error code from its name; an
// unrecognised code is upstream, not retryable.
func guessStatus(code string) (status string, retryable bool, why string) {
	up := strings.ToUpper(code)
	for _, g := range guesses {
		for _, w := range g.words {
			if strings.Contains(up, w) {
				return g.status, g.retryable, "guessed from " + strings.ToLower(w)
			}
		}
	}
	return "upstream", false, "the code's name says nothing toolgate knows"
}

// node writes the tool.
func (t *toolDraft) node() (*yaml.Node, *yaml.Node) {
	key := policydoc.String(t.name)
	key.HeadComment = policydoc.Comment(t.observed(), 2)

	m := &yaml.Node{Kind: yaml.MappingNode}
	add := func(k, v *yaml.Node) { m.Content = append(m.Content, k, v) }
	desc := fmt.Sprintf("TODO: say what %s %s does and when to use it.", t.route.Method, t.route.Path)
	if t.route.Tool != "" {
		desc = fmt.Sprintf("TODO: the description of tool %s, learned anew from its backend calls.", t.route.Tool)
	}
	add(policydoc.String("description"), policydoc.String(policydoc.EscapeEnv(desc)))
	add(policydoc.String("upstream"), policydoc.String(t.route.Upstream))
	if t.sideEffect {
		k := policydoc.String("side_effect")
		v := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: "true"}
		v.LineComment = t.route.Method + ": not safe to repeat, so toolgate requires an idempotency key"
		if t.req.IdempotencyKey > 0 {
			k.HeadComment = policydoc.Comment([]string{
				fmt.Sprintf("TODO: %s of the calls carried an Idempotency-Key. If the backend dedupes on it, say so, and toolgate forwards its own key (and may then resend a call whose outcome was lost):", percent(ratio(t.req.IdempotencyKey, t.req.Count))),
				policydoc.Code("idempotency: {forward_header: Idempotency-Key}"),
			}, 4)
		}
		add(k, v)
	}
	if t.timeout > 0 {
		v := policydoc.String(t.timeout.String())
		v.LineComment = t.timeoutNote
		add(policydoc.String("timeout"), v)
	}
	argsKey := policydoc.String("args")
	if t.fromRejected {
		argsKey.HeadComment = policydoc.Comment([]string{"TODO: the backend accepted no call (2xx); these arguments are learned from the calls it refused."}, 4)
	}
	add(argsKey, t.schemaNode())

	req := &yaml.Node{Kind: yaml.MappingNode}
	req.Content = append(req.Content, policydoc.String("method"), policydoc.String(t.route.Method), policydoc.String("path"), policydoc.String(policydoc.EscapeEnv(t.path)))
	if len(t.query) > 0 {
		req.Content = append(req.Content, policydoc.String("query"), pairsNode(t.query))
	}
	if len(t.body) > 0 {
		req.Content = append(req.Content, policydoc.String("body"), pairsNode(t.body))
	}
	reqKey := policydoc.String("request")
	if t.bodyNote != "" {
		reqKey.HeadComment = policydoc.Comment([]string{t.bodyNote}, 4)
	}
	add(reqKey, req)

	if t.data != "" || t.empty != "" || t.detail != "" {
		resp := &yaml.Node{Kind: yaml.MappingNode}
		if t.data != "" {
			resp.Content = append(resp.Content, policydoc.String("data"), policydoc.String(t.data))
		}
		if t.empty != "" {
			resp.Content = append(resp.Content, policydoc.String("empty"), policydoc.String(t.empty))
		}
		if t.detail != "" {
			k := policydoc.String("error_detail")
			k.HeadComment = policydoc.Comment([]string{t.detailNote}, 6)
			resp.Content = append(resp.Content, k, policydoc.String(t.detail))
		}
		k := policydoc.String("response")
		head := []string{"TODO: response: keep what the agent needs; these fields were present in at least 99% of the successful answers."}
		if len(t.dataLeft) > 0 {
			head = append(head, "Left out of data, as their names look like credentials (data goes to the model): "+strings.Join(t.dataLeft, ", ")+".")
		}
		k.HeadComment = policydoc.Comment(head, 4)
		add(k, resp)
	}
	notes := append(append([]string(nil), t.responseNotes...), t.errorNotes...)
	if len(t.errors) > 0 {
		list := &yaml.Node{Kind: yaml.SequenceNode}
		for _, r := range t.errors {
			item := &yaml.Node{Kind: yaml.MappingNode}
			item.HeadComment = policydoc.Comment([]string{r.note}, 6)
			item.Content = append(item.Content, policydoc.String("when"), policydoc.String(r.when), policydoc.String("status"), policydoc.String(r.status))
			if r.retryable != nil {
				item.Content = append(item.Content, policydoc.String("retryable"), &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(*r.retryable)})
			}
			list.Content = append(list.Content, item)
		}
		k := policydoc.String("errors")
		k.FootComment = policydoc.Comment(notes, 4)
		add(k, list)
	} else if len(notes) > 0 {
		key := m.Content[len(m.Content)-2]
		key.FootComment = policydoc.Comment(notes, 4)
	}
	return key, m
}

// schemaNode writes the argument schema in the order a person would.
func (t *toolDraft) schemaNode() *yaml.Node {
	n := &yaml.Node{Kind: yaml.MappingNode}
	n.Content = append(n.Content, policydoc.String("type"), policydoc.String("object"))
	var req []any
	for _, a := range t.args {
		if a.required {
			req = append(req, a.name)
		}
	}
	if len(req) > 0 {
		n.Content = append(n.Content, policydoc.String("required"), policydoc.Value(req, true))
	}
	n.Content = append(n.Content, policydoc.String("additionalProperties"), &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: "false"})
	props := &yaml.Node{Kind: yaml.MappingNode}
	for _, a := range t.args {
		v := policydoc.Value(a.schema, true)
		v.LineComment = a.note
		props.Content = append(props.Content, policydoc.String(a.name), v)
	}
	if len(t.args) == 0 {
		props.Style = yaml.FlowStyle
	}
	n.Content = append(n.Content, policydoc.String("properties"), props)
	return n
}

// pairsNode writes a query or body binding (backend name: argument).
func pairsNode(pairs [][2]string) *yaml.Node {
	n := &yaml.Node{Kind: yaml.MappingNode}
	width := 0
	for _, p := range pairs {
		n.Content = append(n.Content, policydoc.String(p[0]), policydoc.String(p[1]))
		width += len(p[0]) + len(p[1]) + 4
	}
	if width <= 80 {
		n.Style = yaml.FlowStyle
	}
	return n
}

func ratio(n, of int64) float64 {
	if of == 0 {
		return 0
	}
	return min(1, float64(n)/float64(of))
}

func percent(r float64) string {
	p := r * 100
	switch {
	case p >= 99.5 && p < 100:
		return strconv.FormatFloat(p, 'f', 1, 64) + "%"
	case p > 0 && p < 1:
		return "<1%"
	}
	return strconv.FormatFloat(p, 'f', 0, 64) + "%"
}

func countWord(n int64, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return strconv.FormatInt(n, 10) + " " + word + "s"
}

// byCount lists a count map's keys, most frequent first, then by name.
func byCount[K interface{ ~string }](m map[K]int64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, string(k))
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := m[K(keys[i])], m[K(keys[j])]
		if a != b {
			return a > b
		}
		return keys[i] < keys[j]
	})
	return keys
}
