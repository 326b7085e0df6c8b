// Package redact keeps the secrets toolgate holds out of what it says: a
// backend that echoes its request (a verbose error page, a debug field, a
// 2xx that repeats what it got) must not put toolgate's credentials, or
// the agent's own forwarded ones, in an envelope's message, data or
// observation, in a stored record, in the log or in a learned summary.
//
// The answer is redacted once, before anything reads it: the rules, the
// error detail, the data, the text a template quotes and learning mode all
// see the redacted bytes (proxy's Core.redactAnswer, called by the send
// and by Call.Finish). A tool whose upstream holds no secret, and whose
// agent forwarded none, pays a pointer load and a comparison.
//
// This package is the search and the replacement: the forms a secret takes
// (AppendNeedles, AppendHeaderSecrets), the matcher that finds them all in
// one pass (Matcher), the replacement that keeps JSON valid (Bytes,
// String, Header), and the set of values an upstream's credential took at
// run time (SecretSet). Which secrets a call has is the pipeline's
// business (proxy: tool.redactor, Call.identityMatcher).
//
// What is a secret, for a call:
//
//   - every value of the upstream's auth as it is sent: basic's user
//     name, password and "user:password" (whose base64 is the header's),
//     a bearer token, an API key, an OAuth2 client id and secret and its
//     access tokens (the current one and the recent ones: a token in use
//     by a call in flight may just have been replaced), the values of
//     credential files as they were read (the current and recent ones);
//   - the values of the ${VAR} references written in the upstream's
//     static headers and in the tool's request binding: the policy has no
//     way to mark a variable secret, and the docs send secrets there;
//   - the values of the agent's headers this call forwards to the backend
//     (forward_headers) that carry credentials: Authorization, Cookie and
//     any name that says auth, token, key, secret, session, password or
//     credential (IdentityHeader). A scheme ("Bearer x", "Basic x") is cut
//     off, a Basic credential's user and password are secrets too, and
//     each cookie's value is one.
//
// A value shorter than MinSecretLen bytes is not searched for.
//
// How a secret is found (AppendNeedles, decodeEscapes): verbatim; as the
// base64 of any text holding it (standard and URL alphabets, padded or
// not, at each of the three byte alignments: the characters that depend
// on the secret alone, so base64("user:password") and a base64 blob of a
// whole echoed request are both caught); with a space written as "+";
// and each of those written with JSON string escapes (\/ \" \\ \b \f \n
// \r \t \uXXXX in either case of hex, surrogate pairs included) or with
// percent-escapes (%XX in either case of hex), in any mix. One level of
// escaping is undone: a value escaped twice (%252F, a JSON string inside
// a JSON string holding escapes) is found only where its characters need
// no escape. HTML entities, hex, and encodings other than those are not
// searched for.
//
// Every occurrence is replaced by Marker. In an answer that is
// JSON (as internal/jsontape, which reads it next, judges) the result is
// JSON still: inside a string the marker replaces the
// characters (whole escapes only); a number or literal that holds a
// secret becomes the string "[redacted]"; the quotes, commas and colons a
// match may span are kept.
package redact

import (
	"bytes"
	"encoding/base64"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/toolgate/toolgate/internal/jsontape"
)

const (
	// MinSecretLen is the length, in bytes, below which a secret is not
	// searched for. A value that short cannot be told from ordinary text:
	// a four-digit PIN is a year or a price, a user name like "admin" is
	// a word, and replacing each of their occurrences would wreck
	// answers. Nor is it much of a secret: eight characters is where a
	// credential stops being guessable in a few tries, and every API
	// token and generated password is longer. A short basic user name or
	// password is still covered through "user:password", which is
	// searched (verbatim and as the base64 the header carries) whenever
	// the two together reach this length.
	MinSecretLen = 8

	// Marker replaces each occurrence of a secret.
	Marker = "[redacted]"

	// recentSecrets bounds the values an upstream's credential took at
	// run time (rotated files, OAuth2 tokens) that are still searched for
	// once they are replaced.
	recentSecrets = 8
)

