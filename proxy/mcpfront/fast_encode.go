package mcpfront

// The fast path's answer, written directly: the bytes the SDK writes for
// result(env) as the result of a JSON-RPC response, without building
// the SDK's values or running encoding/json on them.
//
// What the SDK writes (go-sdk v1.8.0), layer by layer:
//
//   - CallToolResult.MarshalJSON is json.Marshal of its fields, with HTML
//     escaping: "_meta" (before 2026-07-28 nil, left out; from 2026-07-28
//     the server's name and version, server.resultMeta), "content",
//     "structuredContent", "isError" (false left out), requestState (empty
//     on this path, left out), then resultType (before 2026-07-28 empty,
//     left out; from 2026-07-28 "complete") and inputRequests (empty on
//     this path, left out);
//   - the text block is TextContent.MarshalJSON, json.Marshal again:
//     {"type":"text","text":...};
//   - structuredContent is Output by its struct tags, with HTML
//     escaping (retry_after_ms left out when 0, cost as encoding/json
//     writes a float64);
//   - the JSON-RPC layer wraps the result as {"jsonrpc":"2.0","id":...,
//     "result":...} with HTML escaping off, and trims the newline its
//     encoder adds. It only compacts the result it is given, which undoes
//     no escape: strings escaped by an inner json.Marshal (<, >, & as
//     \u003c, \u003e, \u0026) stay escaped, the id (written by the outer
//     layer) does not get them;
//   - an integer id is the int64 the SDK made of the float64 it decoded,
//     a string id a JSON string.
//
// Every string goes through jsontape's appenders, which write what
// encoding/json writes (invalid UTF-8 as \ufffd, U+2028 and U+2029
// escaped). TestMCPFastAnswerIsTheSDKs compares both encodings.

import (
	"math"
	"strconv"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/internal/jsontape"
)

// appendFastAnswer appends the JSON-RPC response with id to a tools/call
// whose result has envelope env, as the SDK writes it. meta is the
// result's _meta as written (server.resultMeta) under revision 2026-07-28,
// whose results also say "resultType":"complete"; nil before it, whose
// results have neither. ok is false when the SDK could not encode it
// either (a cost that is not finite); dst is then unspecified.
func appendFastAnswer(dst []byte, id jsonrpc.ID, env *contracts.Envelope, meta []byte) (_ []byte, ok bool) {
	dst = append(dst, `{"jsonrpc":"2.0"`...)
	switch id := id.Raw().(type) {
	case nil: // no id: left out (the fast path always has one)
	case int64:
		dst = append(dst, `,"id":`...)
		dst = strconv.AppendInt(dst, id, 10)
	case string:
		dst = append(dst, `,"id":`...)
		dst = jsontape.AppendString(dst, id)
	default:
		return dst, false
	}
	dst = append(dst, `,"result":{`...)
	if meta != nil {
		dst = append(dst, `"_meta":`...)
		dst = append(dst, meta...)
		dst = append(dst, ',')
	}
	dst = append(dst, `"content":[{"type":"text","text":`...)
	dst = jsontape.AppendHTMLString(dst, env.Observation)
	dst = append(dst, `}],"structuredContent":`...)
	if dst, ok = appendOutput(dst, OutputOf(env)); !ok {
		return dst, false
	}
	if !env.Status.Success() {
		dst = append(dst, `,"isError":true`...)
	}
	if meta != nil {
		dst = append(dst, `,"resultType":"complete"`...)
	}
	return append(dst, "}}"...), true
}

// appendOutput appends o as json.Marshal writes it; ok is false for a
// cost that is not finite, which json.Marshal refuses.
func appendOutput(dst []byte, o *Output) (_ []byte, ok bool) {
	if math.IsNaN(o.Cost) || math.IsInf(o.Cost, 0) {
		return dst, false
	}
	dst = append(dst, `{"status":`...)
	dst = jsontape.AppendHTMLString(dst, string(o.Status))
	dst = append(dst, `,"retryable":`...)
	dst = strconv.AppendBool(dst, o.Retryable)
	if o.RetryAfterMS != 0 {
		dst = append(dst, `,"retry_after_ms":`...)
		dst = strconv.AppendInt(dst, o.RetryAfterMS, 10)
	}
	dst = append(dst, `,"side_effect":`...)
	dst = jsontape.AppendHTMLString(dst, string(o.SideEffect))
	dst = append(dst, `,"replayed":`...)
	dst = strconv.AppendBool(dst, o.Replayed)
	dst = append(dst, `,"cost":`...)
	dst = jsontape.AppendFloat(dst, o.Cost, 64)
	dst = append(dst, `,"tool":`...)
	dst = jsontape.AppendHTMLString(dst, o.Tool)
	dst = append(dst, `,"call_id":`...)
	dst = jsontape.AppendHTMLString(dst, o.CallID)
	return append(dst, '}'), true
}
