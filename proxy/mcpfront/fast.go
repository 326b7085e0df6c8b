package mcpfront

// The fast path of the MCP front: a tools/call of a registered tool, in
// the plainest form a client sends it, is answered here instead of by the
// SDK, which would decode the message nine times (each decode allocating
// a 32 KiB buffer), build a session and a JSON-RPC connection for it, and
// run the same handler (server.callTool) in the end.
//
// The answer is the SDK's, byte for byte: the JSON the SDK writes for the
// same result, written directly (fast_encode.go), with the SDK's
// headers. Anything the fast path does not recognise exactly (another
// method, a batch, a key it does not know, a repeated key, an escaped
// key, an id that is not a small integer or a plain string, _meta beyond
// the trace context) goes to the SDK.
//
// Revision 2026-07-28 asks more of a call, and the fast path takes it
// only when all of it is there in its plainest form, as the TypeScript
// 2.x client sends it: the routing headers Mcp-Method (tools/call) and
// Mcp-Name (the tool), once each and equal to the body, no Mcp-Param-*
// header and a tool whose schema binds none (x-mcp-header), and in _meta
// the protocol version (equal to the MCP-Protocol-Version header), the
// client's capabilities in the shapes the SDK's types read (fastCapabilities)
// and optionally its name and version as plain strings. The SDK's answer
// then adds the server's name and version in the result's _meta and
// "resultType":"complete". Every other 2026-07-28 message, the SDK's
// refusals of missing or disagreeing headers and _meta included, goes to
// the SDK. TestMCPFastPathAnswersAsTheSDK sends every outcome at every
// revision both ways and compares the answers; TestMCPFastAnswerIsTheSDKs
// compares the encodings for hostile strings and every outcome.

import (
	"bytes"
	"mime"
	"net/http"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/toolgate/toolgate/internal/jsontape"
	"github.com/toolgate/toolgate/proxy"
)

// fastCall is a tools/call the fast path serves.
type fastCall struct {
	id     jsonrpc.ID
	name   string
	args   []byte // the arguments as sent; nil when absent
	tp, ts any    // _meta's traceparent and tracestate
}

// serveFast answers a tools/call on the fast path and reports whether it
// did; when it did not, nothing was written.
func (f *front) serveFast(w http.ResponseWriter, r *http.Request, v proxy.View, revision string, body []byte) bool {
	s := f.serverOf(v)
	call := f.fastCallOf(r, s, revision, body)
	if call == nil {
		return false
	}
	if revision == "" {
		revision = "2025-03-26" // the SDK's assumption without the header
	}
	env := s.callTool(r.Context(), r.Header, call.name, call.args, call.tp, call.ts, revision)
	// The SDK's bytes for result(env), written directly (fast_encode.go).
	var meta []byte
	if revision == modernRevision {
		meta = s.resultMeta
	}
	p := outPool.Get().(*[]byte)
	msg, ok := appendFastAnswer((*p)[:0], call.id, env, meta)
	if !ok {
		putOut(p, msg)
		return false // cannot happen: the SDK would fail alike
	}
	f.fastCalls.Add(1)
	// The SDK's headers. Constant values share their slices: the server
	// only reads them.
	h := w.Header()
	h["Cache-Control"] = headerNoCache
	h["Content-Type"] = headerJSON
	_, _ = w.Write(msg)
	putOut(p, msg)
	return true
}

// fastCallOf is the tools/call the fast path serves, or nil when the SDK
// serves the message. Out of line, with the call on the heap: what it
// reads takes no room on the stack the call runs on.
//
//go:noinline
func (f *front) fastCallOf(r *http.Request, s *server, revision string, body []byte) *fastCall {
	if f.sdkOnly || len(r.Header.Values("Last-Event-ID")) > 0 {
		return nil
	}
	modern := revision >= modernRevision
	if modern && (revision != modernRevision || !oneValue(r.Header, "Mcp-Method", "tools/call") || hasParamHeader(r.Header)) {
		return nil
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		// The common value is compared as it is, the rest parsed.
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			return nil
		}
	}
	call := new(fastCall)
	if !parseFastCall(body, s.tools, modern, call) {
		return nil
	}
	if modern && (!oneValue(r.Header, "Mcp-Name", call.name) || s.headerBound[call.name]) {
		return nil
	}
	return call
}

// modernRevision is the one revision from 2026-07-28 on that the fast path
// serves; a later one would go to the SDK until the fast path learns it.
const modernRevision = "2026-07-28"

// oneValue reports whether header key holds exactly one value, v: what
// the SDK reads (the first value) cannot then differ from what the fast
// path compared.
func oneValue(h http.Header, key, v string) bool {
	vs := h[key]
	return len(vs) == 1 && vs[0] == v
}