// Needle is one form a secret takes in an answer.
type Needle struct {
	text string
	b    []byte // text
	// tail is what may finish text when text is the base64 of the secret
	// at the start of what was encoded: its last characters and padding
	// ("w==", matched with or without the "="). Replaced with the match
	// when it follows.
	tail string
}

// Text is the needle's form of its secret.
func (n *Needle) Text() string { return n.text }

func newNeedle(text, tail string) Needle { return Needle{text: text, b: []byte(text), tail: tail} }

// AppendNeedles appends the forms of secret that out does not hold yet.
// A secret shorter than MinSecretLen adds nothing.
func AppendNeedles(out []Needle, secret string) []Needle {
	if len(secret) < MinSecretLen {
		return out
	}
	add := func(n Needle) {
		for _, o := range out {
			if o.text == n.text {
				return
			}
		}
		out = append(out, n)
	}
	add(newNeedle(secret, ""))
	if strings.Contains(secret, " ") {
		add(newNeedle(strings.ReplaceAll(secret, " ", "+"), ""))
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
		for align := range 3 {
			add(base64Core(enc, secret, align))
		}
	}
	return out
}

// base64Core is the part of the base64 encoding of any text that holds s
// at a byte offset of align modulo 3 that depends on s alone: the
// characters whose six bits all come from s. At align 0 its tail is the
// rest of the encoding of s on its own (the last characters, padding).
func base64Core(enc *base64.Encoding, s string, align int) Needle {
	buf := make([]byte, align+len(s))
	copy(buf[align:], s)
	full := enc.EncodeToString(buf)
	start := (4*align + 2) / 3 // the first character past the prefix's bits
	end := 8 * (align + len(s)) / 6
	tail := ""
	if align == 0 {
		tail = full[end:]
	}
	return newNeedle(full[start:end], tail)
}

// Matcher finds the needles of a set of secrets in a text, in one pass of
// Wu-Manber: the window is the shortest Needle; the hash of its last two
// bytes says how far the window may move on (no Needle holds those bytes
// nearer its end), and a Needle is compared only where one may end. On
// JSON answers it runs several times faster than a bytes.Index per Needle,
// whose vector code falls back to a slower search when a Needle starts
// with a byte that is common in the text.
type Matcher struct {
	needles []Needle
	m       int                 // the window: the shortest Needle, at most 255 bytes
	shift   *[1 << wmBits]uint8 // by the hash of two bytes
	last    []uint16            // the hash of each Needle's bytes m-2 and m-1
}

// wmBits is the size of the shift table's hash: 4 KiB a Matcher.
const wmBits = 12

func wmHash(a, b byte) uint16 { return (uint16(a)<<5 ^ uint16(b)) & (1<<wmBits - 1) }

// NewMatcher makes the matcher of ns; nil for none.
func NewMatcher(ns []Needle) *Matcher {
	if len(ns) == 0 {
		return nil
	}
	mt := &Matcher{needles: ns}
	m := 255
	for _, n := range ns {
		m = min(m, len(n.b))
	}
	mt.m = m
	mt.shift = new([1 << wmBits]uint8)
	for i := range mt.shift {
		mt.shift[i] = uint8(m - 1)
	}
	mt.last = make([]uint16, len(ns))
	for i, n := range ns {
		for j := 0; j+1 < m; j++ {
			h := wmHash(n.b[j], n.b[j+1])
			mt.shift[h] = min(mt.shift[h], uint8(m-2-j))
		}
		mt.last[i] = wmHash(n.b[m-2], n.b[m-1])
	}
	return mt
}

// find appends the spans of text where a Needle occurs.
func (mt *Matcher) find(found []span, text []byte) []span {
	if mt == nil {
		return found
	}
	m := mt.m
	for pos := m - 1; pos < len(text); {
		h := wmHash(text[pos-1], text[pos])
		if s := mt.shift[h]; s > 0 {
			pos += int(s)
			continue
		}
		start := pos - m + 1
		for i := range mt.needles {
			if n := &mt.needles[i]; mt.last[i] == h && bytes.HasPrefix(text[start:], n.b) {
				found = append(found, span{start, n.extend(text, start+len(n.b))})
			}
		}
		pos++
	}
	return found
}

