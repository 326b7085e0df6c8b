package jsontape

import (
	"encoding/binary"
	"math/bits"
	"unicode/utf16"
	"unicode/utf8"
)

// AppendString appends s as a JSON string, as encoding/json writes it
// without HTML escaping: invalid UTF-8 becomes U+FFFD, so the output is
// always valid JSON and valid UTF-8, and U+2028 and U+2029 are escaped.
func AppendString(dst []byte, s string) []byte { return appendString(dst, s, &plain, false) }

// AppendHTMLString appends s as a JSON string, as json.Marshal writes it
// (with HTML escaping): as AppendString, and <, > and & as \u003c,
// \u003e and \u0026.
func AppendHTMLString(dst []byte, s string) []byte { return appendString(dst, s, &plainHTML, true) }

// appendString appends s as a JSON string, escaping the ASCII bytes not
// marked in asIs as \u00XX (or shorter where JSON has a shorter escape).
// html says asIs is plainHTML. It runs on every string of every envelope,
// an observation of a kilobyte or more among them, so the text that needs
// nothing is stepped over eight bytes at a time and a two- or three-byte
// sequence that is certainly valid (and not U+2028 or U+2029) is stepped
// over without decoding it. FuzzAppendString and
// TestAppendStringEveryByteEverywhere hold the result to encoding/json's.
func appendString(dst []byte, s string, asIs *[256]bool, html bool) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		// Bytes that need nothing are stepped over, eight at a time
		// while eight are left, and copied by the append of the next
		// escape or the last one.
		if i+8 <= len(s) {
			x := stringWord(s[i : i+8])
			flagged := unplainBytes(x)
			if html {
				flagged |= htmlBytes(x)
			}
			if flagged == 0 {
				i += 8
				continue
			}
			// The lowest flagged byte is a true one (see
			// unplainBytes); those above it are read again.
			i += bits.TrailingZeros64(flagged) >> 3
		} else if asIs[s[i]] {
			i++
			continue
		}
		c := s[i]
		if c < utf8.RuneSelf {
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		// Two- and three-byte sequences whose lead byte admits any
		// continuation byte are valid when their continuation bytes are;
		// 0xe2 leads U+2028 and U+2029, so it is decoded below.
		if c >= 0xc2 && c <= 0xdf && i+1 < len(s) && s[i+1]&0xc0 == 0x80 {
			i += 2
			continue
		}
		if threeByteRune(s, i) {
			// Text past ASCII comes in runs (a sentence in Chinese).
			for i += 3; i < len(s) && threeByteRune(s, i); i += 3 {
			}
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			start = i + size
		case r == '\u2028' || r == '\u2029':
			// Valid JSON, but they break JavaScript embedding;
			// encoding/json escapes them too.
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&0xf])
			start = i + size
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// stringWord is the eight bytes of s (len(s) == 8) as a little-endian word;
// the compiler loads it at once.
func stringWord(s string) uint64 {
	_ = s[7]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

// threeByteRune reports whether s holds at i a three-byte sequence that
// is certainly valid and not U+2028 or U+2029: a lead byte that admits any
// continuation byte (0xe2, which leads those two, is left out) and two
// continuation bytes.
func threeByteRune(s string, i int) bool {
	c := s[i]
	return (c >= 0xe3 && c <= 0xec || c == 0xe1 || c == 0xee || c == 0xef) && i+2 < len(s) &&
		s[i+1]&0xc0 == 0x80 && s[i+2]&0xc0 == 0x80
}

// unplainBytes has the high bit set in each byte of x that a JSON string
// does not hold as it is (not marked in plain): a control byte, a quote,
// a backslash, a byte past ASCII. The borrows of the subtractions may also
// flag a byte above a flagged one, never below, so the lowest flagged byte
// is always a true one.
func unplainBytes(x uint64) uint64 {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	quote, backslash := x^(ones*'"'), x^(ones*'\\')
	flagged := (x - ones*0x20) &^ x
	flagged |= (quote - ones) &^ quote
	flagged |= (backslash - ones) &^ backslash
	return (flagged | x) & highs
}

// htmlBytes flags, as unplainBytes does, the bytes of x that plainHTML
// adds: <, > and &.
func htmlBytes(x uint64) uint64 {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	lt, gt, amp := x^(ones*'<'), x^(ones*'>'), x^(ones*'&')
	return ((lt-ones)&^lt | (gt-ones)&^gt | (amp-ones)&^amp) & highs
}

// PlainASCII reports whether every byte of b is printable ASCII other than
// a quote or a backslash: text a JSON string holds as it is, one character
// a byte, that AppendString copies unchanged. It reads eight bytes at a
// time.
func PlainASCII(b []byte) bool {
	const highs = 0x8080808080808080
	i := 0
	for ; i+8 <= len(b); i += 8 {
		if x := binary.LittleEndian.Uint64(b[i:]); x&highs != 0 || !plainWord(x) {
			return false
		}
	}
	for ; i < len(b); i++ {
		if !plain[b[i]] {
			return false
		}
	}
	return true
}

// plain marks the ASCII bytes a JSON string holds as they are.
var plain = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// plainHTML is plain without the bytes json.Marshal escapes for HTML.
var plainHTML = func() (t [256]bool) {
	t = plain
	t['<'], t['>'], t['&'] = false, false, false
	return t
}()

// unescape decodes the inside of a JSON string the parser has checked, as
// encoding/json does: a lone or broken surrogate escape and an invalid
// UTF-8 byte each become U+FFFD.
//
// It is JSON's grammar only. The quoted form of an Idempotency-Key header
// is an HTTP structured-field string (RFC 8941), a different grammar that
// proxy reads itself: only \" and \\ are escapes there, and \n or \u0041,
// valid here, must be refused.
func unescape(s []byte) string {
	b := make([]byte, 0, len(s))
	for r := 0; r < len(s); {
		c := s[r]
		switch {
		case c == '\\' && r+1 < len(s):
			r++
			switch e := s[r]; e {
			case 'b':
				b = append(b, '\b')
			case 'f':
				b = append(b, '\f')
			case 'n':
				b = append(b, '\n')
			case 'r':
				b = append(b, '\r')
			case 't':
				b = append(b, '\t')
			case 'u':
				rr := hex4(s[r+1:])
				r += 5
				if utf16.IsSurrogate(rr) {
					if r+1 < len(s) && s[r] == '\\' && s[r+1] == 'u' {
						if dec := utf16.DecodeRune(rr, hex4(s[r+2:])); dec != utf8.RuneError {
							b = utf8.AppendRune(b, dec)
							r += 6
							continue
						}
					}
					rr = utf8.RuneError
				}
				b = utf8.AppendRune(b, rr)
				continue
			default: // " \ /
				b = append(b, e)
			}
			r++
		case c < utf8.RuneSelf:
			b = append(b, c)
			r++
		default:
			rr, size := utf8.DecodeRune(s[r:])
			b = utf8.AppendRune(b, rr)
			r += size
		}
	}
	return string(b)
}

// hex4 reads four hex digits; -1 when they are not.
func hex4(s []byte) rune {
	if len(s) < 4 {
		return -1
	}
	var r rune
	for _, c := range s[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return -1
		}
		r = r*16 + rune(c)
	}
	return r
}

