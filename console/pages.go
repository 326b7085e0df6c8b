package console

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/learn/draft"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/proxy"
)

// overviewPage is GET /ui/: the policy in force, the live state and the
// tools.
type overviewPage struct {
	Title     string
	Policy    policyInfo
	Upstreams []proxy.UpstreamState
	Callers   []proxy.CallerState
	Tools     []toolRow
	Learning  bool
	LiveCalls bool
}

// policyInfo is what is loaded and how the last reload went.
type policyInfo struct {
	Checksum   string
	Sources    []string
	Generation int64 // 0: unknown
	// Reloads says a reload ran since the start: Reloaded is when it
	// ended, ReloadErr why it failed ("" when it succeeded). A field, as
	// the templates call no method (internal/htmltemplate).
	Reloads   bool
	Reloaded  time.Time
	ReloadErr string
	Now       time.Time
}

// toolRow is a tool in the overview's list.
type toolRow struct {
	Name, Description, Upstream string
	SideEffect                  bool
	Cost                        float64
	Timeout                     time.Duration
	KeysInFlight                int
	Last                        *proxy.RecentCall
}

func (h *Handler) policyInfo(v proxy.View, hide func(string) string) policyInfo {
	snap := v.Policy()
	pi := policyInfo{Checksum: snap.Checksum, Sources: snap.Sources, Now: time.Now()}
	if h.reloader != nil {
		cur := h.reloader.Current()
		if cur.Snapshot == snap {
			pi.Generation = cur.Generation
		}
		last := h.reloader.LastReload()
		pi.Reloads, pi.Reloaded, pi.ReloadErr = !last.At.IsZero(), last.At, hide(last.Err)
	}
	return pi
}

func (h *Handler) overview(w http.ResponseWriter, r *http.Request) {
	v := h.core.View()
	snap := v.Policy()
	hide := v.SecretHider()
	p := overviewPage{
		Title:     "Tools and state",
		Policy:    h.policyInfo(v, hide),
		Upstreams: v.Upstreams(),
		Callers:   v.Callers(r.Context()),
		Learning:  h.learner != nil,
		LiveCalls: snap.Server.Console.LiveCalls,
	}
	for _, name := range snap.ToolNames {
		ct := snap.Tools[name]
		ts, _ := v.ToolState(name)
		row := toolRow{Name: name, Description: hide(ct.Description), Upstream: ct.Upstream, SideEffect: ct.SideEffect,
			Cost: ct.Cost, Timeout: ct.Timeout, KeysInFlight: ts.KeysInFlight}
		if len(ts.Recent) > 0 {
			row.Last = &ts.Recent[0]
		}
		p.Tools = append(p.Tools, row)
	}
	h.render(w, http.StatusOK, "overview.html", p)
}

// toolPage is GET /ui/tools/{tool}, and the page a dry run or a live
// call answers with.
type toolPage struct {
	Title       string
	Policy      policyInfo
	Name        string
	Description string
	Upstream    proxy.UpstreamState
	SideEffect  bool
	Cost        float64
	Timeout     time.Duration
	Idempotency contracts.IdempotencySpec
	Origin      policy.Origin
	Schema      string // the published argument schema, indented
	Rules       []ruleRow
	Hint        string
	State       proxy.ToolState
	Callers     []string
	// LiveCalls says the policy allows live calls; CanCall that this tool
	// may be called live (it is read-only).
	LiveCalls, CanCall bool
	Token              string
	Form               form
	Result             *result

	hide func(string) string // the view's SecretHider
}

// ruleRow is one of a tool's errors rules.
type ruleRow struct {
	When, Status, Retryable, SideEffect string
}

// result is what a dry run or a live call produced.
type result struct {
	Live bool
	// Error says why nothing ran (the arguments are not JSON, the answer's
	// headers do not parse, a live call is not allowed).
	Error string
	// Method and URL and Request are the backend request (dry run); empty
	// when the call ended before it.
	Method, URL, Request string
	// NotSent says the call ended before a backend request was built.
	NotSent bool
	// Answered: Envelope holds the answer toolgate gives; a dry run
	// without a pasted answer shows the request only.
	Answered    bool
	HTTPStatus  int
	Status      string
	Message     string
	Observation string
	Envelope    string
	SideEffect  string
	Retryable   bool
	IdemKey     string // a key the console made for a side-effecting dry run
}