// Needles are the forms the matcher finds; none for a nil matcher.
func (mt *Matcher) Needles() []Needle {
	if mt == nil {
		return nil
	}
	return mt.needles
}

// Empty says the matcher finds nothing.
func (mt *Matcher) Empty() bool { return mt == nil || len(mt.needles) == 0 }

// span is a range of an answer's bytes, [from, to).
type span struct{ from, to int }

// Bytes returns b with every occurrence of a needle of set or extra
// (either may be nil) replaced by Marker, and the number of
// occurrences. b itself, untouched, is returned when nothing matched.
func Bytes(b []byte, set, extra *Matcher) ([]byte, int) {
	if len(b) < MinSecretLen || set.Empty() && extra.Empty() {
		return b, 0
	}
	var v *escapeView
	text := b
	if first := firstEscape(b); first >= 0 {
		v = escapeViews.Get().(*escapeView)
		defer v.release()
		v.decode(b, first)
		text = v.text
	}
	found := extra.find(set.find(nil, text), text)
	if len(found) == 0 {
		return b, 0
	}
	if v != nil {
		for i := range found {
			found[i] = span{v.origStart(found[i].from), v.origEnd(found[i].to)}
		}
	}
	found = mergeSpans(found)
	if valid, _ := jsontape.Check(b); valid {
		return replaceInJSON(b, found), len(found)
	}
	return replacePlain(b, found), len(found)
}

// String is Bytes for a header value.
func String(s string, set, extra *Matcher) (string, int) {
	if len(s) < MinSecretLen {
		return s, 0
	}
	if !strings.ContainsAny(s, `\%`) && !set.in(s) && !extra.in(s) {
		return s, 0
	}
	out, n := Bytes([]byte(s), set, extra)
	if n == 0 {
		return s, 0
	}
	return string(out), n
}

// in says whether s holds a Needle verbatim.
func (mt *Matcher) in(s string) bool {
	if mt == nil {
		return false
	}
	for i := range mt.needles {
		if strings.Contains(s, mt.needles[i].text) {
			return true
		}
	}
	return false
}

// extend returns the end of a match of n that ends at to, past the base64
// tail that finishes it when it follows (padded or not).
func (n *Needle) extend(text []byte, to int) int {
	if n.tail == "" {
		return to
	}
	// Matches are rare: the tail's forms are made here, not kept.
	rest := string(text[to:min(len(text), to+len(n.tail))])
	if short := strings.TrimRight(n.tail, "="); strings.HasPrefix(rest, short) {
		to += len(short)
		if strings.HasPrefix(rest, n.tail) {
			to += len(n.tail) - len(short)
		}
	}
	return to
}

// mergeSpans sorts spans and joins those that overlap or touch.
func mergeSpans(s []span) []span {
	slices.SortFunc(s, func(a, b span) int { return a.from - b.from })
	out := s[:1]
	for _, sp := range s[1:] {
		last := &out[len(out)-1]
		if sp.from <= last.to {
			last.to = max(last.to, sp.to)
			continue
		}
		out = append(out, sp)
	}
	return out
}

// replacePlain replaces each span of b with the marker.
func replacePlain(b []byte, spans []span) []byte {
	out := make([]byte, 0, len(b)+len(spans)*len(Marker))
	prev := 0
	for _, sp := range spans {
		out = append(out, b[prev:sp.from]...)
		out = append(out, Marker...)
		prev = sp.to
	}
	return append(out, b[prev:]...)
}

