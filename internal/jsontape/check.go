package jsontape

import (
	"encoding/binary"
	"math/bits"
)

// This file holds the checker: the reading of a value that records
// nothing, for the containers of a large document that get no nodes (the
// records of a lazy tape) and for Check. It is one loop over the bytes
// with the open containers on a stack of bits, where the parser that makes
// nodes calls a function per value and recurses per container: on a
// record of short strings, the calls cost more than the bytes. It accepts
// and refuses exactly what the parser does, nesting bound included, with
// the same error (FuzzChecker holds it to the parser reading without
// nodes, and FuzzLazyTape and FuzzParse to the tape and to encoding/json).

// skip checks the value at p.i, at nesting depth depth, moves p.i past it
// and returns the number of its elements or members (0 for a scalar). As
// the parser does, it clears p.compact at white space between tokens and
// sets p.invalid at a string that is not valid UTF-8.
func (p *parser) skip(depth int) (count int32, err error) {
	s := p.src
	i := p.i
	// objects has bit l set when the container open at level l (the
	// first one open being level 0) is an object; open counts them, and
	// object is the bit of the innermost.
	var objects [MaxDepth/64 + 1]uint64
	open := 0
	object := false
	// key: the token at s[i] must be a member's key.
	key := false
	for {
		if i >= len(s) {
			return 0, ErrSyntax
		}
		switch c := s[i]; {
		case c == '"':
			i++
			start := i
			var pastASCII bool
			if len(s)-i >= 8 {
				// Keys and identifiers are mostly shorter than a
				// word: the first word is tested here, without the
				// call (which saves and restores every register of
				// this loop) nor a loop (whose every turn would
				// reload them).
				x := binary.LittleEndian.Uint64(s[i:])
				if hit := plainFlags(x); hit != 0 {
					n := bits.TrailingZeros64(hit) >> 3
					pastASCII = x&(1<<(8*n)-1)&0x8080808080808080 != 0
					i += n
				} else {
					i, pastASCII = plainRun(s, i+8)
					pastASCII = pastASCII || x&0x8080808080808080 != 0
				}
			} else {
				i, pastASCII = plainRun(s, i)
			}
			if i >= len(s) || s[i] != '"' {
				// An escape, a control character, or the last bytes
				// of the document: the rest of the text a byte at a
				// time.
				end, high8, _ := stringEnd(s, i)
				if end < 0 {
					return 0, ErrSyntax
				}
				i, pastASCII = end, pastASCII || high8
			}
			if pastASCII && !p.invalid && !validUTF8(s[start:i]) {
				p.invalid = true
			}
			i++
			if key {
				if i < len(s) && s[i] <= ' ' {
					i = p.space(i)
				}
				if i >= len(s) || s[i] != ':' {
					return 0, ErrSyntax
				}
				i++
				if i < len(s) && s[i] <= ' ' {
					i = p.space(i)
				}
				key = false
				continue
			}
		case key:
			return 0, ErrSyntax
		case c == '{' || c == '[':
			if depth+open >= MaxDepth {
				return 0, ErrSyntax
			}
			i++
			if i < len(s) && s[i] <= ' ' {
				i = p.space(i)
			}
			if i < len(s) && s[i] == c+2 {
				// Empty: '[' + 2 is ']', '{' + 2 is '}'.
				i++
				break
			}
			word, bit := open>>6, uint64(1)<<(open&63)
			object = c == '{'
			if object {
				objects[word] |= bit
			} else {
				objects[word] &^= bit
			}
			key = object
			open++
			continue
		case c == '-' || c >= '0' && c <= '9':
			if i = numberEnd(s, i); i < 0 {
				return 0, ErrSyntax
			}
		case c == 't':
			if i = literalEnd(s, i, "true"); i < 0 {
				return 0, ErrSyntax
			}
		case c == 'f':
			if i = literalEnd(s, i, "false"); i < 0 {
				return 0, ErrSyntax
			}
		case c == 'n':
			if i = literalEnd(s, i, "null"); i < 0 {
				return 0, ErrSyntax
			}
		default:
			return 0, ErrSyntax
		}
		// A value ended at s[i]: take the commas and closers after it
		// until the next value starts.
		for {
			if open == 0 {
				p.i = i
				return count, nil
			}
			if open == 1 {
				count++
			}
			if i < len(s) && s[i] <= ' ' {
				i = p.space(i)
			}
			if i >= len(s) {
				return 0, ErrSyntax
			}
			c := s[i]
			if c == ',' {
				i++
				if i < len(s) && s[i] <= ' ' {
					i = p.space(i)
				}
				key = object
				break
			}
			if object && c != '}' || !object && c != ']' {
				return 0, ErrSyntax
			}
			i++
			open--
			if open > 0 {
				object = objects[(open-1)>>6]>>((open-1)&63)&1 != 0
			}
		}
	}
}