// hasParamHeader reports whether the request has an Mcp-Param-* header,
// which the SDK checks against the arguments of a tool that binds them.
func hasParamHeader(h http.Header) bool {
	for k := range h {
		if len(k) >= len("Mcp-Param-") && strings.EqualFold(k[:len("Mcp-Param-")], "Mcp-Param-") {
			return true
		}
	}
	return false
}

// parseFastCall reads body as one tools/call request of a tool in tools:
// {"jsonrpc":"2.0","id":ID,"method":"tools/call","params":{"name":NAME,
// "arguments":ANY,"_meta":{"traceparent":S,"tracestate":S}}} in any order,
// params' members but name optional. With modern (revision 2026-07-28)
// _meta is required and holds the per-request members too (fastMeta).
// ok is false for anything else.
func parseFastCall(body []byte, tools map[string]bool, modern bool, call *fastCall) (ok bool) {
	tape, root, err := jsontape.ParseObject(body)
	if err != nil {
		return false
	}
	defer tape.Release()
	var key [32]byte
	var seen [4]bool
	for c := root.Cursor(); c.More(); {
		k, val := c.Member()
		i := plainKey(k, key[:0], "jsonrpc", "id", "method", "params")
		if i < 0 || seen[i] {
			return false
		}
		seen[i] = true
		switch i {
		case 0:
			ok = plainString(val, key[:0]) == "2.0"
		case 1:
			call.id, ok = fastID(val)
		case 2:
			ok = plainString(val, key[:0]) == "tools/call"
		case 3:
			ok = fastParams(val, tools, modern, call)
		}
		if !ok {
			return false
		}
	}
	return seen[0] && seen[1] && seen[2] && seen[3]
}

// fastParams reads the params of a tools/call into call.
func fastParams(params jsontape.Value, tools map[string]bool, modern bool, call *fastCall) bool {
	if params.Kind() != jsontape.Object {
		return false
	}
	var key [32]byte
	var seen [3]bool
	for c := params.Cursor(); c.More(); {
		k, val := c.Member()
		i := plainKey(k, key[:0], "name", "arguments", "_meta")
		if i < 0 || seen[i] {
			return false
		}
		seen[i] = true
		switch i {
		case 0:
			if val.Kind() != jsontape.String {
				return false
			}
			call.name = val.Text()
			raw := val.AppendRaw(key[:0])
			if !tools[call.name] || len(raw) != len(call.name)+2 || string(raw[1:len(raw)-1]) != call.name {
				return false // an unknown tool, or a name written with escapes
			}
		case 1:
			call.args = val.AppendRaw(nil)
		case 2:
			if !fastMeta(val, modern, call) {
				return false
			}
		}
	}
	// 2026-07-28 carries the revision in every request's _meta.
	return seen[0] && (seen[2] || !modern)
}

// The per-request _meta members of revision 2026-07-28.
const (
	metaProtocolVersion    = "io.modelcontextprotocol/protocolVersion"
	metaClientCapabilities = "io.modelcontextprotocol/clientCapabilities"
	metaClientInfo         = "io.modelcontextprotocol/clientInfo"
)

// fastMeta reads a _meta of traceparent and tracestate strings; with
// modern, also the protocol version (2026-07-28, required), the client's
// capabilities (required, fastCapabilities) and its information
// (fastClientInfo).
func fastMeta(meta jsontape.Value, modern bool, call *fastCall) bool {
	if meta.Kind() != jsontape.Object {
		return false
	}
	names := []string{"traceparent", "tracestate"}
	if modern {
		names = []string{"traceparent", "tracestate", metaProtocolVersion, metaClientCapabilities, metaClientInfo}
	}
	var key [48]byte
	var seen [5]bool
	for c := meta.Cursor(); c.More(); {
		k, val := c.Member()
		i := plainKey(k, key[:0], names...)
		if i < 0 || seen[i] {
			return false
		}
		seen[i] = true
		ok := false
		switch i {
		case 0, 1:
			ok = val.Kind() == jsontape.String && plainText(val)
			if i == 0 {
				call.tp = val.Text()
			} else {
				call.ts = val.Text()
			}
		case 2:
			ok = plainString(val, key[:0]) == modernRevision
		case 3:
			ok = fastCapabilities(val)
		case 4:
			ok = fastClientInfo(val)
		}
		if !ok {
			return false
		}
	}
	return !modern || seen[2] && seen[3]
}