// replaceInJSON replaces each span of b, a valid JSON text, so that the
// result is valid JSON: within a string, the span's characters become the
// marker (a span starts and ends on whole escapes: Bytes maps them
// so); a number or literal a span touches becomes the string
// "[redacted]", whole; the quotes and the structure between values (,
// : [ ] { } and white space) are kept. Between spans the text is copied as
// it is, read only for where its strings start and end.
func replaceInJSON(b []byte, spans []span) []byte {
	out := make([]byte, 0, len(b)+len(spans)*(len(Marker)+2))
	inString := false
	i := 0
	for _, sp := range spans {
		if sp.from > i {
			inString = stringStateAfter(b[i:sp.from], inString)
			out = append(out, b[i:sp.from]...)
			i = sp.from
		}
		for i < sp.to {
			switch c := b[i]; {
			case inString:
				j := i
				for j < sp.to && b[j] != '"' {
					if b[j] == '\\' {
						j++
					}
					j++
				}
				out = append(out, Marker...)
				i = j
				if j < sp.to { // the closing quote
					out = append(out, '"')
					inString = false
					i++
				}
			case c == '"':
				out = append(out, c)
				inString = true
				i++
			case isTokenByte(c):
				// The whole number or literal goes, what came of it
				// before the span included.
				for len(out) > 0 && isTokenByte(out[len(out)-1]) {
					out = out[:len(out)-1]
				}
				for i < len(b) && isTokenByte(b[i]) {
					i++
				}
				out = append(out, '"')
				out = append(out, Marker...)
				out = append(out, '"')
			default:
				out = append(out, c)
				i++
			}
		}
	}
	return append(out, b[i:]...)
}

// stringStateAfter says whether a JSON text that is inside a string at
// the start of b (inString) is inside one at its end.
func stringStateAfter(b []byte, inString bool) bool {
	nextQuote, nextSlash := -1, -1 // at or after i, when known
	for i := 0; i < len(b); {
		if nextQuote < i {
			nextQuote = indexFrom(b, i, '"')
		}
		if !inString {
			if nextQuote == len(b) {
				return false
			}
			i, inString = nextQuote+1, true
			continue
		}
		if nextSlash < i {
			nextSlash = indexFrom(b, i, '\\')
		}
		switch {
		case nextSlash < nextQuote:
			i = nextSlash + 2 // an escape: what follows the backslash is no quote
		case nextQuote == len(b):
			return true
		default:
			i, inString = nextQuote+1, false
		}
	}
	return inString
}

// isTokenByte says c belongs to a JSON number or literal (outside a
// string, nothing else does in valid JSON).
func isTokenByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '+' || c == '.'
}

// escapeView is an answer with every JSON string escape and every
// percent-escape undone, one level, and the way back to the answer's
// offsets.
type escapeView struct {
	text  []byte
	marks []escapeMark
}

// escapeMark is one escape: the answer's bytes [orig, orig+origLen) are
// text[at:at+n].
type escapeMark struct {
	at, n, orig, origLen int
}

// escapeViews are the views of the answers that hold escapes.
var escapeViews = sync.Pool{New: func() any { return new(escapeView) }}

// release returns the view to its pool unless it grew past what is worth
// keeping: an answer is at most server.max_response_bytes, 1 MiB by
// default.
func (v *escapeView) release() {
	if cap(v.text) > 4<<20 {
		return
	}
	v.text, v.marks = v.text[:0], v.marks[:0]
	escapeViews.Put(v)
}

// firstEscape is the offset of the first escape in b (a \ or % that
// starts one), or -1: most answers have none, and are searched as they
// are.
func firstEscape(b []byte) int {
	var u [utf8.UTFMax]byte
	nextSlash, nextPct := -1, -1
	for i := 0; i < len(b); {
		if nextSlash < i {
			nextSlash = indexFrom(b, i, '\\')
		}
		if nextPct < i {
			nextPct = indexFrom(b, i, '%')
		}
		j := min(nextSlash, nextPct)
		if j == len(b) {
			return -1
		}
		if _, n := unescape(b[j:], u[:0]); n > 0 {
			return j
		}
		i = j + 1
	}
	return -1
}

