package contracts

import (
	"bytes"
	"strings"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Dot segments. RFC 3986 makes "%2E%2E" the same segment as "..", and
// servers resolve it so: behind nginx, /reports/{year}/{name} with year
// ".." and name "admin" reaches /admin whether toolgate sends ".." or
// "%2E%2E". Escaping cannot keep such a value in its segment; only refusing
// it can. A path argument is refused when the segment it makes could read
// as "." or ".." to any server on the way, which may:
//
//   - decode percent-escapes in either case, and again (a proxy, then the
//     application): "%2e%2E", "%252e%252e";
//   - decode IIS's %uXXXX form: "%u002e%u002e";
//   - treat an encoded slash or backslash as a separator, so one piece of
//     the segment is the dot segment: "../admin" is sent as "..%2Fadmin";
//   - strip a ;parameter (Tomcat, Spring) or stop at a NUL: "..;x", "..%00";
//   - drop trailing spaces (Windows): ".. ";
//   - read overlong UTF-8 as ASCII ("%c0%ae") or normalise Unicode
//     compatibility forms (NFKC) before routing: "．．" (U+FF0E), "‥"
//     (U+2025), "／" for a slash.

// maxDecodeRounds is how many percent-decodings of the segment toolgate
// sends are looked through: the backend's own and three more by layers
// that decode again.
const maxDecodeRounds = 4

// readsAsDotSegment reports whether a path segment as sent (escaped, one
// segment) could be read as "." or ".." by a server, in the ways the
// comment above lists.
func readsAsDotSegment(escaped []byte) bool {
	if !mayHoldDot(escaped) {
		return false
	}
	if bytes.IndexByte(escaped, '%') < 0 {
		return string(escaped) == "." || string(escaped) == ".."
	}
	s := string(escaped)
	for range maxDecodeRounds {
		next := laxUnescape(s)
		if next == s {
			return false
		}
		s = next
		if hasDotPiece(s) {
			return true
		}
		if !isASCII(s) && (hasDotPiece(laxOverlong(s)) || hasDotPiece(norm.NFKC.String(s))) {
			return true
		}
	}
	return false
}

// mayHoldDot reports whether an escaped segment has something that may
// decode to a dot: a dot, an escaped dot, an escaped percent sign (a
// second decoding), a %u escape, or an escaped byte outside ASCII (an
// overlong form, a compatibility character). Most values have none, and
// are passed without decoding.
func mayHoldDot(escaped []byte) bool {
	for i, c := range escaped {
		switch {
		case c == '.':
			return true
		case c != '%' || i+1 >= len(escaped):
		case escaped[i+1] == 'u' || escaped[i+1] == 'U' || escaped[i+1] >= '8':
			return true
		case escaped[i+1] == '2' && i+2 < len(escaped):
			if d := escaped[i+2]; d == 'e' || d == 'E' || d == '5' {
				return true
			}
		}
	}
	return false
}

// hasDotPiece reports whether s, split at slashes and backslashes, has a
// piece that is "." or ".." once a ;parameter, anything after a NUL and
// trailing spaces are removed.
func hasDotPiece(s string) bool {
	for len(s) > 0 {
		end := strings.IndexAny(s, `/\`)
		piece := s
		if end >= 0 {
			piece, s = s[:end], s[end+1:]
		} else {
			s = ""
		}
		if i := strings.IndexAny(piece, ";\x00"); i >= 0 {
			piece = piece[:i]
		}
		piece = strings.TrimRight(piece, " ")
		if piece == "." || piece == ".." {
			return true
		}
	}
	return false
}

// laxUnescape decodes every %XX (either case) and %uXXXX escape of s, and
// leaves anything else, malformed escapes included, as it is.
func laxUnescape(s string) string {
	i := strings.IndexByte(s, '%')
	if i < 0 {
		return s
	}
	b := make([]byte, 0, len(s))
	b = append(b, s[:i]...)
	for ; i < len(s); i++ {
		c := s[i]
		if c != '%' {
			b = append(b, c)
			continue
		}
		if i+2 < len(s) && unhexByte(s[i+1]) < 16 && unhexByte(s[i+2]) < 16 {
			b = append(b, unhexByte(s[i+1])<<4|unhexByte(s[i+2]))
			i += 2
			continue
		}
		if i+5 < len(s) && (s[i+1] == 'u' || s[i+1] == 'U') {
			r, ok := rune(0), true
			for _, h := range []byte(s[i+2 : i+6]) {
				d := unhexByte(h)
				ok = ok && d < 16
				r = r<<4 | rune(d)
			}
			if ok {
				b = utf8.AppendRune(b, r)
				i += 5
				continue
			}
		}
		b = append(b, c)
	}
	return string(b)
}

// laxOverlong replaces the overlong UTF-8 forms of ASCII characters (two
// bytes C0 or C1 and a continuation byte, three bytes E0, 80 or 81 and a
// continuation byte) by the character, as lax decoders read them.
func laxOverlong(s string) string {
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case (c == 0xC0 || c == 0xC1) && i+1 < len(s) && s[i+1]&0xC0 == 0x80:
			b = append(b, (c&0x1F)<<6|s[i+1]&0x3F)
			i++
		case c == 0xE0 && i+2 < len(s) && (s[i+1] == 0x80 || s[i+1] == 0x81) && s[i+2]&0xC0 == 0x80:
			b = append(b, (s[i+1]&0x3F)<<6|s[i+2]&0x3F)
			i += 2
		default:
			b = append(b, c)
		}
	}
	return string(b)
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// unhexByte is the value of a hex digit, or 16 for any other byte.
func unhexByte(c byte) byte {
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