// fastCapabilities reports whether v is client capabilities the SDK reads
// without error, in the plainest shapes: an object of roots
// ({"listChanged":BOOL}), sampling ({"context":{},"tools":{}}) and
// elicitation ({"form":{},"url":{}}), every member optional. Anything
// else (experimental, extensions, null, members with content the SDK
// ignores) goes to the SDK, which decides what it accepts.
func fastCapabilities(v jsontape.Value) bool {
	if v.Kind() != jsontape.Object {
		return false
	}
	var key [32]byte
	var seen [3]bool
	for c := v.Cursor(); c.More(); {
		k, val := c.Member()
		i := plainKey(k, key[:0], "roots", "sampling", "elicitation")
		if i < 0 || seen[i] || val.Kind() != jsontape.Object {
			return false
		}
		seen[i] = true
		var members []string
		switch i {
		case 0:
			members = []string{"listChanged"}
		case 1:
			members = []string{"context", "tools"}
		case 2:
			members = []string{"form", "url"}
		}
		var memberSeen [2]bool
		for mc := val.Cursor(); mc.More(); {
			mk, mval := mc.Member()
			j := plainKey(mk, key[:0], members...)
			if j < 0 || memberSeen[j] {
				return false
			}
			memberSeen[j] = true
			if i == 0 {
				if kind := mval.Kind(); kind != jsontape.True && kind != jsontape.False {
					return false
				}
			} else if mval.Kind() != jsontape.Object || mval.Len() != 0 {
				return false
			}
		}
	}
	return true
}

// fastClientInfo reports whether v is client information the SDK reads
// without error in its plainest shape: an object of name, title,
// description, version and websiteUrl, each optional, each a string of
// printable ASCII without escapes.
func fastClientInfo(v jsontape.Value) bool {
	if v.Kind() != jsontape.Object {
		return false
	}
	var key [32]byte
	var seen [5]bool
	for c := v.Cursor(); c.More(); {
		k, val := c.Member()
		i := plainKey(k, key[:0], "name", "title", "description", "version", "websiteUrl")
		if i < 0 || seen[i] || val.Kind() != jsontape.String || !plainText(val) {
			return false
		}
		seen[i] = true
	}
	return true
}

// plainKey returns the index in names of an object key written without
// escapes, or -1.
func plainKey(k jsontape.Value, buf []byte, names ...string) int {
	raw := k.AppendRaw(buf)
	for i, n := range names {
		if len(raw) == len(n)+2 && string(raw[1:len(raw)-1]) == n {
			return i
		}
	}
	return -1
}

// plainString returns a string value written without escapes, or "".
func plainString(v jsontape.Value, buf []byte) string {
	if v.Kind() != jsontape.String {
		return ""
	}
	raw := v.AppendRaw(buf)
	if bytes.IndexByte(raw, '\\') >= 0 {
		return ""
	}
	return string(raw[1 : len(raw)-1])
}

// plainText reports whether a string value is printable ASCII without
// escapes, which every JSON decoder reads alike.
func plainText(v jsontape.Value) bool {
	var buf [64]byte
	raw := v.AppendRaw(buf[:0])
	for _, c := range raw[1 : len(raw)-1] {
		if c < 0x20 || c > 0x7e || c == '\\' {
			return false
		}
	}
	return true
}

// fastID reads a request id the fast path echoes: an integer of at most
// 15 digits (exact as the float64 the SDK reads it as), or a string of
// printable ASCII without escapes.
func fastID(v jsontape.Value) (jsonrpc.ID, bool) {
	switch v.Kind() {
	case jsontape.Number:
		var buf [24]byte
		raw := v.AppendRaw(buf[:0])
		digits := bytes.TrimPrefix(raw, []byte("-"))
		if len(digits) == 0 || len(digits) > 15 || (digits[0] == '0' && len(digits) > 1) {
			return jsonrpc.ID{}, false
		}
		for _, c := range digits {
			if c < '0' || c > '9' {
				return jsonrpc.ID{}, false
			}
		}
		n, ok := v.Int()
		if !ok {
			return jsonrpc.ID{}, false
		}
		id, err := jsonrpc.MakeID(float64(n))
		return id, err == nil
	case jsontape.String:
		if !plainText(v) {
			return jsonrpc.ID{}, false
		}
		id, err := jsonrpc.MakeID(v.Text())
		return id, err == nil
	}
	return jsonrpc.ID{}, false
}

var (
	headerNoCache = []string{"no-cache, no-transform"}
	headerJSON    = []string{"application/json"}
)

// outPool recycles the buffers the fast path writes answers into.
var outPool = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

// putOut returns a buffer to outPool, keeping the array b grew it to.
func putOut(p *[]byte, b []byte) {
	if cap(b) <= 64<<10 {
		*p = b[:0]
		outPool.Put(p)
	}
}