// decode fills the view with b unescaped; first is the offset of b's
// first escape. Every \ and % that starts a valid escape is one; any
// other byte is itself.
func (v *escapeView) decode(b []byte, first int) {
	text, marks := v.text[:0], v.marks[:0]
	if cap(text) < len(b) {
		text = make([]byte, 0, len(b)) // what decodes is never longer
	}
	text = append(text, b[:first]...)
	var u [utf8.UTFMax]byte
	nextSlash, nextPct := -1, -1 // the next \ and % at or after i, when known
	for i := first; i < len(b); {
		if nextSlash < i {
			nextSlash = indexFrom(b, i, '\\')
		}
		if nextPct < i {
			nextPct = indexFrom(b, i, '%')
		}
		j := min(nextSlash, nextPct)
		if j == len(b) {
			text = append(text, b[i:]...)
			break
		}
		text = append(text, b[i:j]...)
		dec, n := unescape(b[j:], u[:0])
		if n == 0 {
			text = append(text, b[j])
			i = j + 1
			continue
		}
		marks = append(marks, escapeMark{at: len(text), n: len(dec), orig: j, origLen: n})
		text = append(text, dec...)
		i = j + n
	}
	v.text, v.marks = text, marks
}

// indexFrom is the index of c in b at or after i, or len(b).
func indexFrom(b []byte, i int, c byte) int {
	if k := bytes.IndexByte(b[i:], c); k >= 0 {
		return i + k
	}
	return len(b)
}

// unescape decodes the escape b starts with into dst: the bytes it
// stands for and its length, or n=0 when b does not start with one.
func unescape(b, dst []byte) ([]byte, int) {
	if len(b) < 2 {
		return dst, 0
	}
	if b[0] == '%' {
		if len(b) >= 3 && unhex(b[1]) < 16 && unhex(b[2]) < 16 {
			return append(dst, unhex(b[1])<<4|unhex(b[2])), 3
		}
		return dst, 0
	}
	switch b[1] {
	case '"', '\\', '/':
		return append(dst, b[1]), 2
	case 'b':
		return append(dst, '\b'), 2
	case 'f':
		return append(dst, '\f'), 2
	case 'n':
		return append(dst, '\n'), 2
	case 'r':
		return append(dst, '\r'), 2
	case 't':
		return append(dst, '\t'), 2
	case 'u':
		r, ok := hex4(b[2:])
		if !ok {
			return dst, 0
		}
		if utf16.IsSurrogate(r) {
			if len(b) < 12 || b[6] != '\\' || b[7] != 'u' {
				return dst, 0
			}
			r2, ok := hex4(b[8:])
			r = utf16.DecodeRune(r, r2)
			if !ok || r == utf8.RuneError {
				return dst, 0
			}
			return utf8.AppendRune(dst, r), 12
		}
		return utf8.AppendRune(dst, r), 6
	}
	return dst, 0
}

// hex4 reads four hex digits.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		if unhex(c) >= 16 {
			return 0, false
		}
		r = r<<4 | rune(unhex(c))
	}
	return r, true
}

// mark returns the index of the last mark at or before text offset at,
// or -1.
func (v *escapeView) mark(at int) int {
	i, _ := slices.BinarySearchFunc(v.marks, at, func(m escapeMark, at int) int { return m.at - at })
	if i < len(v.marks) && v.marks[i].at == at {
		return i
	}
	return i - 1
}

// origStart is the answer's offset of the byte at text offset at: the
// start of its escape when it came of one.
func (v *escapeView) origStart(at int) int {
	i := v.mark(at)
	if i < 0 {
		return at
	}
	m := v.marks[i]
	if at < m.at+m.n {
		return m.orig
	}
	return m.orig + m.origLen + at - m.at - m.n
}

// origEnd is the answer's offset just past the byte before text offset
// end: past its escape when it came of one.
func (v *escapeView) origEnd(end int) int {
	i := v.mark(end - 1)
	if i < 0 {
		return end
	}
	m := v.marks[i]
	if end-1 < m.at+m.n {
		return m.orig + m.origLen
	}
	return m.orig + m.origLen + end - m.at - m.n
}

