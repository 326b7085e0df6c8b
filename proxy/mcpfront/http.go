package mcpfront

// The HTTP side of the MCP front: what toolgate checks before the SDK reads
// a message, and JSON-RPC error bodies for every refusal, the SDK's own
// plain-text ones included, so a client always gets an error it can parse.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/internal/boundedio"
	"github.com/toolgate/toolgate/proxy"
)

// JSON-RPC 2.0 error codes the SDK does not name.
const (
	rpcParseError     = -32700
	rpcInvalidRequest = -32600
)

func (f *front) serveHTTP(w http.ResponseWriter, r *http.Request) {
	v := f.core.View()
	// The message is read into a pooled buffer: the fast path reads it
	// only while the call runs (the arguments are decoded into their own
	// strings), and the SDK, which may keep parts of it, gets a copy.
	in := inPool.Get().(*[]byte)
	body, revision, ok := f.admit(w, r, v, in)
	if !ok {
		putIn(in)
		return
	}
	if f.serveFast(w, r, v, revision, body) {
		putIn(in)
		return
	}
	body = bytes.Clone(body)
	putIn(in)
	// The SDK serves the message on the server of the request's view.
	r = r.WithContext(context.WithValue(r.Context(), viewKey{}, v))
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	ew := &rpcErrorWriter{ResponseWriter: w, body: body, modern: revision >= "2026-07-28"}
	f.sdk.ServeHTTP(ew, r)
	ew.finish()
}

// admit reads an MCP request's message and checks what the transport
// asks of it; ok is false when it answered the request itself. Out of
// line, so that its refusals take no room on the stack a call runs on.
//
//go:noinline
func (f *front) admit(w http.ResponseWriter, r *http.Request, v proxy.View, buf *[]byte) (body []byte, revision string, ok bool) {
	if why := f.guard.Refusal(r, v); why != "" {
		writeRPCError(w, http.StatusForbidden, nil, rpcInvalidRequest, "Forbidden: "+why, nil)
		return nil, "", false
	}
	if r.Method != http.MethodPost {
		// The SDK answers 405 with Allow: POST.
		ew := &rpcErrorWriter{ResponseWriter: w}
		f.sdk.ServeHTTP(ew, r)
		ew.finish()
		return nil, "", false
	}
	limit := v.Policy().Server.MaxRequestBytes + requestOverhead
	body, tooLarge, err := boundedio.ReadHTTPBody(r, limit, buf)
	switch {
	case tooLarge:
		// The rest of the body is not read: the connection cannot serve
		// another request.
		w.Header().Set("Connection", "close")
		writeRPCError(w, http.StatusRequestEntityTooLarge, nil, rpcInvalidRequest, fmt.Sprintf("the message is over %d bytes", limit), nil)
		return nil, "", false
	case err != nil:
		w.Header().Set("Connection", "close")
		writeRPCError(w, http.StatusBadRequest, nil, rpcInvalidRequest, "the request body ended early", nil)
		return nil, "", false
	}
	revision = r.Header.Get("Mcp-Protocol-Version")
	if revision != "" && !slices.Contains(Revisions(), revision) {
		data, _ := json.Marshal(mcp.UnsupportedProtocolVersionData{Supported: Revisions(), Requested: revision})
		writeRPCError(w, http.StatusBadRequest, requestID(body), mcp.CodeUnsupportedProtocolVersion,
			fmt.Sprintf("MCP-Protocol-Version %q is not supported; toolgate serves %s", revision, strings.Join(Revisions(), ", ")), data)
		return nil, "", false
	}
	// Clients must accept both JSON and an event stream; toolgate only
	// ever answers JSON, so a client that accepts just that is served.
	if !acceptsJSON(r.Header.Values("Accept")) {
		writeRPCError(w, http.StatusNotAcceptable, requestID(body), rpcInvalidRequest, "Accept must allow application/json: toolgate answers every message with one JSON body", nil)
		return nil, "", false
	}
	if accept := r.Header["Accept"]; len(accept) != 1 || accept[0] != sdkAccept {
		r.Header.Set("Accept", sdkAccept)
	}
	// Batches left the protocol in 2025-06-18; without the header a
	// request is 2025-03-26, which has them.
	if revision >= "2025-06-18" && isBatch(body) {
		writeRPCError(w, http.StatusBadRequest, nil, rpcInvalidRequest,
			fmt.Sprintf("JSON-RPC batches are not part of MCP %s; send one message per request", revision), nil)
		return nil, "", false
	}
	return body, revision, true
}

