package contracts

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"

	"github.com/toolgate/toolgate/internal/jsontape"
)

// Numbers in arguments are bounded before anything computes with them.
// JSON lets a caller write any number of digits and any exponent, and the
// schema library reads every number it checks into a big.Rat: 1e999999
// becomes a million-digit integer, and an array of them in a 9 KB request
// costs half a minute of CPU, bounded by neither the deadline nor maxItems
// (the library reads the items before it counts them). So a number in the
// arguments is refused (bad_args, naming the argument) unless:
//
//   - it has at most maxNumberDigits significant digits (from its first
//     non-zero digit to its last non-zero digit);
//   - it is zero, or its magnitude is at least 10^-maxNumberExponent and
//     below 10^maxNumberExponent (a zero may not carry an exponent beyond
//     ±maxNumberExponent either);
//   - it is at most maxNumberChars characters long as written.
//
// Every int64 and uint64, and every float64 in its shortest form, in either
// notation (1e300 spelled out has 301 characters), is within the bounds; at
// the bounds, big.Rat costs microseconds. Go values that are not JSON
// numbers (a NaN or infinite float64 handed over by an embedder) are refused
// the same way.

// The bounds of an argument number.
const (
	maxNumberDigits   = 100
	maxNumberExponent = 400
	maxNumberChars    = 1000
)

// numberShape is a JSON number literal in scientific form: its significant
// digits d1…dn at s[first…last] (skipping the decimal point) and the decimal
// exponent of d1, so that |x| = d1.d2…dn × 10^exp. A zero has no significant
// digits (count 0) and exp is the exponent as written.
type numberShape struct {
	s           string
	neg         bool
	first, last int // indices into s of the first and last significant digit
	count       int // significant digits
	exp         int
}

// parseNumber reads a JSON number literal; ok is false when s is not one.
// It does not allocate.
func parseNumber(s string) (n numberShape, ok bool) {
	if !jsontape.IsNumber(s) {
		return n, false
	}
	n.s = s
	i := 0
	if s[0] == '-' {
		n.neg, i = true, 1
	}
	intStart := i
	for i < len(s) && isDigit(s[i]) {
		i++
	}
	intLen := i - intStart
	fracStart := i
	if i < len(s) && s[i] == '.' {
		i++
		fracStart = i
		for i < len(s) && isDigit(s[i]) {
			i++
		}
	}
	mantEnd := i
	exp := 0
	if i < len(s) { // e or E
		i++
		negExp := false
		if s[i] == '+' || s[i] == '-' {
			negExp = s[i] == '-'
			i++
		}
		for ; i < len(s); i++ {
			if exp < 1e6 { // saturate: anything this large is out of bounds
				exp = exp*10 + int(s[i]-'0')
			}
		}
		if negExp {
			exp = -exp
		}
	}
	// Digit j of the mantissa (the integer digits, then the fraction's)
	// stands for 10^(intLen-1-j) before the exponent applies.
	first, last := -1, -1
	j := 0
	for k := intStart; k < mantEnd; k++ {
		if s[k] == '.' {
			continue
		}
		if s[k] != '0' {
			if first < 0 {
				first = k
				n.exp = intLen - 1 - j + exp
			}
			last = k
		}
		j++
	}
	if first < 0 {
		n.exp = exp
		return n, true
	}
	n.first, n.last = first, last
	n.count = last - first + 1
	if first < fracStart-1 && last >= fracStart {
		n.count-- // the decimal point lies between them
	}
	return n, true
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// inBounds reports whether the number is within the argument bounds.
func (n *numberShape) inBounds() bool {
	if len(n.s) > maxNumberChars || n.count > maxNumberDigits {
		return false
	}
	if n.count == 0 {
		return n.exp >= -maxNumberExponent && n.exp <= maxNumberExponent
	}
	return n.exp >= -maxNumberExponent && n.exp < maxNumberExponent
}

// numberInBounds reports whether s is a JSON number within the argument
// bounds. Short plain integers, the common case, take no parsing.
func numberInBounds(s string) bool {
	if len(s) > 0 && len(s) <= 18 {
		plain := true
		for i := 0; i < len(s) && plain; i++ {
			plain = isDigit(s[i]) || i == 0 && s[i] == '-' && len(s) > 1
		}
		if plain && (s[0] != '0' || len(s) == 1) && !strings.HasPrefix(s, "-0") {
			return true
		}
	}
	n, ok := parseNumber(s)
	return ok && n.inBounds()
}

// appendInteger appends an integral number within bounds as plain digits
// ("1e2" and "100.0" are "100"); ok is false for a number with a fraction.
func (n *numberShape) appendInteger(dst []byte) ([]byte, bool) {
	if n.count == 0 {
		return append(dst, '0'), true
	}
	zeros := n.exp - (n.count - 1) // the place of the last significant digit
	if zeros < 0 {
		return dst, false
	}
	if n.neg {
		dst = append(dst, '-')
	}
	for k := n.first; k <= n.last; k++ {
		if n.s[k] != '.' {
			dst = append(dst, n.s[k])
		}
	}
	for range zeros {
		dst = append(dst, '0')
	}
	return dst, true
}

// checkNumbers finds a number in decoded arguments that is out of bounds
// and returns the *ArgError naming it; nil when every number is within
// them. Of several, the one first in key order is named, so the message
// does not depend on map order.
func checkNumbers(args map[string]any) *ArgError {
	path, lit, bad := badNumber(args)
	if !bad {
		return nil
	}
	var ptr strings.Builder
	for i := len(path) - 1; i >= 0; i-- { // path is innermost first
		ptr.WriteByte('/')
		ptr.WriteString(escapePointer(path[i]))
	}
	return &ArgError{Pointer: ptr.String(), Problem: ProblemNumber, Got: gotLiteral(lit)}
}

// badNumber returns the path (innermost step first) and the literal of an
// out-of-bounds number in v.
func badNumber(v any) (path []string, lit string, bad bool) {
	switch t := v.(type) {
	case json.Number:
		if !numberInBounds(string(t)) {
			return nil, string(t), true
		}
	case float64:
		if math.IsNaN(t) || math.IsInf(t, 0) {
			return nil, strconv.FormatFloat(t, 'g', -1, 64), true
		}
	case float32:
		if f := float64(t); math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, strconv.FormatFloat(f, 'g', -1, 32), true
		}
	case []any:
		for i, e := range t {
			if p, l, b := badNumber(e); b {
				return append(p, strconv.Itoa(i)), l, true
			}
		}
	case map[string]any:
		var key string
		for k, e := range t {
			if bad && k >= key {
				continue
			}
			if p, l, b := badNumber(e); b {
				path, lit, bad, key = p, l, true, k
			}
		}
		if bad {
			return append(path, key), lit, true
		}
	}
	return nil, "", false
}
