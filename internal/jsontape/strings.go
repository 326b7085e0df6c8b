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
// continuation byte (lead3) but 0xe2, which leads those two, and two
// continuation bytes.
func threeByteRune(s string, i int) bool {
	c := s[i]
	return lead3[c] && c != 0xe2 && i+2 < len(s) && s[i+1]&0xc0 == 0x80 && s[i+2]&0xc0 == 0x80
}

// unplainBytes has the high bit set in each byte of x that a JSON string
// does not hold as it is (not marked in plain): the bytes that end a plain
// run of text (plainFlags: a control byte, a quote, a backslash) and the
// bytes past ASCII. The lowest flagged byte of each is exact, so the
// lowest of both is too.
func unplainBytes(x uint64) uint64 {
	return plainFlags(x) | x&0x8080808080808080
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
// strings past ASCII: eight ASCII bytes at a time, the ASCII bytes that
// open a word skipped at once, and two- and three-byte sequences whose
// lead byte admits any continuation byte (Latin, Greek, Cyrillic, Arabic,
// Hebrew; CJK and most of the rest of the BMP) checked in place, three
// three-byte sequences at once where they follow each other (threes). It
// takes under half of utf8.Valid's time on Chinese text
// (BenchmarkValidUTF8), which utf8.Valid decodes a rune at a time through
// its tables. Any other sequence is decoded by utf8.DecodeRune.
func validUTF8(p []byte) bool {
	const highs = 0x8080808080808080
	for i := 0; i < len(p); {
		if len(p)-i >= 8 {
			high := binary.LittleEndian.Uint64(p[i:]) & highs
			if high == 0 {
				i += 8
				continue
			}
			// Up to the first byte past ASCII.
			i += bits.TrailingZeros64(high) >> 3
		} else if p[i] < utf8.RuneSelf {
			i++
			continue
		}
		c := p[i]
		if lead3[c] && len(p)-i >= 3 {
			if t := threes(p[i:]); len(t) < len(p)-i {
				i = len(p) - len(t)
				continue
			}
			if p[i+1]&0xC0 != 0x80 || p[i+2]&0xC0 != 0x80 {
				return false
			}
			i += 3
			continue
		}
		if c >= 0xC2 && c <= 0xDF && len(p)-i >= 2 {
			if p[i+1]&0xC0 != 0x80 {
				return false
			}
			i += 2
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

// threes returns what follows the run of three-byte sequences at the
// start of p (Chinese, Japanese text), read three sequences, nine bytes, at
// a time. The test is one word's for the second and third bytes of the
// sequences and the high nibble of their leads (E), and the ninth byte,
// then one for the leads' low nibbles, which must be neither 0 (E0 admits
// only A0 to BF after it) nor D (ED only 80 to 9F): a lead E1 to EF but ED
// admits any continuation bytes. What it does not take, validUTF8 reads
// as any other bytes.
func threes(p []byte) []byte {
	const (
		mask = 0xc0_f0_c0_c0_f0_c0_c0_f0
		want = 0x80_e0_80_80_e0_80_80_e0
		lows = 0x00_0f_00_00_0f_00_00_0f // the leads' low nibbles
		ds   = 0x00_0d_00_00_0d_00_00_0d
		tens = 0x00_10_00_00_10_00_00_10 // set in each lead's byte by a low nibble of one or more plus lows
	)
	for len(p) >= 9 {
		x := binary.LittleEndian.Uint64(p)
		low := x & lows
		if x&mask != want || p[8]&0xC0 != 0x80 || (low+lows)&tens != tens || ((low^ds)+lows)&tens != tens {
			break
		}
		p = p[9:]
	}
	return p
}

// lead3 marks the bytes that lead a three-byte sequence admitting any
// continuation bytes: E1 to EF but not ED (whose second byte must be below
// A0, leaving out the surrogates); E0's second byte must be A0 or more.
var lead3 = func() (t [256]bool) {
	for c := 0xE1; c <= 0xEF; c++ {
		t[c] = c != 0xED
	}
	return t
}()
