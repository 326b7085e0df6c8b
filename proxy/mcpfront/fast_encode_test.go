package mcpfront

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/internal/testkit/proxytest"
)

// sdkFastAnswer is the reference for appendFastAnswer: the answer as the
// fast path wrote it before it wrote JSON itself, through the SDK's
// types and encoders (CallToolResult.MarshalJSON inside the encoder the
// SDK's JSON-RPC layer marshals results with, then EncodeMessage). With
// impl, the answer of revision 2026-07-28 of server impl: the result as
// the SDK's server completes it (ServerSession.handle: resultType
// "complete", _meta holding impl as the server's information).
func sdkFastAnswer(id jsonrpc.ID, env *contracts.Envelope, impl *mcp.Implementation) ([]byte, error) {
	res := result(env)
	if impl != nil {
		// resultType is unexported: the SDK's own decoder sets it.
		var modern mcp.CallToolResult
		if err := json.Unmarshal([]byte(`{"content":[],"resultType":"complete"}`), &modern); err != nil {
			return nil, err
		}
		modern.Meta = mcp.Meta{mcp.MetaKeyServerInfo: impl}
		modern.Content, modern.StructuredContent, modern.IsError = res.Content, res.StructuredContent, res.IsError
		res = &modern
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(res); err != nil {
		return nil, err
	}
	return jsonrpc.EncodeMessage(&jsonrpc.Response{ID: id, Result: bytes.TrimRight(buf.Bytes(), "\n")})
}

// checkFastAnswer requires appendFastAnswer to write what the SDK writes
// for id and env (under 2026-07-28 for server impl when impl is not nil),
// or to refuse what the SDK cannot encode.
func checkFastAnswer(t *testing.T, id jsonrpc.ID, env *contracts.Envelope, impl *mcp.Implementation) {
	t.Helper()
	want, err := sdkFastAnswer(id, env, impl)
	var meta []byte
	if impl != nil {
		meta = resultMetaOf(impl)
	}
	got, ok := appendFastAnswer([]byte("prefix kept:"), id, env, meta)
	switch {
	case err != nil || !ok:
		if err == nil || ok {
			t.Fatalf("id %v, cost %v: the SDK's error %v, the direct encoding's ok %v", id.Raw(), env.Cost, err, ok)
		}
	case !bytes.HasPrefix(got, []byte("prefix kept:")):
		t.Fatalf("appendFastAnswer lost what dst held: %q", got)
	case string(got[len("prefix kept:"):]) != string(want):
		got = got[len("prefix kept:"):]
		i := 0
		for i < len(got) && i < len(want) && got[i] == want[i] {
			i++
		}
		t.Fatalf("id %v, status %q: the answers differ from byte %d on:\nthe SDK writes   %s\nthe fast path    %s",
			id.Raw(), env.Status, i, window(want, i), window(got, i))
	}
}

// window is b around offset i, at most 200 bytes of it.
func window(b []byte, i int) []byte {
	return b[max(0, i-100):min(len(b), i+100)]
}

// fastIDs are request ids as the fast path admits them, read by
// parseFastCall from the message's text.
func fastIDs(t testing.TB, texts ...string) []jsonrpc.ID {
	var ids []jsonrpc.ID
	for _, text := range texts {
		var call fastCall
		if !parseFastCall([]byte(`{"jsonrpc":"2.0","id":`+text+`,"method":"tools/call","params":{"name":"t"}}`), map[string]bool{"t": true}, false, &call) {
			t.Fatalf("the fast path refuses id %s", text)
		}
		ids = append(ids, call.id)
	}
	return ids
}

// hostileTexts are strings whose JSON spelling depends on who writes it:
// HTML characters (escaped by json.Marshal, not by the JSON-RPC layer),
// U+2028 and U+2029, every control character, invalid UTF-8, non-ASCII,
// and a long mix of them.
func hostileTexts() []string {
	var controls strings.Builder
	for c := range 0x20 {
		controls.WriteByte(byte(c))
	}
	controls.WriteString("\x7f")
	texts := []string{
		"",
		"[OK] plain",
		`<script>alert("x")</script> & <b>&amp;</b> > <`,
		"line\u2028separator\u2029paragraph",
		controls.String(),
		`quote " backslash \ slash /`,
		"invalid \xff\xfe UTF-8 \xe2\x80 cut \xe2\x80\xa8 whole \xed\xa0\x80 surrogate \xc0\xaf overlong",
		"量子引力 é ü 🦀 \ufeff \ufffd",
	}
	texts = append(texts, strings.Repeat(strings.Join(texts, "|"), 400)) // ~60 KB
	return texts
}

// TestMCPFastAnswerIsTheSDKs: the fast path's direct encoding of a
// tools/call answer is the SDK's, byte for byte, for every status, side
// effect, retry and replay combination, costs that take encoding/json's
// exponent form, hostile strings in every string field, and every shape
// of id the fast path admits; and both refuse a cost JSON cannot spell.
// Each holds before 2026-07-28 and in 2026-07-28's form, for toolgate's
// server information and for hostile strings in it.
func TestMCPFastAnswerIsTheSDKs(t *testing.T) {
	t.Run("before 2026-07-28", func(t *testing.T) { testFastAnswers(t, nil) })
	t.Run("2026-07-28", func(t *testing.T) { testFastAnswers(t, &mcp.Implementation{Name: "toolgate", Version: "dev"}) })
	for i, text := range hostileTexts() {
		t.Run(fmt.Sprintf("2026-07-28, server information %d", i), func(t *testing.T) {
			impl := &mcp.Implementation{Name: text, Version: text, Title: text}
			checkFastAnswer(t, fastIDs(t, "7")[0], &contracts.Envelope{Status: contracts.StatusOK, Observation: text}, impl)
			checkFastAnswer(t, fastIDs(t, `"<x>"`)[0], &contracts.Envelope{Status: contracts.StatusUpstream, Observation: text}, impl)
		})
	}
}

// testFastAnswers is TestMCPFastAnswerIsTheSDKs for one form of answer:
// before 2026-07-28 (impl nil) or 2026-07-28's of server impl.
func testFastAnswers(t *testing.T, impl *mcp.Implementation) {
	ids := fastIDs(t, "0", "-0", "7", "-42", "999999999999999", "-999999999999999", "123456789012345",
		`""`, `"call-1:a.b"`, `"<a href='x'>&amp;</a>"`, `"~!@#$%^&*()_+{}|:<>?"`, `"1e15"`)
	texts := hostileTexts()
	sideEffects := []contracts.SideEffect{contracts.SideEffectNone, contracts.SideEffectDone, contracts.SideEffectUnknown}
	costs := []float64{0, math.Copysign(0, -1), 1, 0.1, 2.5, 1e-6, 1e-7, 1.5e-9, 1e20, 1e21, 123456789.125, math.MaxFloat64, math.SmallestNonzeroFloat64}
	n := 0
	for _, st := range contracts.Statuses() {
		for _, se := range sideEffects {
			for flags := range 8 {
				env := &contracts.Envelope{
					Status: st, SideEffect: se,
					Retryable: flags&1 != 0, Replayed: flags&2 != 0, SideEffectDone: se == contracts.SideEffectDone,
					Tool: "search_articles", CallID: fmt.Sprintf("call-%d", n),
					Observation: st.Tag() + " what happened.\n{\"data\":[1,2]}",
					Message:     "what happened <b>", Data: json.RawMessage(`{"html":"<&>"}`),
				}
				if flags&4 != 0 {
					env.RetryAfterMS = 1500
				}
				env.Cost = costs[n%len(costs)]
				checkFastAnswer(t, ids[n%len(ids)], env, impl)
				n++
			}
		}
	}
	for i, text := range texts {
		for j, id := range ids {
			env := &contracts.Envelope{
				Status: contracts.Statuses()[(i+j)%contracts.NumStatuses], SideEffect: sideEffects[j%3], Retryable: j%2 == 0, Replayed: i%2 == 0,
				RetryAfterMS: int64(j-3) * 1000, Cost: costs[(i+j)%len(costs)],
				Tool: text, CallID: text, Observation: text, Message: text, Data: json.RawMessage(`"` + strings.Repeat("<", i) + `"`),
			}
			checkFastAnswer(t, id, env, impl)
		}
	}
	for _, text := range texts {
		// Status and side effect are closed sets in the core; their
		// encoding is still the SDK's for any text.
		checkFastAnswer(t, ids[0], &contracts.Envelope{Status: contracts.Status(text), SideEffect: contracts.SideEffect(text)}, impl)
	}
	for _, cost := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		checkFastAnswer(t, ids[0], &contracts.Envelope{Status: contracts.StatusOK, Cost: cost}, impl)
	}
	// Ids the fast path does not admit, as the SDK holds them.
	for _, v := range []any{nil, float64(1 << 62), -float64(1 << 62), 1e300, "\xff<\u2028>\n"} {
		id, err := jsonrpc.MakeID(v)
		if err != nil {
			t.Fatal(err)
		}
		checkFastAnswer(t, id, &contracts.Envelope{Status: contracts.StatusOK, Observation: "x"}, impl)
	}
}

