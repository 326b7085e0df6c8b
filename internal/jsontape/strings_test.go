package jsontape

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestAppendStringRepairsInvalidUTF8(t *testing.T) {
	got := AppendString(nil, "ok \xff\xfe end")
	if string(got) != `"ok \ufffd\ufffd end"` {
		t.Errorf("got %s", got)
	}
}

// FuzzAppendString: the hand-written string encoders write what
// encoding/json writes, without HTML escaping (AppendString) and with it
// (AppendHTMLString, as json.Marshal), for any bytes.
func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"plain", "<b>&amp;</b>", "量子 \u2028\u2029 é", "a\"b\\c\n\t\x01", "bad \xff\xfe utf8", "\xe2\x80", "\xe2\x80\xa8"} {
		f.Add(s)
	}
	f.Fuzz(checkAppendString)
}

// FuzzValidUTF8: validUTF8 agrees with utf8.Valid on any bytes.
func FuzzValidUTF8(f *testing.F) {
	for _, s := range []string{"", "plain ascii text", "量子计算入门", "goroutine 与 channel 的常见用法", "abcdefg\xe9\x87", "abcdefgh\xff12345678", "Go 语言并发编程实战", "\xed\xa0\x80", "\xe0\x80\x80", "\xef\xbf\xbd", "\xf0\x9f\x98\x80", "\xc0\xaf", "\xc2", "\xe1\x80", "ab\xe9\x87\x8f", "Привет, мир", "\xf4\x90\x80\x80"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, p []byte) {
		if got, want := validUTF8(p), utf8.Valid(p); got != want {
			t.Fatalf("validUTF8(%q) = %v, utf8.Valid %v", p, got, want)
		}
	})
}

// TestValidUTF8EverySequence holds validUTF8 to utf8.Valid on every
// sequence of three bytes that starts with a lead byte, alone and cut short
// after one ASCII byte and before eight, and on three Chinese characters
// with any one byte changed, so each fast path meets every lead and
// continuation byte at every position it checks.
func TestValidUTF8EverySequence(t *testing.T) {
	buf := []byte("12345678abc")
	for a := 0xc0; a <= 0xff; a++ { // 0x80-0xbf lead nothing
		for b := range 256 {
			for c := range 256 {
				seq := []byte{byte(a), byte(b), byte(c)}
				for _, p := range [][]byte{seq, seq[:2], append(buf[:1:1], seq...), append(buf[:8:8], seq...)} {
					if got, want := validUTF8(p), utf8.Valid(p); got != want {
						t.Fatalf("validUTF8(%q) = %v, utf8.Valid %v", p, got, want)
					}
				}
			}
		}
	}
	// Three three-byte sequences in a row are checked at once: any byte
	// of them changed to any value, with and without what follows.
	// (量 is E9 87 8F: a lead changed to E0 must be refused before it,
	// 子 is E5 AD 90: one changed to ED must be refused before it.)
	for _, text := range []string{"量子计", "量子计算", "量子计a", "量量量", "子子子子"} {
		for at := range 9 {
			for v := range 256 {
				p := []byte(text)
				p[at] = byte(v)
				if got, want := validUTF8(p), utf8.Valid(p); got != want {
					t.Fatalf("validUTF8(%q) = %v, utf8.Valid %v", p, got, want)
				}
			}
		}
	}
}

// BenchmarkValidUTF8 checks the Chinese snippet of the example corpus with
// validUTF8 and with utf8.Valid, the library it stands in for.
func BenchmarkValidUTF8(b *testing.B) {
	for _, text := range []struct{ name, text string }{
		{"chinese", "从量子比特、叠加态与纠缠讲起，介绍量子门、量子线路，以及当前量子计算机的能力边界。"},
		{"mixed", "goroutine 与 channel 的常见用法，用 context 控制超时与取消，避免协程泄漏。"},
	} {
		for _, c := range []struct {
			name  string
			valid func([]byte) bool
		}{{"validUTF8", validUTF8}, {"utf8.Valid", utf8.Valid}} {
			b.Run(text.name+"/"+c.name, func(b *testing.B) {
				p := []byte(text.text)
				b.SetBytes(int64(len(p)))
				for b.Loop() {
					if !c.valid(p) {
						b.Fatal("invalid")
					}
				}
			})
		}
	}
}

// TestAppendStringEveryByteEverywhere holds AppendString and
// AppendHTMLString to encoding/json for every byte value at every offset
// of a string that spans the eight-byte steps of the plain-text loop, and
// for every lead byte past ASCII followed by continuation bytes and their
// near misses, whole and cut short, so each fast path meets the bytes it
// must stop at in every position it checks.
func TestAppendStringEveryByteEverywhere(t *testing.T) {
	check := func(s string) {
		t.Helper()
		checkAppendString(t, s)
	}
	base := []byte("abcdefghijklmnopqrstuvwx")
	for n := 15; n <= len(base); n++ {
		for at := range n {
			for v := range 256 {
				s := bytes.Clone(base[:n])
				s[at] = byte(v)
				check(string(s))
			}
		}
	}
	near := []byte{0x00, 0x1f, '"', '\\', '<', 'a', 0x7f, 0x80, 0x9f, 0xa0, 0xa8, 0xa9, 0xbf, 0xc0, 0xff}
	for lead := 0x80; lead <= 0xff; lead++ {
		for _, b := range near {
			for _, c := range near {
				seq := string([]byte{byte(lead), b, c})
				for _, s := range []string{seq, seq[:2], seq[:1], "12345678" + seq, "1234567" + seq + "z", "量" + seq + "子"} {
					check(s)
				}
			}
		}
	}
}

// BenchmarkAppendString escapes an envelope's observation: a message, then
// the data as compact JSON with Chinese text in it, as the example search
// tool answers.
func BenchmarkAppendString(b *testing.B) {
	obs := "[OK] 命中 6 条。\n" + strings.Repeat(`{"id":"kb-1001","title":"Go concurrency patterns","snippet":"Goroutines, channels and select: pipelines, fan-out and fan-in.","url":"https://kb.example.com/articles/go-concurrency-patterns"},{"id":"kb-2002","title":"Go 语言并发编程实战","snippet":"goroutine 与 channel 的常见用法，用 context 控制超时与取消。"},`, 4)
	buf := make([]byte, 0, 2*len(obs))
	b.SetBytes(int64(len(obs)))
	for b.Loop() {
		buf = AppendString(buf[:0], obs)
	}
}

// checkAppendString holds AppendString to encoding/json (HTML left as it
// is) and AppendHTMLString to json.Marshal for s.
func checkAppendString(t *testing.T, s string) {
	t.Helper()
	var want bytes.Buffer
	enc := json.NewEncoder(&want)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		t.Fatal(err)
	}
	if got := string(AppendString(nil, s)); got != strings.TrimSuffix(want.String(), "\n") {
		t.Fatalf("AppendString(%q) = %s, encoding/json %s", s, got, want.String())
	}
	html, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(AppendHTMLString(nil, s)); got != string(html) {
		t.Fatalf("AppendHTMLString(%q) = %s, json.Marshal %s", s, got, html)
	}
}