func (h *Handler) toolPage(w http.ResponseWriter, r *http.Request) {
	v := h.core.View()
	page, ok := h.newToolPage(v, r.PathValue("tool"))
	if !ok {
		h.notFound(w, v, r.PathValue("tool"))
		return
	}
	page.Form = newForm(v.Policy().Tools[page.Name])
	h.render(w, http.StatusOK, "tool.html", page)
}

func (h *Handler) notFound(w http.ResponseWriter, v proxy.View, tool string) {
	h.render(w, http.StatusNotFound, "notfound.html", struct {
		Title  string
		Policy policyInfo
		Tool   string
	}{"No such tool", h.policyInfo(v, v.SecretHider()), tool})
}

// newToolPage describes the named tool of v's policy.
func (h *Handler) newToolPage(v proxy.View, name string) (*toolPage, bool) {
	snap := v.Policy()
	ct := snap.Tools[name]
	if ct == nil {
		return nil, false
	}
	ts, _ := v.ToolState(name)
	hide := v.SecretHider()
	p := &toolPage{
		Title: name, Policy: h.policyInfo(v, hide), Name: name, Description: hide(ct.Description), SideEffect: ct.SideEffect,
		Cost: ct.Cost, Timeout: ct.Timeout, Idempotency: ct.Idempotency, Origin: snap.ToolOrigins[name],
		Schema: hide(indentJSON(ct.PublishedSchema())), Hint: hide(ct.TruncationHint), State: ts,
		LiveCalls: snap.Server.Console.LiveCalls, CanCall: snap.Server.Console.LiveCalls && !ct.SideEffect,
		Token: h.tokenFor(name), hide: hide,
	}
	for _, up := range v.Upstreams() {
		if up.Name == ct.Upstream {
			p.Upstream = up
		}
	}
	for _, rule := range ct.ErrorRules() {
		row := ruleRow{When: hide(rule.When), Status: string(rule.Status), Retryable: "the status's default", SideEffect: "the table's"}
		if rule.Retryable != nil {
			row.Retryable = fmt.Sprint(*rule.Retryable)
		}
		if rule.SideEffect != nil {
			row.SideEffect = string(*rule.SideEffect)
		}
		p.Rules = append(p.Rules, row)
	}
	p.Callers = slices.Sorted(maps.Keys(snap.Access.Callers))
	return p, true
}

// post reads a playground form for the tool of the path: the page to
// answer with, the arguments and the pasted answer (nil for none), or
// false when it answered already.
func (h *Handler) post(w http.ResponseWriter, r *http.Request, v proxy.View) (*toolPage, []byte, *proxy.Answer, bool) {
	name := r.PathValue("tool")
	page, ok := h.newToolPage(v, name)
	if !ok {
		h.notFound(w, v, name)
		return nil, nil, nil, false
	}
	srv := v.Policy().Server
	r.Body = http.MaxBytesReader(w, r.Body, srv.MaxRequestBytes+srv.MaxResponseBytes+64<<10)
	if err := r.ParseForm(); err != nil {
		http.Error(w, "the form could not be read: "+err.Error(), http.StatusBadRequest)
		return nil, nil, nil, false
	}
	if !h.validToken(name, r.PostForm.Get("token")) {
		http.Error(w, "forbidden: the form's token is not this console's (reload the page)", http.StatusForbidden)
		return nil, nil, nil, false
	}
	page.Form = readForm(v.Policy().Tools[name], r.PostForm)
	args, err := page.Form.args()
	var answer *proxy.Answer
	if err == nil {
		answer, err = page.Form.answer()
	}
	// The form comes back with the result, and what was pasted into it
	// shows no secret toolgate holds either.
	page.Form.hide(page.hide)
	if err != nil {
		page.Result = &result{Error: err.Error()}
		h.render(w, http.StatusBadRequest, "tool.html", page)
		return nil, nil, nil, false
	}
	return page, args, answer, true
}