// FuzzMCPFastAnswer: the direct encoding is the SDK's for any strings in
// the envelope (text holds the observation, tool, call id, status and
// side effect, split at NUL bytes) and any id of the fast path's shapes
// (a string id when flags&8, else n cut to 15 digits, as fastID admits),
// in 2026-07-28's form when flags&16 (the server's version the text's
// sixth part).
func FuzzMCPFastAnswer(f *testing.F) {
	for i, text := range hostileTexts()[:8] {
		f.Add(text+"\x00search_articles\x00call-1\x00ok\x00none", "", int64(i), 0.5, uint8(i))
	}
	f.Add("[BAD_ARGS] x\x00<t>\x00&\x00bad_args\x00unknown", "<id>&\u2028", int64(-5), 1e21, uint8(15))
	f.Add("[OK] x\x00t\x00c\x00ok\x00none\x00v<1>&\u2028\xff", "", int64(3), 0.25, uint8(16))
	f.Add("[UPSTREAM] x\x00t\x00c\x00upstream\x00unknown\x00", "id", int64(0), 2.0, uint8(31))
	f.Fuzz(func(t *testing.T, text, strID string, n int64, cost float64, flags uint8) {
		id, _ := jsonrpc.MakeID(float64(n % 1e15))
		if flags&8 != 0 {
			id, _ = jsonrpc.MakeID(strID)
		}
		parts := append(strings.SplitN(text, "\x00", 6), "", "", "", "", "")
		var impl *mcp.Implementation
		if flags&16 != 0 {
			impl = &mcp.Implementation{Name: "toolgate", Version: parts[5]}
		}
		checkFastAnswer(t, id, &contracts.Envelope{
			Observation: parts[0], Tool: parts[1], CallID: parts[2],
			Status: contracts.Status(parts[3]), SideEffect: contracts.SideEffect(parts[4]),
			Retryable: flags&1 != 0, Replayed: flags&2 != 0, RetryAfterMS: n * int64(flags&4), Cost: cost,
		}, impl)
	})
}

// BenchmarkMCPFastAnswer: the fast path's answer to one search call,
// written directly and, for comparison, through the SDK's encoders.
func BenchmarkMCPFastAnswer(b *testing.B) {
	env := &contracts.Envelope{
		Status: contracts.StatusOK, SideEffect: contracts.SideEffectNone, Cost: 1, Tool: "search_articles", CallID: "01J9ZQ3X7Y8K2M4N6P8R0T2V4W",
		Observation: "[OK] Found 5 results for \"go\".\n" + string(proxytest.SearchAnswer()),
	}
	id := fastIDs(b, "1")[0]
	b.Run("direct", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		for b.Loop() {
			buf, _ = appendFastAnswer(buf[:0], id, env, nil)
		}
	})
	b.Run("sdk", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := sdkFastAnswer(id, env, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
}