// IdentityHeader says whether a forwarded header carries a credential,
// whose value is then a secret of the call: Authorization,
// Proxy-Authorization, Cookie, and names that say so.
func IdentityHeader(name string) bool {
	n := strings.ToLower(name)
	for _, w := range []string{"auth", "cookie", "token", "key", "secret", "session", "password", "credential"} {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}

// AppendHeaderSecrets appends the needles of a credential header's value:
// the credential after its scheme (or the whole value without one), a
// Basic credential's "user:password" (whose base64 is the credential),
// user and password, and each cookie's value.
func AppendHeaderSecrets(out []Needle, name, value string) []Needle {
	value = strings.TrimSpace(value)
	if strings.EqualFold(name, "Cookie") {
		out = AppendNeedles(out, value)
		for c := range strings.SplitSeq(value, ";") {
			if _, v, ok := strings.Cut(c, "="); ok {
				out = AppendNeedles(out, strings.Trim(strings.TrimSpace(v), `"`))
			}
		}
		return out
	}
	scheme, cred, ok := strings.Cut(value, " ")
	if !ok {
		return AppendNeedles(out, value)
	}
	cred = strings.TrimSpace(cred)
	if strings.EqualFold(scheme, "Basic") {
		if raw, err := base64.StdEncoding.DecodeString(cred); err == nil && len(raw) >= MinSecretLen {
			user, pass, _ := strings.Cut(string(raw), ":")
			out = AppendNeedles(out, string(raw))
			out = AppendNeedles(out, user)
			return AppendNeedles(out, pass)
		}
	}
	return AppendNeedles(out, cred)
}

// SecretSet is what an upstream's credential is made of: the values
// written in the policy, and the ones it took at run time (files as read,
// OAuth2 tokens as issued), the most recent recentSecrets of them. It
// outlives reloads with the upstream's auth. gen changes with every new
// value, so the redactors built from the set know when to be built again.
type SecretSet struct {
	mu      sync.Mutex
	static  []string
	recent  []string // oldest first
	needles atomic.Pointer[[]Needle]
	gen     atomic.Uint64
}

// AddStatic adds values that stay for the set's life.
func (s *SecretSet) AddStatic(values ...string) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, v := range values {
		if len(v) >= MinSecretLen && !slices.Contains(s.static, v) {
			s.static = append(s.static, v)
		}
	}
	s.rebuild()
}

// Add adds a value the credential took at run time. Cheap when the value
// is known already, as it is on every call but the first after a change.
func (s *SecretSet) Add(v string) {
	if s == nil || len(v) < MinSecretLen {
		return
	}
	if p := s.needles.Load(); p != nil && len(*p) > 0 && s.known(v) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if slices.Contains(s.static, v) || slices.Contains(s.recent, v) {
		return
	}
	if len(s.recent) == recentSecrets {
		s.recent = slices.Delete(s.recent, 0, 1)
	}
	s.recent = append(s.recent, v)
	s.rebuild()
}

// known says whether v is one of the set's values; the needles' first
// forms are the values verbatim.
func (s *SecretSet) known(v string) bool {
	for _, n := range *s.needles.Load() {
		if n.text == v {
			return true
		}
	}
	return false
}

// rebuild makes the set's needles anew. s.mu is held.
func (s *SecretSet) rebuild() {
	var ns []Needle
	for _, v := range s.static {
		ns = AppendNeedles(ns, v)
	}
	for _, v := range s.recent {
		ns = AppendNeedles(ns, v)
	}
	s.needles.Store(&ns)
	s.gen.Add(1)
}

// Current returns the set's needles and their generation; none for a nil
// set.
func (s *SecretSet) Current() ([]Needle, uint64) {
	if s == nil {
		return nil, 0
	}
	gen := s.gen.Load()
	p := s.needles.Load()
	if p == nil {
		return nil, gen
	}
	return *p, gen
}

// Header replaces the secrets in a header's values. The header is
// copied before it is changed: it may be shared.
func Header(h *http.Header, set, extra *Matcher) int {
	n := 0
	var out http.Header
	for k, vs := range *h {
		for i, v := range vs {
			r, m := String(v, set, extra)
			if m == 0 {
				continue
			}
			if out == nil {
				out = h.Clone()
			}
			out[k][i] = r
			n += m
		}
	}
	if out != nil {
		*h = out
	}
	return n
}

// unhex is the value of a hex digit, or 16 for any other byte.
func unhex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10
	}
	return 16
}