// space returns the index of the first byte at or after s[i] that is not
// JSON's white space, clearing p.compact when there was any.
func (p *parser) space(i int) int {
	s := p.src
	start := i
	for i < len(s) && isSpace(s[i]) {
		i++
	}
	if i != start {
		p.compact = false
	}
	return i
}

// stringEnd reads the text of a string from s[i] (just past its opening
// quote, or any byte of its text after which nothing was checked), escapes
// included, and returns the index of its closing quote (-1 when the string
// is not one JSON admits), whether any byte it read is past ASCII, and
// whether it read an escape.
func stringEnd(s []byte, i int) (end int, high8, escaped bool) {
	// high gathers the bytes read, to tell whether any is past ASCII.
	var high uint64
	for {
		// Plain string bytes are the common case: skip them eight at a
		// time, then one at a time up to the byte that ends the run.
		for i+8 <= len(s) {
			x := binary.LittleEndian.Uint64(s[i:])
			if !plainWord(x) {
				break
			}
			high |= x
			i += 8
		}
		for i < len(s) && s[i] >= 0x20 && s[i] != '"' && s[i] != '\\' {
			high |= uint64(s[i])
			i++
		}
		if i >= len(s) {
			return -1, false, false
		}
		c := s[i]
		switch {
		case c == '"':
			return i, high&0x8080808080808080 != 0, escaped
		case c == '\\':
			escaped = true
			if i+1 >= len(s) {
				return -1, false, false
			}
			switch s[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(s) {
					return -1, false, false
				}
				for _, h := range s[i+2 : i+6] {
					if !(h >= '0' && h <= '9' || h >= 'a' && h <= 'f' || h >= 'A' && h <= 'F') {
						return -1, false, false
					}
				}
				i += 6
			default:
				return -1, false, false
			}
		default: // a control character
			return -1, false, false
		}
	}
}

// numberEnd returns the index just past the number that starts at s[i]
// (a minus sign or a digit), or -1 when it is not one in JSON's grammar.
func numberEnd(s []byte, i int) int {
	if s[i] == '-' {
		i++
	}
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case i < len(s) && s[i] >= '1' && s[i] <= '9':
		i = digits(s, i)
	default:
		return -1
	}
	if i < len(s) && s[i] == '.' {
		d := i + 1
		if i = digits(s, d); i == d {
			return -1
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		d := i
		if i = digits(s, d); i == d {
			return -1
		}
	}
	return i
}

// literalEnd returns the index just past word at s[i], or -1 when s does
// not hold it there.
func literalEnd(s []byte, i int, word string) int {
	if len(s)-i < len(word) || string(s[i:i+len(word)]) != word {
		return -1
	}
	return i + len(word)
}

// plainFlags flags, in the high bit of each byte, the bytes of x that end
// a plain run of a string's text: a control character, a quote or a
// backslash. The lowest flagged byte is exact (a borrow runs only
// upwards, from a flagged byte); those above it may not be. x ^ 0x02 in
// each byte maps the quote (0x22) to 0x20 and the control characters onto
// themselves, and no other byte below 0x21, so one subtraction finds
// both; the backslash is the byte that x ^ 0x5C makes zero. Neither xor
// touches the high bit, so the bytes past ASCII are cleared for both at
// once by &^ x.
func plainFlags(x uint64) uint64 {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	quoteOrControl := x ^ (ones * 0x02)
	backslash := x ^ (ones * '\\')
	return ((quoteOrControl - ones*0x21) | (backslash - ones)) &^ x & highs
}

// plainRun returns the index of the first byte at or after s[i] that ends
// a plain run of a string's text (a quote, a backslash, a control
// character), or one within the last eight bytes of s, and whether any
// byte before it is past ASCII. It reads sixteen bytes a turn while the
// text runs on, then eight at a time; the lowest byte plainFlags flags is
// exact. It is a function of its own, not a loop of the checker's: the
// checker holds more values than there are registers, and Go's register
// allocator would reload them on every turn of a loop inside it.
func plainRun(s []byte, i int) (end int, high8 bool) {
	const highs = 0x8080808080808080
	var high uint64
	// t is the text not yet read: reading at its start, rather than at
	// an index of s, spares the loop its bounds checks.
	t := s[i:]
	for len(t) >= 8 {
		x := binary.LittleEndian.Uint64(t)
		if hit := plainFlags(x); hit != 0 {
			first := bits.TrailingZeros64(hit) >> 3
			high |= x & (1<<(8*first) - 1)
			return len(s) - len(t) + first, high&highs != 0
		}
		high |= x
		t = t[8:]
	}
	return len(s) - len(t), high&highs != 0
}
