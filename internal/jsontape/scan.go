package jsontape

import "bytes"

// This file reads JSON a value at a time without a tape, for readers that
// want a few values of a large document and only the extent of the rest
// (the observation's shrink tree). It trusts its input: the document must
// be one that Parse accepts (as every envelope's data is). On other input
// it returns -1 where it notices, and never reads out of bounds, but it
// does not promise to notice.

// SkipValue returns the index just past the value that starts at src[i],
// at nesting depth depth (0 for the document's root), or -1 when the value
// is cut short or nests MaxDepth deep, as Parse refuses it. White space is
// not skipped: src must be compact.
func SkipValue(src []byte, i, depth int) int {
	if i >= len(src) {
		return -1
	}
	switch src[i] {
	case '"':
		if end := StringEnd(src, i+1); end >= 0 {
			return end + 1
		}
		return -1
	case '[', '{':
	default:
		// A number or keyword runs to the next delimiter.
		j := i
		for j < len(src) && src[j] != ',' && src[j] != ']' && src[j] != '}' {
			j++
		}
		if j == i {
			return -1
		}
		return j
	}
	open := 0
	for i < len(src) {
		switch src[i] {
		case '"':
			end := StringEnd(src, i+1)
			if end < 0 {
				return -1
			}
			i = end + 1
			continue
		case '[', '{':
			if depth+open >= MaxDepth {
				return -1
			}
			open++
		case ']', '}':
			open--
			if open == 0 {
				return i + 1
			}
		}
		i++
	}
	return -1
}

// StringEnd returns the index of the quote that closes the string whose
// text starts at src[i] (just after its opening quote), or -1.
func StringEnd(src []byte, i int) int {
	for {
		j := bytes.IndexByte(src[i:], '"')
		if j < 0 {
			return -1
		}
		j += i
		// The quote is escaped when an odd run of backslashes ends
		// before it.
		k := j
		for k > i && src[k-1] == '\\' {
			k--
		}
		if (j-k)%2 == 0 {
			return j
		}
		i = j + 1
	}
}

// Unescape decodes the text of a string Parse accepted (the bytes between
// its quotes) as Value.Text does: a lone or broken surrogate escape and an
// invalid UTF-8 byte each become U+FFFD.
func Unescape(text []byte) string { return unescape(text) }