// sdkAccept is the Accept header the SDK's transport asks of a client.
const sdkAccept = "application/json, text/event-stream"

// inPool recycles the buffers MCP messages are read into.
var inPool = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

func putIn(p *[]byte) {
	if cap(*p) <= 64<<10 {
		*p = (*p)[:0]
		inPool.Put(p)
	}
}

// acceptsJSON reports whether an Accept header allows application/json;
// no header allows anything.
func acceptsJSON(values []string) bool {
	if len(values) == 0 {
		return true
	}
	for _, v := range values {
		for part := range strings.SplitSeq(v, ",") {
			part = strings.TrimSpace(part)
			switch part {
			case "application/json", "application/*", "*/*":
				// What mime.ParseMediaType would find, without its
				// allocations: a bare type, so no q=0.
				return true
			}
			mt, params, err := mime.ParseMediaType(part)
			if err != nil || params["q"] == "0" {
				continue
			}
			switch mt {
			case "application/json", "application/*", "*/*":
				return true
			}
		}
	}
	return false
}

func isBatch(body []byte) bool {
	body = bytes.TrimLeft(body, " \t\r\n")
	return len(body) > 0 && body[0] == '['
}

// rpcErrorWriter passes the SDK's answers through, except its plain-text
// errors, which it turns into JSON-RPC error bodies with the same HTTP
// status (the request's id included when the body was one request).
type rpcErrorWriter struct {
	http.ResponseWriter
	body   []byte // the request body, read for its id only on an error
	modern bool   // revision 2026-07-28 or later

	status int          // a plain-text error is being held
	text   bytes.Buffer // its message
}

func (w *rpcErrorWriter) WriteHeader(status int) {
	if status >= 400 && strings.HasPrefix(w.Header().Get("Content-Type"), "text/plain") {
		w.status = status
		return
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *rpcErrorWriter) Write(p []byte) (int, error) {
	if w.status != 0 {
		if w.text.Len() < 1024 {
			w.text.Write(p[:min(len(p), 1024)])
		}
		return len(p), nil
	}
	return w.ResponseWriter.Write(p)
}

// Flush lets an event stream (2026-07-28 subscriptions/listen) through.
func (w *rpcErrorWriter) Flush() {
	if w.status == 0 {
		_ = http.NewResponseController(w.ResponseWriter).Flush() // best effort, as http.Flusher
	}
}

func (w *rpcErrorWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// finish writes the held error, if any. The SDK's messages say what was
// wrong; the codes follow JSON-RPC: a body that is not JSON is a parse
// error, a method the server does not have is "method not found" (a
// JSON-RPC error on HTTP 200 before 2026-07-28, as the SDK answers other
// method errors), anything else an invalid request.
func (w *rpcErrorWriter) finish() {
	if w.status == 0 {
		return
	}
	msg, _, _ := strings.Cut(strings.TrimSpace(w.text.String()), "\n")
	status, code, id := w.status, int64(rpcInvalidRequest), requestID(w.body)
	switch {
	case strings.HasPrefix(msg, "malformed payload"):
		code, id = rpcParseError, nil
	case strings.Contains(msg, "not handled"):
		code = jsonrpc.CodeMethodNotFound
		if id != nil && !w.modern {
			status = http.StatusOK
		}
	}
	h := w.Header()
	h.Del("X-Content-Type-Options")
	writeRPCError(w.ResponseWriter, status, id, code, msg, nil)
}

// requestID is the id of a body holding one JSON-RPC request, or nil.
func requestID(body []byte) json.RawMessage {
	var msg struct {
		ID json.RawMessage `json:"id"`
	}
	if isBatch(body) || json.Unmarshal(body, &msg) != nil || len(msg.ID) == 0 || string(msg.ID) == "null" {
		return nil
	}
	return msg.ID
}

// writeRPCError answers with a JSON-RPC error. Without id (the request's
// could not be read) the id member is left out, as the Streamable HTTP
// transport does for a refused Origin.
func writeRPCError(w http.ResponseWriter, status int, id json.RawMessage, code int64, msg string, data json.RawMessage) {
	type rpcError struct {
		Code    int64           `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data,omitempty"`
	}
	b, _ := json.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id,omitempty"`
		Error   rpcError        `json:"error"`
	}{"2.0", id, rpcError{code, msg, data}})
	h := w.Header()
	h.Del("Content-Length")
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