// validUTF8 reports whether p is valid UTF-8, as utf8.Valid does
// (FuzzValidUTF8 holds them equal), with fast paths for the text of
// strings past ASCII: eight ASCII bytes at a time, and two- and three-byte
// sequences whose lead byte admits any continuation byte (Latin, Greek,
// Cyrillic, Arabic, Hebrew; CJK and most of the rest of the BMP) checked
// in place, three three-byte sequences at once where they follow each
// other. It takes about a third to a half of utf8.Valid's time on Chinese
// text (BenchmarkValidUTF8), which utf8.Valid decodes a rune at a time
// through its tables. Any other sequence is decoded by utf8.DecodeRune.
func validUTF8(p []byte) bool {
	const highs = 0x8080808080808080
	for i := 0; i < len(p); {
		c := p[i]
		switch {
		case c < utf8.RuneSelf:
			if i+8 <= len(p) && binary.LittleEndian.Uint64(p[i:])&highs == 0 {
				i += 8
			} else {
				i++
			}
			continue
		case c >= 0xC2 && c <= 0xDF && i+1 < len(p):
			if p[i+1]&0xC0 != 0x80 {
				return false
			}
			i += 2
			continue
		case lead3(c) && i+2 < len(p):
			// Three such sequences in a row (Chinese, Japanese text)
			// take one word's test for their continuation bytes.
			const conts, want = 0xc0_00_c0_c0_00_c0_c0_00, 0x80_00_80_80_00_80_80_00
			if i+9 <= len(p) && binary.LittleEndian.Uint64(p[i:])&conts == want && p[i+8]&0xC0 == 0x80 && lead3(p[i+3]) && lead3(p[i+6]) {
				i += 9
				continue
			}
			if p[i+1]&0xC0 != 0x80 || p[i+2]&0xC0 != 0x80 {
				return false
			}
			i += 3
			continue
		}
		r, size := utf8.DecodeRune(p[i:])
		if r == utf8.RuneError && size == 1 {
			return false
		}
		i += size
	}
	return true
}

// lead3 reports whether c leads a three-byte sequence that admits any
// continuation bytes: not E0 (whose second byte must be A0 or more) nor ED
// (whose second byte must be below A0, leaving out the surrogates).
func lead3(c byte) bool { return c >= 0xE1 && c <= 0xEC || c == 0xEE || c == 0xEF }