// try is POST /ui/tools/{tool}/try: the dry run, with the pasted answer
// if any.
func (h *Handler) try(w http.ResponseWriter, r *http.Request) {
	v := h.core.View()
	page, args, answer, ok := h.post(w, r, v)
	if !ok {
		return
	}
	d := proxy.DryRun{Tool: page.Name, Args: args, Caller: page.Form.Caller, CallID: "console", Answer: answer, Logger: h.logger}
	res := &result{}
	if page.SideEffect && !hasKeyArg(args) {
		d.IdempotencyKey = "console-" + randomHex(8)
		res.IdemKey = d.IdempotencyKey
	}
	out, err := v.Try(r.Context(), d)
	if err != nil {
		page.Result = &result{Error: err.Error()}
		h.render(w, http.StatusInternalServerError, "tool.html", page)
		return
	}
	if out.Request == nil {
		res.NotSent = true
	} else {
		res.Method, res.URL, res.Request = out.Method, out.URL, string(out.Request)
	}
	if out.Result != nil {
		res.envelope(out.Result)
	}
	page.Result = res
	h.render(w, http.StatusOK, "tool.html", page)
}

// call is POST /ui/tools/{tool}/call: a live call of a read-only tool,
// when the policy allows them. Everything else is refused here, whatever
// the page showed.
func (h *Handler) call(w http.ResponseWriter, r *http.Request) {
	v := h.core.View()
	page, args, _, ok := h.post(w, r, v)
	if !ok {
		return
	}
	switch {
	case page.SideEffect:
		page.Result = &result{Live: true, Error: "a side-effecting tool is never called from the console: use the dry run"}
	case !page.LiveCalls:
		page.Result = &result{Live: true, Error: "live calls are off: the policy's server.console.live_calls turns them on (read-only tools only)"}
	}
	if page.Result != nil {
		h.render(w, http.StatusForbidden, "tool.html", page)
		return
	}
	res := v.Call(r.Context(), &proxy.Request{Tool: page.Name, Body: v.NullArgs(page.Name, args), Caller: page.Form.Caller, Front: "console"})
	page.Result = &result{Live: true}
	page.Result.envelope(res)
	page.State, _ = v.ToolState(page.Name)
	for _, up := range v.Upstreams() {
		if up.Name == page.Upstream.Name {
			page.Upstream = up
		}
	}
	h.render(w, http.StatusOK, "tool.html", page)
}

// envelope fills the result's answer from a finished call.
func (res *result) envelope(r *proxy.Result) {
	env := &r.Envelope
	res.Answered = true
	res.HTTPStatus = r.Render().Code
	res.Status, res.Message, res.Observation = string(env.Status), env.Message, env.Observation
	res.SideEffect, res.Retryable = string(env.SideEffect), env.Retryable
	res.Envelope = indentJSON(env.AppendJSON(nil))
}

// learnPage is GET /ui/learn: learning mode's summary and its draft.
type learnPage struct {
	Title   string
	Policy  policyInfo
	On      bool
	Summary string // one line
	Routes  []learnRoute
	Draft   string
	Skipped []draft.Skipped
	Error   string
	JSON    string
}

type learnRoute struct {
	Upstream, Method, Path, Tool string
	Calls                        int64
	Statuses                     string
}

func (h *Handler) learnPage(w http.ResponseWriter, _ *http.Request) {
	v := h.core.View()
	hide := v.SecretHider()
	p := learnPage{Title: "Learning mode", Policy: h.policyInfo(v, hide), On: h.learner != nil}
	if h.learner != nil {
		sum := h.learner.Summary()
		p.Summary = sum.String()
		for _, rt := range sum.Routes {
			codes := make([]string, 0, len(rt.Statuses))
			for _, code := range slices.Sorted(maps.Keys(rt.Statuses)) {
				codes = append(codes, fmt.Sprintf("%d×%d", code, rt.Statuses[code]))
			}
			p.Routes = append(p.Routes, learnRoute{Upstream: rt.Upstream, Method: rt.Method, Path: rt.Path, Tool: rt.Tool, Calls: rt.Calls, Statuses: strings.Join(codes, " ")})
		}
		d, err := draft.Write(sum, draft.Options{Source: "the console (GET /ui/learn)"})
		if err != nil {
			p.Error = err.Error()
		} else {
			p.Draft, p.Skipped = hide(string(d.YAML)), d.Skipped
		}
		if b, err := json.MarshalIndent(sum, "", "  "); err == nil {
			p.JSON = hide(string(b))
		}
	}
	h.render(w, http.StatusOK, "learn.html", p)
}

// indentJSON indents a JSON document for reading, keys in their order;
// anything else is returned as it is.
func indentJSON(b []byte) string {
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		return string(b)
	}
	return out.String()
}
